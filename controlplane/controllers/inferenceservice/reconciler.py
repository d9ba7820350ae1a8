"""The InferenceService reconciler: reads the caches, applies what differs, writes status on change.

*Why one module of this size:* the Deployment's writes, the KV cache's save before a lowering and
restore before a readiness gate, and the status all act on one InferenceService in one reconcile
and must be ordered with each other; the pure rules live beside it (``desired``, ``status``,
``kvcache``, ``weights``, ``weightsstatus``), and the weights' I/O in ``fetching``.

**Weights first** (docs/inferenceservice.md, "Model weights"): the reconcile starts by asking
:class:`~controlplane.controllers.inferenceservice.fetching.WeightsFetcher` where the weights
stand (for a downloaded source: creating its fetch Job and reading its progress); until
``ModelReady`` is True the Deployment is held at 0, and once it is the pod is pinned to the node
that holds the file. A Deployment the API server refuses (``spec.pod``'s pass-through types) is
``Failed`` with reason ``DeploymentRefused`` and the server's message.

**Pool members run only when granted** (docs/modelpool.md,
:mod:`~controlplane.controllers.modelpool.grant`). The Deployment's replicas are
:func:`~controlplane.controllers.modelpool.grant.deployment_replicas`: ``spec.replicas`` for an
InferenceService no pool lists; for a pool member, what its pool decided in its own status
(``status.members[].slot``): 1 when granted, 0 when released, and otherwise never more than the
Deployment already has. The member's ``spec.replicas`` is not read while a pool lists it. Lowering
is always allowed; raising (creating the Deployment above 0 included) is confirmed with the API
server first (:meth:`InferenceServiceReconciler._confirm_raise`): a live LIST of the namespace's
ModelPools (a grant revoked since the cache was filled starts nothing, and a pool applied
together with the member but not yet cached holds it back). An InferenceService no pool lists is
started only once it has been known for :data:`UNLISTED_SETTLE_SECONDS`: ``kubectl apply -f`` of
a directory creates the members a few milliseconds before their pool, faster than any reconcile,
and a member started in
that gap would run beside the pool's choice.

**Writes.** The children (:mod:`~controlplane.controllers.inferenceservice.desired`, and the
NetworkPolicy of :mod:`~controlplane.controllers.inferenceservice.network`, applied first so that
no member pod starts open to the cluster; deleted when ``--member-network-policies=false``) are
written with server-side apply as ``modelpool-operator`` (forced: the fields we own are ours), and
only when the cached child differs from what is wanted. "Differs" is decided by
:func:`~controlplane.controllers.children.needs_apply`: every field we want must be present with
the same value in the cached object (server defaults are extra fields and do not count), and the
wanted object carries a hash of itself in the ``inference.modelpool.dev/spec-hash`` annotation, so
a field we stopped wanting (a removed argument, a dropped node selector) changes the hash and is
applied away too. ``resources`` are compared through the hash only, because the API server
canonicalises quantities (``0.5`` becomes ``500m``). A child of that name that another controller
owns is never taken over: the InferenceService stays Pending and says which object is in the way.

**Status** (:mod:`~controlplane.controllers.inferenceservice.status`) is written through the status
subresource with the cached ``resourceVersion`` and only when it differs from the cached status; a
409 requeues. Each phase change is recorded as an ``events.k8s.io`` event on the InferenceService.

Pods are watched (by the ``inference.modelpool.dev/inferenceservice`` label, which the
Deployment's template carries) to know when the last one is gone and when one needs its KV cache
restored, pools to know whether a member may be raised and whether its pool is swapping to it, and
EndpointSlices to know where a pod's server answers; nothing is polled.

**The KV cache** (``spec.kvCache``, rules in :mod:`~controlplane.controllers.inferenceservice.kv
cache`, docs/kv-cache.md): before the Deployment of an enabled InferenceService is lowered to 0,
the used slots of its Ready pod are saved (:class:`~controlplane.probes.slotcache.SlotCacheClient`,
bounded by ``timeoutSeconds``) and ``status.kvCache.lastSave`` is written, *then* the Deployment is
lowered, whatever the save's outcome. A pod that carries the restore readiness gate gets the saved
slots restored once its containers are ready (bounded the same way), ``status.kvCache.lastRestore``
written, and the gate's condition set True on ``pods/status`` (a strategic-merge patch: conditions
merge by type). A save or restore that fails or times out is a Warning event and
``modelpool_kv_cache_operations_total{outcome}``; it never fails the reconcile. Both run inside the
reconcile (a worker is held for at most ``timeoutSeconds``), so they are ordered with the
Deployment writes of the same InferenceService.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from controlplane.api.v1alpha1 import (
    InferenceService,
    InferenceServiceStatus,
    KvCacheOperation,
    ModelPool,
    PoolDecisionSeen,
    set_condition,
)
from controlplane.api.v1alpha1.conditions import FALSE
from controlplane.api.v1alpha1.inferenceservice import PHASE_FAILED, PHASE_PENDING
from controlplane.clock import TimeSource
from controlplane.controllers.children import (
    FIELD_MANAGER,
    foreign_child,
    is_controlled_by,
    needs_apply,
)
from controlplane.controllers.inferenceservice import kvcache
from controlplane.controllers.inferenceservice.desired import (
    ISVC_LABEL,
    PORT_NAME,
    desired_deployment,
    desired_service,
    owner_reference,
)
from controlplane.controllers.inferenceservice.disruption import (
    desired_disruption_budget,
    leaving_node,
    pods_leaving,
)
from controlplane.controllers.inferenceservice.fetching import WeightsFetcher
from controlplane.controllers.inferenceservice.kvcache import RestoreStep
from controlplane.controllers.inferenceservice.metrics import (
    KV_CACHE_DURATION,
    KV_CACHE_OPERATIONS,
)
from controlplane.controllers.inferenceservice.network import (
    MemberNetworkPolicy,
    desired_network_policy,
)
from controlplane.controllers.inferenceservice.rollout import (
    UP_TO_DATE,
    Gate,
    RolloutVerdict,
    pod_change,
    rollout_gate,
    running_fetch_image,
)
from controlplane.controllers.inferenceservice.status import (
    CONDITION_READY,
    Hold,
    chosen_by,
    compute_phase,
    desired_status,
    explain_hold,
    served_phase,
    status_changed,
    update_transition,
)
from controlplane.controllers.inferenceservice.weights import (
    MODEL_OF_LABEL,
    WeightsPlacement,
)
from controlplane.controllers.inferenceservice.weightsstatus import (
    WeightsVerdict,
    transition_event,
    with_weights,
    without_fetch,
)
from controlplane.controllers.modelpool.grant import (
    decision_seen,
    deployment_replicas,
    listed_members,
    member_slots,
    slot_server_pool,
    withheld_by,
)
from controlplane.controllers.modelpool.slotserver import member_service_selector
from controlplane.probes.idle import IdleProbe
from controlplane.probes.llamacpp import SlotsProbe
from controlplane.probes.slotcache import RESTORE, SAVE, CacheOutcome, CacheReport, SlotCacheClient
from controlplane.runtime.cache import NAMESPACE_INDEX, Object
from controlplane.runtime.client import STRATEGIC_MERGE_PATCH, KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import SERVICE_NAME_LABEL, member_urls, pod_urls
from controlplane.runtime.errors import Conflict, Invalid, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.resources import (
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    JOBS,
    NETWORK_POLICIES,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    SERVICES,
)

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "inferenceservice"
EVENT_REPORTER: Final = "modelpool-operator/inferenceservice"
MAX_CONCURRENT_RECONCILES: Final = 2

#: How long an InferenceService no pool lists waits, from when this controller first saw it,
#: before its Deployment is first raised: ``kubectl apply -f`` of a pool and its members creates
#: the members first, one round trip apart, and a member started before its pool exists would run
#: beside the pool's choice. A model load takes far longer than this.
UNLISTED_SETTLE_SECONDS: Final = 2.0
#: Writes of ``status.kvCache`` retried on a conflict (each re-reads the live object): the record
#: of a save must not be lost to a concurrent status write, or the restore would not find it.
KV_STATUS_WRITE_ATTEMPTS: Final = 4
#: The Ready reason of an InferenceService whose Deployment the API server refuses (a malformed
#: ``spec.pod.affinity`` or volume source, which the CRD keeps whole).
REASON_DEPLOYMENT_REFUSED: Final = "DeploymentRefused"
#: How soon a change waiting for a member no pool lists to be idle asks ``/slots`` again: the
#: only polling of an update, since ``/slots`` has no watch (as the pool's drain).
UPDATE_RECHECK_SECONDS: Final = 1.0
#: How soon a pod whose server is loaded but not yet behind its Service is looked at again.
KV_ENDPOINT_RECHECK_SECONDS: Final = 0.5


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


class InferenceServiceReconciler:
    """Level-triggered: reads the caches, applies what differs, writes status on change."""

    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        *,
        inference_services: Informer,
        deployments: Informer,
        services: Informer,
        pods: Informer,
        pools: Informer,
        endpoint_slices: Informer,
        weights: WeightsFetcher | None = None,
        slot_cache: SlotCacheClient | None = None,
        network_policies: Informer | None = None,
        network: MemberNetworkPolicy | None = None,
        idle_probe: IdleProbe | None = None,
        disruption_budgets: Informer | None = None,
        nodes: Informer | None = None,
        clock: TimeSource = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.inference_services = inference_services
        self.deployments = deployments
        self.services = services
        self.pods = pods
        self.pools = pools
        self.endpoint_slices = endpoint_slices
        #: None (unit tests of other rules): only sources read where they are are understood.
        self.weights = weights
        self.slot_cache = slot_cache or SlotCacheClient()
        #: Asks a member no pool lists whether a change to its pod may go in (``/slots``).
        self.idle_probe: IdleProbe = idle_probe or SlotsProbe()
        #: None (unit tests of other rules): no PodDisruptionBudget is read or written, and no
        #: node is known cordoned (docs/inferenceservice.md, "Node drains").
        self.disruption_budgets = disruption_budgets
        self.nodes = nodes
        #: None (unit tests of other rules): no NetworkPolicy is read or written.
        self.network_policies = network_policies
        self.network = network or MemberNetworkPolicy()
        self.clock = clock
        self.wall_clock = wall_clock
        #: Per key, the uid and when we first saw it, for :data:`UNLISTED_SETTLE_SECONDS`.
        self._first_seen: dict[str, tuple[str | None, float]] = {}
        #: Per pod uid: when a pod to restore into was first seen loaded but not yet behind its
        #: Service (on :attr:`clock`); past ``timeoutSeconds`` the restore is given up.
        self._unlisted_since: dict[str, float] = {}
        #: Keys whose Deployment we lowered and whose cached Deployment still shows it up: a
        #: reconcile on that stale cache must not save the draining pod's slots a second time.
        self._lowered: set[str] = set()
        #: Per key, the Deployment generation our last apply returned: the cache may be older, and
        #: an acknowledgement names at least this one.
        self._applied: dict[str, int] = {}
        #: Pods (uids) whose restore gate we opened and whose cached copy does not show it yet: a
        #: reconcile on that stale cache must not restore them a second time.
        self._gates_opened: set[str] = set()

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.inference_services.store.get(key)
        if obj is None:
            self._first_seen.pop(key, None)
            self._applied.pop(key, None)
            return Result()  # deleted: the garbage collector removes what it owned
        if obj["metadata"].get("deletionTimestamp"):
            return Result()
        deployment = self.deployments.store.get(key)
        service = self.services.store.get(key)
        policy = self._cached_policy(key)
        budget = self.disruption_budgets.store.get(key) if self.disruption_budgets else None
        conflict = foreign_child(
            "InferenceService",
            obj["metadata"].get("uid"),
            (
                ("Deployment", deployment),
                ("Service", service),
                ("NetworkPolicy", policy),
                ("PodDisruptionBudget", budget),
            ),
        )
        verdict, placement, requeue = await self._weights(obj)
        rollout = UP_TO_DATE
        replicas = self._replicas(obj, deployment, weights=verdict)
        if conflict is None and replicas.count > _deployment_replicas(deployment):
            try:
                replicas = await self._confirm_raise(key, obj, deployment, verdict)
            except NotFound:
                return Result()  # deleted meanwhile
        isvc = InferenceService.from_dict(replicas.obj)
        pods = self._pod_count(isvc)
        if conflict is None:
            # Before the Deployment: a member's pod never starts open to the whole cluster.
            served = replicas.slot_server
            selector = member_service_selector(served["metadata"]["name"]) if served else None
            await self._apply_network_policy(key, isvc, policy, selector)
            if self.disruption_budgets is not None:
                # Before the Deployment too: no eviction reaches a pod that may serve.
                wanted_budget = desired_disruption_budget(isvc)
                if needs_apply(budget, wanted_budget):
                    await self.client.apply(POD_DISRUPTION_BUDGETS, wanted_budget,
                                            field_manager=FIELD_MANAGER, force=True)  # fmt: skip
                    log.info("%s: applied PodDisruptionBudget", key)
            if (running := running_fetch_image(deployment, pods)) is not None:
                placement = replace(placement, fetch_image=running)
            wanted = desired_deployment(
                isvc, replicas.count, placement=placement, node=verdict.status.node
            )
            if _deployment_replicas(deployment) == 0:
                self._lowered.discard(key)  # the cache has caught up with our last lowering
            write = needs_apply(deployment, wanted)
            leaving = self._pods_leaving(isvc)
            if write or leaving:
                changes_pod = write and pod_change(deployment, wanted)
                rollout = await self._rollout_gate(isvc, changes_pod, leaving, replicas, pods)
                write = write and not rollout.pending
                if rollout.pending and not replicas.pools:
                    requeue = _sooner(requeue, UPDATE_RECHECK_SECONDS)  # /slots has no watch
                elif leaving and not rollout.pending and replicas.count > 0:
                    await self._move_off(key, leaving)
            if write:
                lowering = replicas.count < _deployment_replicas(deployment)
                raising = replicas.count > _deployment_replicas(deployment)
                if lowering and key not in self._lowered:
                    isvc = await self._save_kv_cache(key, isvc)
                if raising and deployment is not None:
                    # A raise is conditional on the Deployment we decided on (docs/faults.md,
                    # "Fencing"): one held up on its way while a successor lowered or rewrote it
                    # is refused with 409, never applied over the successor's.
                    wanted["metadata"]["resourceVersion"] = deployment["metadata"].get(
                        "resourceVersion"
                    )
                try:
                    deployment = await self.client.apply(
                        DEPLOYMENTS, wanted, field_manager=FIELD_MANAGER, force=True
                    )
                except Conflict:
                    log.info("%s: raise refused: the Deployment changed since it was read", key)
                    return Result(requeue=True)
                except Invalid as err:
                    # spec.pod's pass-through types (affinity, volumes) are validated here, by
                    # the Deployment's schema: say so, and wait for the spec to change.
                    refused = f"the API server refused its Deployment: {err.message}"
                    log.warning("%s: %s", key, refused)
                    return await self._refused(obj, isvc, refused)
                self._applied[key] = int(deployment["metadata"].get("generation") or 0)
                if lowering:
                    self._lowered.add(key)
                elif replicas.count > 0:
                    self._lowered.discard(key)
                log.info("%s: applied Deployment (replicas %d)", key, replicas.count)
            wanted = desired_service(isvc, selector)
            if needs_apply(service, wanted):
                await self.client.apply(SERVICES, wanted, field_manager=FIELD_MANAGER, force=True)
                log.info("%s: applied Service", key)
            isvc, restore_requeue = await self._restore_kv_cache(key, isvc)
            requeue = _sooner(requeue, restore_requeue)
        decision = compute_phase(replicas.count, deployment, pods, conflict)
        decision = served_phase(decision, replicas.slot_server, isvc.name)
        decision = explain_hold(decision, replicas.hold)
        if replicas.hold.settling:
            requeue = min(requeue or replicas.hold.settle_seconds, replicas.hold.settle_seconds)
        settle = Result(requeue_after=requeue) if requeue is not None else Result()
        status = desired_status(
            isvc, decision, deployment, replicas.pools, replicas.count, update=rollout
        )
        with_weights(status, verdict, isvc.metadata.generation)
        if conflict is None:
            status.pool_decision = self._acknowledgement(key, replicas, deployment)
        if not status_changed(isvc.status, status):
            return settle
        previous = isvc.status.phase
        weights_event = transition_event(isvc.status.model, verdict.status)
        update_event = update_transition(isvc.status, status)
        isvc.status = status
        try:
            await self.client.update_status(InferenceService.resource(), isvc.to_dict())
        except Conflict:
            return Result(requeue=True)  # our cache was stale; the watch brings the new version
        except NotFound:
            return Result()
        if weights_event is not None:
            self.recorder.event(obj, weights_event.type, weights_event.reason, "FetchModel",
                                weights_event.note)  # fmt: skip
        if update_event is not None:
            self.recorder.event(obj, "Normal", update_event[0], "UpdatePod", update_event[1])
        if previous != decision.phase:
            log.info("%s: phase %s -> %s (%s)", key, previous, decision.phase, decision.reason)
            self.recorder.event(
                obj,
                "Warning" if decision.phase in (PHASE_FAILED, PHASE_PENDING) else "Normal",
                decision.phase,
                "Reconcile",
                f"phase {previous or 'unset'} -> {decision.phase}: {decision.message}",
            )
        return settle

    async def _rollout_gate(
        self,
        isvc: InferenceService,
        changes_pod: bool,
        leaving: Sequence[Mapping[str, Any]],
        replicas: Replicas,
        pods: int,
    ) -> RolloutVerdict:
        """Whether the wanted Deployment may be written and the pods on a cordoned node deleted
        now, asking the ready endpoints' ``/slots`` when the rules need it
        (:mod:`~controlplane.controllers.inferenceservice.rollout`)."""
        gate = functools.partial(
            rollout_gate,
            changes_pod=changes_pod,
            pods=pods,
            wanted_replicas=replicas.count,
            pooled=bool(replicas.pools),
            leaving=leaving_node(leaving),
        )
        verdict = gate()
        if verdict.gate is not Gate.PROBE:
            return verdict
        urls = member_urls(self.endpoint_slices.store, isvc.namespace or "", isvc.name)
        key = f"{isvc.namespace}/{isvc.name}"
        return gate(reports=[(url, await self.idle_probe.probe(url, member=key)) for url in urls])

    async def _refused(self, obj: Object, isvc: InferenceService, message: str) -> Result:
        """Failed, ``DeploymentRefused``: the spec makes a Deployment the API server refuses."""
        status = InferenceServiceStatus.from_dict(isvc.status.to_dict())
        status.phase = PHASE_FAILED
        set_condition(status.conditions, CONDITION_READY, FALSE, REASON_DEPLOYMENT_REFUSED, message,
                      isvc.metadata.generation)  # fmt: skip
        if status_changed(isvc.status, status):
            isvc.status = status
            try:
                await self.client.update_status(InferenceService.resource(), isvc.to_dict())
            except (Conflict, NotFound):
                return Result(requeue=True)
            self.recorder.event(obj, "Warning", REASON_DEPLOYMENT_REFUSED, "Reconcile", message)
        return Result()

    def _acknowledgement(
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

    async def _weights(self, obj: Object) -> tuple[WeightsVerdict, WeightsPlacement, float | None]:
        """Where the weights stand (and the fetch Job, for a fetched source): see
        :mod:`~controlplane.controllers.inferenceservice.fetching`."""
        isvc = InferenceService.from_dict(obj)
        if self.weights is not None:
            return await self.weights.observe(isvc, owner_reference(isvc))
        verdict = without_fetch(isvc)
        if verdict is None:
            raise RuntimeError(f"{isvc.name}: a downloaded source needs the WeightsFetcher")
        return verdict, WeightsPlacement(), None

    def _replicas(
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
        pools = list(pools)
        slots = member_slots(pools, meta["name"])
        listing = tuple(slots)
        wanted = InferenceService.from_dict(obj).spec.desired_replicas()
        current = _deployment_replicas(deployment)
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

    async def _confirm_raise(
        self,
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
        pools = (await self.client.list(ModelPool.resource(), namespace)).items
        replicas = self._replicas(cached, deployment, pools, weights=weights)
        if replicas.count > _deployment_replicas(deployment):
            log.info("%s: raising the Deployment, confirmed live", key)
        return replicas

    def _cached_policy(self, key: str) -> Object | None:
        """The cached NetworkPolicy of this name when the operator writes them, else None (a
        user's policy of that name is then nobody's concern)."""
        if self.network_policies is None or not self.network.enabled:
            return None
        return self.network_policies.store.get(key)

    async def _apply_network_policy(
        self,
        key: str,
        isvc: InferenceService,
        policy: Object | None,
        selector: Mapping[str, str] | None,
    ) -> None:
        """Apply the member's NetworkPolicy when the cached one differs (once, as the Service),
        in front of the pods its Service selects (``selector``: a pool's slot server); with
        ``--member-network-policies=false``, delete the one we wrote, if any."""
        if self.network_policies is None:
            return
        if self.network.enabled:
            wanted = desired_network_policy(isvc, self.network, selector)
            if needs_apply(policy, wanted):
                await self.client.apply(
                    NETWORK_POLICIES, wanted, field_manager=FIELD_MANAGER, force=True
                )
                log.info("%s: applied NetworkPolicy", key)
            return
        ours = self.network_policies.store.get(key)
        if ours is not None and is_controlled_by(ours, isvc.metadata.uid):
            # On its uid: one recreated meanwhile is the next reconcile's (409 here).
            uid = ours["metadata"].get("uid")
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(NETWORK_POLICIES, isvc.name, isvc.namespace, uid=uid)
            log.info("%s: deleted NetworkPolicy (member network policies are off)", key)

    def _settle_seconds(self, key: str, uid: str | None) -> float:
        """Seconds left before an InferenceService first seen just now may be started unlisted."""
        now = self.clock()
        seen = self._first_seen.get(key)
        if seen is None or seen[0] != uid:
            seen = (uid, now)
            self._first_seen[key] = seen
        return max(0.0, seen[1] + UNLISTED_SETTLE_SECONDS - now)

    def _pods_leaving(self, isvc: InferenceService) -> list[Mapping[str, Any]]:
        """The member's live pods on a cordoned node (none when nodes are not watched)."""
        if self.nodes is None:
            return []
        return pods_leaving(self._pods(isvc), self.nodes.store.get)

    async def _move_off(self, key: str, leaving: Sequence[Mapping[str, Any]]) -> None:
        """Delete the pods a drain waits for, once the idle gate has opened (on their uid: a pod
        replaced meanwhile is not this decision's). The Deployment makes the next one, which is
        scheduled off the cordoned node."""
        for pod in leaving:
            meta = pod["metadata"]
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(PODS, meta["name"], meta["namespace"], uid=meta["uid"])
            log.info("%s: deleted pod %s, idle, off cordoned node %s", key, meta["name"],
                     pod["spec"]["nodeName"])  # fmt: skip

    def _pod_keys(self, isvc: InferenceService) -> set[str]:
        label = f"{ISVC_LABEL}={isvc.name}"
        keys = set(self.pods.store.index_keys("label", label))
        return keys & set(self.pods.store.index_keys(NAMESPACE_INDEX, isvc.namespace or ""))

    def _pod_count(self, isvc: InferenceService) -> int:
        return len(self._pod_keys(isvc))

    def _pods(self, isvc: InferenceService) -> list[Object]:
        return [pod for key in sorted(self._pod_keys(isvc)) if (pod := self.pods.store.get(key))]

    # -- the KV cache ------------------------------------------------------------------------------

    async def _save_kv_cache(self, key: str, isvc: InferenceService) -> InferenceService:
        """Before the Deployment is lowered: save the Ready pod's used slots (bounded) and record
        it in ``status.kvCache.lastSave``. Returns the InferenceService as last written."""
        if not isvc.spec.kv_cache_enabled() or isvc.spec.kv_cache is None:
            return isvc
        pod = kvcache.pod_to_save_from(self._pods(isvc))
        url = None
        if pod is not None:
            url = self._pod_url(isvc, pod)
        if pod is None or url is None:
            log.info("%s: no ready server to save the KV cache from", key)
            return isvc
        pod_name = str(pod["metadata"]["name"])
        report = await self.slot_cache.save(url, timeout=isvc.spec.kv_cache.timeout(), member=key)
        self._record(isvc, SAVE, report, pod_name)
        record = kvcache.operation_record(report, pod_name, self.wall_clock())
        return await self._write_kv_status(isvc, save=record)

    async def _restore_kv_cache(
        self, key: str, isvc: InferenceService
    ) -> tuple[InferenceService, float | None]:
        """Each pod with the restore gate not yet True: restore (bounded), record, open the gate.
        Returns the InferenceService as last written and when to look again, if needed."""
        requeue: float | None = None
        for pod in self._pods(isvc):
            step = kvcache.restore_step(pod, isvc)
            uid = str(pod["metadata"].get("uid"))
            if step is RestoreStep.DONE:
                self._gates_opened.discard(uid)
                continue
            if step is RestoreStep.WAIT or uid in self._gates_opened:
                continue
            pod_name = str(pod["metadata"]["name"])
            if step is RestoreStep.NOTHING:
                why = "spec.kvCache is off" if not isvc.spec.kv_cache_enabled() else "nothing saved"
                await self._open_gate(isvc, pod, kvcache.restore_verdict(None, why))
                continue
            assert isvc.spec.kv_cache is not None  # RESTORE is only for an enabled cache
            timeout = isvc.spec.kv_cache.timeout()
            url = self._pod_url(isvc, pod)
            if url is None:
                # Judged on this controller's clock from when it first saw the server loaded but
                # unlisted, never from the kubelet's timestamps (another machine's clock).
                since = self._unlisted_since.setdefault(uid, self.clock())
                if self.clock() - since < timeout:
                    requeue = KV_ENDPOINT_RECHECK_SECONDS
                    continue
                report = CacheReport(
                    CacheOutcome.FAILED,
                    f"the server was not listed behind its Service within {timeout} s",
                )
            else:
                slots = kvcache.slots_to_restore(isvc.status.kv_cache)
                report = await self.slot_cache.restore(url, slots, timeout=timeout, member=key)
            self._unlisted_since.pop(uid, None)
            self._record(isvc, RESTORE, report, pod_name)
            record = kvcache.operation_record(report, pod_name, self.wall_clock())
            isvc = await self._write_kv_status(isvc, restore=record)
            await self._open_gate(isvc, pod, kvcache.restore_verdict(report))
        return isvc, requeue

    def _pod_url(self, isvc: InferenceService, pod: Mapping[str, Any]) -> str | None:
        urls = pod_urls(self.endpoint_slices.store, isvc.namespace or "", isvc.name, PORT_NAME)
        return urls.get(str(pod["metadata"]["name"]))

    def _record(
        self, isvc: InferenceService, operation: str, report: CacheReport, pod: str
    ) -> None:
        """The metric, the log line and the event of one save or restore."""
        namespace = isvc.namespace or ""
        KV_CACHE_OPERATIONS.labels(namespace, isvc.name, operation, report.outcome.value).inc()
        KV_CACHE_DURATION.labels(operation).observe(report.seconds)
        failed = report.outcome in (
            CacheOutcome.FAILED,
            CacheOutcome.PARTIAL,
            CacheOutcome.TIMED_OUT,
        )
        log.log(logging.WARNING if failed else logging.INFO, "%s/%s: KV cache %s of pod %s: %s",
                namespace, isvc.name, operation, pod, report.detail)  # fmt: skip
        if operation == SAVE:
            reason = kvcache.EVENT_SAVE_FAILED if failed else kvcache.EVENT_SAVED
        else:
            reason = kvcache.EVENT_RESTORE_FAILED if failed else kvcache.EVENT_RESTORED
        note = f"pod {pod}: {report.outcome.value}: {report.detail}"
        self.recorder.event(
            isvc.to_dict(),
            "Warning" if failed else "Normal",
            reason,
            "SaveKvCache" if operation == SAVE else "RestoreKvCache",
            note,
        )

    async def _write_kv_status(
        self,
        isvc: InferenceService,
        *,
        save: KvCacheOperation | None = None,
        restore: KvCacheOperation | None = None,
    ) -> InferenceService:
        """Write ``status.kvCache`` with the new record, re-reading the live object on a conflict
        (the record must not be lost). Returns the InferenceService as written (unchanged when
        it is gone or every attempt conflicted)."""
        current = isvc
        for _ in range(KV_STATUS_WRITE_ATTEMPTS):
            current.status.kv_cache = kvcache.with_operation(
                current.status.kv_cache, save=save, restore=restore
            )
            try:
                written = await self.client.update_status(
                    InferenceService.resource(), current.to_dict()
                )
                return InferenceService.from_dict(written)
            except Conflict:
                try:
                    live = await self.client.get(
                        InferenceService.resource(), isvc.name, isvc.namespace
                    )
                except NotFound:
                    return isvc
                current = InferenceService.from_dict(live)
            except NotFound:
                return isvc
        log.warning("%s/%s: status.kvCache not written: %d conflicts in a row",
                    isvc.namespace, isvc.name, KV_STATUS_WRITE_ATTEMPTS)  # fmt: skip
        return isvc

    async def _open_gate(
        self, isvc: InferenceService, pod: Mapping[str, Any], verdict: kvcache.RestoreVerdict
    ) -> None:
        """Set the pod's restore condition True (the pod may then become Ready)."""
        meta = pod["metadata"]
        patch = kvcache.gate_condition_patch(verdict, self.wall_clock())
        try:
            await self.client.patch(
                PODS,
                meta["name"],
                patch,
                meta["namespace"],
                patch_type=STRATEGIC_MERGE_PATCH,
                subresource="status",
            )
        except NotFound:
            return
        self._gates_opened.add(str(meta.get("uid")))
        log.info("%s/%s: pod %s may be Ready (%s)", isvc.namespace, isvc.name, meta["name"],
                 verdict.reason)  # fmt: skip


def _sooner(first: float | None, second: float | None) -> float | None:
    """The sooner of two requeues, either of which may be none."""
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)


def _deployment_replicas(deployment: Mapping[str, Any] | None) -> int:
    """The replicas the Deployment is asked for: 0 when there is none yet."""
    if deployment is None:
        return 0
    return int((deployment.get("spec") or {}).get("replicas") or 0)


def _pool_to_members(pool: Mapping[str, Any]) -> Iterable[Request]:
    """A pool to every InferenceService it lists: joining or leaving a pool, or the pool swapping
    to a member, changes whether a member may be raised and what its status says."""
    namespace = pool["metadata"].get("namespace") or ""
    return tuple(Request(namespace, name) for name in sorted(set(listed_members(pool))))


def _pods_to_owner(pod: Mapping[str, Any]) -> Iterable[Request]:
    meta = pod["metadata"]
    name = (meta.get("labels") or {}).get(ISVC_LABEL)
    return (Request(meta.get("namespace") or "", name),) if name else ()


def _slice_to_owner(slice_: Mapping[str, Any]) -> Iterable[Request]:
    """A member's Service has the member's name: its slices say where its pods answer."""
    meta = slice_["metadata"]
    name = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return (Request(meta.get("namespace") or "", name),) if name else ()


def _job_pods_to_owner(pod: Mapping[str, Any]) -> Iterable[Request]:
    meta = pod["metadata"]
    name = (meta.get("labels") or {}).get(MODEL_OF_LABEL)
    return (Request(meta.get("namespace") or "", name),) if name else ()


def _on_node(
    inference_services: Informer, pods: Informer, node: Mapping[str, Any]
) -> Iterable[Request]:
    """The InferenceServices whose weights are cached on ``node`` (it left, or came back) or
    whose pods run there (it was cordoned for a drain, or uncordoned)."""
    name = node["metadata"]["name"]
    pinned = (
        Request(obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        for obj in inference_services.store.objects()
        if ((obj.get("status") or {}).get("model") or {}).get("node") == name
    )
    running = (
        request
        for pod in pods.store.objects()
        if (pod.get("spec") or {}).get("nodeName") == name
        for request in _pods_to_owner(pod)
    )
    return tuple(sorted({*pinned, *running}, key=str))


def setup_inference_service_controller(
    manager: Manager,
    identity: str,
    slot_cache: SlotCacheClient | None = None,
    placement: Callable[[], Awaitable[WeightsPlacement]] | None = None,
    network: MemberNetworkPolicy | None = None,
) -> InferenceServiceReconciler:
    """Wire the controller into ``manager`` (watching every namespace). ``placement`` gives the
    node cache and the fetch image (the defaults of
    :class:`~controlplane.controllers.inferenceservice.weights.WeightsPlacement` when None);
    ``network``, who may reach members (the defaults of :class:`MemberNetworkPolicy` when None)."""
    inference_services = manager.informer(InferenceService.resource())
    deployments = manager.informer(DEPLOYMENTS)
    services = manager.informer(SERVICES)
    pods = manager.informer(PODS, label_selector=ISVC_LABEL)
    pools = manager.informer(ModelPool.resource())
    endpoint_slices = manager.informer(ENDPOINT_SLICES, label_selector=SERVICE_NAME_LABEL)
    jobs = manager.informer(JOBS, label_selector=MODEL_OF_LABEL)
    job_pods = manager.informer(PODS, label_selector=MODEL_OF_LABEL)
    nodes = manager.informer(NODES)
    network_policies = manager.informer(NETWORK_POLICIES)
    disruption_budgets = manager.informer(POD_DISRUPTION_BUDGETS, label_selector=ISVC_LABEL)
    recorder = manager.event_recorder(EVENT_REPORTER, identity)

    async def default_placement() -> WeightsPlacement:
        return WeightsPlacement()

    weights = WeightsFetcher(
        manager.client,
        jobs=jobs,
        pods=job_pods,
        placement=placement or default_placement,
        nodes=nodes,
    )
    reconciler = InferenceServiceReconciler(
        manager.client,
        recorder,
        inference_services=inference_services,
        deployments=deployments,
        services=services,
        pods=pods,
        pools=pools,
        endpoint_slices=endpoint_slices,
        weights=weights,
        slot_cache=slot_cache,
        network_policies=network_policies,
        network=network,
        disruption_budgets=disruption_budgets,
        nodes=nodes,
    )
    (
        manager.new_controller(
            CONTROLLER_NAME, reconciler, max_concurrent_reconciles=MAX_CONCURRENT_RECONCILES
        )
        .for_(inference_services)
        .owns(deployments)
        .owns(services)
        .owns(jobs)
        .owns(network_policies)
        .owns(disruption_budgets)
        .watches(job_pods, _job_pods_to_owner)
        .watches(nodes, lambda node: _on_node(inference_services, pods, node))
        .watches(pods, _pods_to_owner)
        .watches(pools, _pool_to_members)
        .watches(endpoint_slices, _slice_to_owner)
    )
    return reconciler
