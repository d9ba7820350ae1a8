"""How many replicas a member's Deployment gets, and the pool decision it then acknowledges.

*Why a module of its own:* raising a Deployment is the one act of this controller that starts a
model on the GPU, and the pool, not the member, decides it. What to ask for is a pure rule
(:func:`~controlplane.controllers.modelpool.grant.deployment_replicas`); deciding it *safely*
takes state and a live read the orchestrator should not carry inline: when an InferenceService
no pool lists was first seen, the confirmation of a raise against the API server, and the
Deployment generation our own apply returned (what the acknowledgement names). The member's side
of the grant handshake is here, in one place, so a change to the grant touches one file.

**Pool members run only when granted** (docs/modelpool.md,
:mod:`~controlplane.controllers.modelpool.grant`). The Deployment's replicas are
:func:`~controlplane.controllers.modelpool.grant.deployment_replicas`: ``spec.replicas`` for an
InferenceService no pool lists; for a pool member, what its pool decided in its own status
(``status.members[].slot``): 1 when granted, 0 when released, and otherwise never more than the
Deployment already has. The member's ``spec.replicas`` is not read while a pool lists it. Lowering
is always allowed; raising (creating the Deployment above 0 included) is confirmed with the API
server first (:meth:`ReplicaDecider.confirm_raise`): a live LIST of the namespace's ModelPools (a
grant revoked since the cache was filled starts nothing, and a pool applied together with the
member but not yet cached holds it back). An InferenceService no pool lists is started only once
it has been known for :data:`UNLISTED_SETTLE_SECONDS`: ``kubectl apply -f`` of a directory
creates the members a few milliseconds before their pool, faster than any reconcile, and a member
started in that gap would run beside the pool's choice. Until ``ModelReady`` is True (the weights,
:mod:`~controlplane.controllers.inferenceservice.fetching`) the Deployment is held at 0.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, ModelPool, PoolDecisionSeen
from controlplane.clock import TimeSource
from controlplane.controllers.inferenceservice.status import Hold, chosen_by
from controlplane.controllers.inferenceservice.weightsstatus import WeightsVerdict
from controlplane.controllers.modelpool.claims import standing_pools
from controlplane.controllers.modelpool.grant import (
    decision_seen,
    deployment_replicas,
    member_slots,
    slot_server_pool,
    withheld_by,
)
from controlplane.runtime.cache import NAMESPACE_INDEX, Object
from controlplane.runtime.client import KubeClient
from controlplane.runtime.informer import Informer

#: The log of the reconciler this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.controllers.inferenceservice.reconciler")

#: How long an InferenceService no pool lists waits, from when this controller first saw it,
#: before its Deployment is first raised: ``kubectl apply -f`` of a pool and its members creates
#: the members first, one round trip apart, and a member started before its pool exists would run
#: beside the pool's choice. A model load takes far longer than this.
UNLISTED_SETTLE_SECONDS: Final = 2.0


@dataclass(frozen=True, slots=True)
class Replicas:
    """What the Deployment gets, why it may get less than asked, and the objects it was decided
    from (the live ones when a raise was confirmed)."""

    count: int
    hold: Hold
    pools: tuple[str, ...]
    obj: Object
    #: The pool decision ``count`` follows, to acknowledge once applied (``status.poolDecision``).
    decision: dict[str, Any] | None = None
    #: The pool that serves it from its slot server, if one does: its own Deployment stays at 0.
    slot_server: Mapping[str, Any] | None = None


def asked_replicas(deployment: Mapping[str, Any] | None) -> int:
    """The replicas the Deployment is asked for: 0 when there is none yet."""
    if deployment is None:
        return 0
    return int((deployment.get("spec") or {}).get("replicas") or 0)


class ReplicaDecider:
    """The Deployment's replicas by the grant (from the pools' cache, or a live list before a
    raise), and the acknowledgement of the pool decision they follow."""

    def __init__(self, pools: Informer, clock: TimeSource) -> None:
        self.pools = pools
        self.clock = clock
        #: Per key, the uid and when we first saw it, for :data:`UNLISTED_SETTLE_SECONDS`.
        self._first_seen: dict[str, tuple[str | None, float]] = {}
        #: Per key, the Deployment generation our last apply returned: the cache may be older, and
        #: an acknowledgement names at least this one.
        self._applied: dict[str, int] = {}

    def forget(self, key: str) -> None:
        """The InferenceService is gone: what was remembered of it goes too."""
        self._first_seen.pop(key, None)
        self._applied.pop(key, None)

    def applied(self, key: str, deployment: Mapping[str, Any]) -> None:
        """Our apply of the Deployment returned ``deployment``: remember its generation."""
        self._applied[key] = int(deployment["metadata"].get("generation") or 0)

    def decide(
        self,
        obj: Object,
        deployment: Mapping[str, Any] | None,
        pools: Iterable[Object] | None = None,
        *,
        weights: WeightsVerdict,
    ) -> Replicas:
        """The Deployment's replicas by the grant, from the cached pools unless ``pools`` (a live
        list) is given; an unlisted InferenceService still settling is held at what it has, and
        one whose weights are not ready at 0 (a server without its file would only crash)."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        if pools is None:
            pools = self.pools.store.by_index(NAMESPACE_INDEX, namespace)
        # A pool refused the member (another pool's claim stands) decides nothing about it.
        pools = standing_pools(pools, meta["name"])
        slots = member_slots(pools, meta["name"])
        listing = tuple(slots)
        wanted = InferenceService.from_dict(obj).spec.desired_replicas()
        current = asked_replicas(deployment)
        count = deployment_replicas(wanted, slots, current)
        hold = Hold(
            withheld_by=withheld_by(slots),
            chosen_by=chosen_by(pools, meta["name"]) if listing else None,
        )
        settle = self._settle_seconds(f"{namespace}/{meta['name']}", meta.get("uid"))
        if not listing and count > current and settle > 0:
            count, hold = current, replace(hold, settle_seconds=settle)
        if not weights.ready:
            count = 0
            hold = replace(hold, weights=weights.message, weights_failed=weights.failed)
        served = slot_server_pool(pools, meta["name"])
        if served is not None:
            count = 0  # its model runs in the pool's slot server
        decision = decision_seen(pools, meta["name"], None)
        return Replicas(count, hold, listing, obj, decision, served)

    async def confirm_raise(
        self,
        client: KubeClient,
        key: str,
        cached: Object,
        deployment: Mapping[str, Any] | None,
        weights: WeightsVerdict,
    ) -> Replicas:
        """Decide a raise again from the API server, not the caches.

        A live LIST of the namespace's ModelPools (a consistent read): a grant the pool revoked
        after our cache was filled starts nothing, and a pool created together with the member,
        not cached yet, holds it back. What remains is one round trip, from the LIST to our apply:
        a pool that releases the member, sees it released (its Deployment still at 0) and grants
        another, all inside that round trip, would see our raise only afterwards. The pool needs
        two status writes and a watch delivery to do so; we need one request. Raises are rare (a
        swap's last step), and the pool keeps watching the Deployment, so it would then hold every
        further grant until the raised member is drained again.
        """
        namespace = cached["metadata"].get("namespace") or ""
        pools = (await client.list(ModelPool.resource(), namespace)).items
        replicas = self.decide(cached, deployment, pools, weights=weights)
        if replicas.count > asked_replicas(deployment):
            log.info("%s: raising the Deployment, confirmed live", key)
        return replicas

    def acknowledgement(
        self, key: str, replicas: Replicas, deployment: Mapping[str, Any] | None
    ) -> PoolDecisionSeen | None:
        """The pool decision the Deployment now follows, with the generation it was applied at
        (docs/modelpool.md, "The grant"): what the pool waits for before it counts a release.
        None when no pool decided about it."""
        if replicas.decision is None:
            return None
        generation = None
        if deployment is not None:
            cached = int(deployment["metadata"].get("generation") or 0)
            generation = max(cached, self._applied.get(key, 0))
        return PoolDecisionSeen.from_dict({**replicas.decision, "deploymentGeneration": generation})

    def _settle_seconds(self, key: str, uid: str | None) -> float:
        """Seconds left before an InferenceService first seen just now may be started unlisted."""
        now = self.clock()
        seen = self._first_seen.get(key)
        if seen is None or seen[0] != uid:
            seen = (uid, now)
            self._first_seen[key] = seen
        return max(0.0, seen[1] + UNLISTED_SETTLE_SECONDS - now)
