"""Scale to zero when idle: an InferenceService no pool lists, with ``spec.idleAfter``.

docs/inferenceservice.md ("Scale to zero"). The rule is the pool's
(:func:`~controlplane.scheduling.idle.judge_idle`), applied to one service whose idle action is
always to release: the service is quiet while no router-proxy replica's demand report
has a request in flight on it or held for it, its clock (``status.idleSince``) starts the first
time the controller sees it quiet, and once the clock has run ``idleAfter`` the controller first
writes ``status.scaledToZero`` (every replica then holds its requests instead of forwarding them:
a request held is demand, which stops the clock and brings it back) and only in a reconcile that
began with it written scales the Deployment to zero, after its ready endpoints' ``/slots`` say
idle (the lowering saves the KV cache, as any lowering does).

The replicas report a standalone service's demand under
:data:`~controlplane.api.v1alpha1.demand.STANDALONE_REPORTS` in place of a pool's name;
:class:`StandaloneDemand` reads those reports, with their expiry judged on our clock, and is
subscribed to the pool-Lease informer the pool controller shares.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.demand import (
    STANDALONE_REPORTS,
    live_reports,
    pool_of_demand_lease,
)
from controlplane.api.v1alpha1.inferenceservice import PHASE_DRAINING, PHASE_STOPPED
from controlplane.api.v1alpha1.modelpool import parse_duration
from controlplane.clock import TimeSource
from controlplane.controllers.inferenceservice.status import PhaseDecision
from controlplane.runtime.cache import NAMESPACE_INDEX, Store
from controlplane.runtime.controller import Request
from controlplane.runtime.informer import DeletedFinalStateUnknown, Informer
from controlplane.runtime.leaserecord import ExpiryObserver, lease_key
from controlplane.runtime.objects import ObjectView
from controlplane.scheduling.idle import (
    Activity,
    IdleSettings,
    IdleVerdict,
    judge_idle,
    parse_stamp,
    pooled_activity,
)

#: The ``Ready`` condition's reason while a service is at zero for idleness.
REASON_IDLE = "Idle"


class StandaloneDemand:
    """Every replica's live standalone demand reports, expiry judged on our clock (an informer
    event handler: a record is seen to change when the watch delivers it)."""

    def __init__(self, leases: Informer, clock: TimeSource = time.monotonic) -> None:
        self.leases = leases
        self.expiry = ExpiryObserver(clock)

    def on_add(self, obj: dict[str, Any], initial: bool) -> None:
        if pool_of_demand_lease(obj) == STANDALONE_REPORTS:
            self.expiry.observe(obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.on_add(new, False)

    def on_delete(self, obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
        final = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        self.expiry.forget(lease_key(final))

    def activity(self, namespace: str, name: str) -> Activity:
        """``name``'s demand summed over every live, well-formed report of ``namespace``."""
        leases = self.leases.store.by_index(NAMESPACE_INDEX, namespace)
        live = live_reports(leases, STANDALONE_REPORTS, self.expiry)
        pooled = pooled_activity((m, e.held, e.active) for r in live for m, e in r.demand.items())
        return pooled.get(name, Activity())


def judge_standalone(isvc: InferenceService, activity: Activity, now: datetime) -> IdleVerdict:
    """The idle verdict of a standalone service with ``spec.idleAfter`` (none without it):
    ``act`` names it once it is to be at zero."""
    after = parse_duration(isvc.spec.idle_after, 0.0) if isvc.spec.idle_after else None
    if not after:
        return IdleVerdict()
    name = isvc.name
    since = parse_stamp(isvc.status.idle_since)
    return judge_idle(
        {name: activity},
        (name,),
        IdleSettings(after=after),
        shared=False,
        requested=False,
        pool_since=since,
        member_since={name: since},
        published=(name,) if isvc.status.scaled_to_zero else (),
        now=now,
    )


def on_standalone_report(inference_services: Store, lease: ObjectView) -> list[Request]:
    """Whom to reconcile when a standalone demand report changes: every InferenceService of its
    namespace with ``spec.idleAfter`` (an emptied report no longer names whom it stopped
    counting)."""
    if pool_of_demand_lease(lease) != STANDALONE_REPORTS:
        return []
    namespace = str((lease.get("metadata") or {}).get("namespace") or "")
    return [
        Request(namespace, str(isvc["metadata"]["name"]))
        for isvc in inference_services.by_index(NAMESPACE_INDEX, namespace)
        if (isvc.get("spec") or {}).get("idleAfter")
    ]


def explain_idle(
    decision: PhaseDecision, verdict: IdleVerdict, idle_after: str | None
) -> PhaseDecision:
    """A service at (or going to) zero for idleness says so: reason ``Idle``, and how it comes
    back."""
    if not verdict.act or decision.phase not in (PHASE_STOPPED, PHASE_DRAINING):
        return decision
    message = (
        f"scaled to zero: no request for {idle_after} (spec.idleAfter); the next request "
        "through a router-proxy brings it back"
    )
    return PhaseDecision(decision.phase, REASON_IDLE, message)


#: How often a service whose demand is not quiet is looked at again: a report of a replica that
#: died expires with no event (as the pool's shown demand, ``WAITING_REQUEUE_SECONDS``).
DEMAND_RECHECK_SECONDS = 5.0
#: A clock is looked at this long after it falls due (its end has no event).
DUE_MARGIN_SECONDS = 0.1


def idle_requeue(verdict: IdleVerdict, idle_after: str | None) -> float | None:
    """When to look again although no event may come: as the clock falls due, or, while there is
    demand, once a dead replica's report could have expired."""
    if not idle_after:
        return None
    if verdict.next_due_in is not None:
        return verdict.next_due_in + DUE_MARGIN_SECONDS
    if verdict.pool_since is None:
        return DEMAND_RECHECK_SECONDS
    return None
