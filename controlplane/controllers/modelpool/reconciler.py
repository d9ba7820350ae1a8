"""The ModelPool reconciler: one exclusive GPU slot shared by a pool's members (docs/modelpool.md).

*Why one module of this size:* it is the I/O around pure parts that live elsewhere (the owner in
``intent.py``, the plan and the status in ``plan.py``, the grant in ``grant.py``, the waiting
demand in ``waiting.py``, the swap's phases in ``phases.py``); what is left, reading the caches,
probing, writing and recording, shares one reconcile's state.

Each reconcile reads everything from the caches and acts in three steps:

1. **Owner.** :func:`~.intent.choose_owner` picks the member the slot belongs to: the target of
   a valid activation intent (the pool's Lease, see :mod:`controlplane.api.v1alpha1.activation`),
   else the resident (sticky), else ``default``, else nobody. Expiry of the intent is judged on our
   clock (:class:`~.intent.LeaseObserver`).
2. **Plan** (:func:`~.plan.plan_actions`). Non-owners are released: one that serves requests
   only after its idle probe (llama.cpp ``GET /slots``,
   :class:`~controlplane.probes.llamacpp.SlotsProbe`) says idle on every ready endpoint; busy is
   ``PodsBusy``, anything unproven is ``IdleCheckFailed``, and both defer the drain
   (``SwapDeferred=True``, a Warning event, a re-probe after :data:`~.plan.DEFER_REQUEUE_SECONDS`:
   ``/slots`` changes produce no watch event). The owner is granted the slot only when every
   other member is released with its Deployment at 0 and no pod left, Terminating included. A
   member that does not exist makes the pool Degraded and no slot is changed.
3. **Status** (:func:`~.plan.pool_status`): the decision and what was seen, in one write through
   the status subresource, only when it differs, with the cached ``resourceVersion``; events for
   a swap started, completed or abandoned, a deferral, and degradation (:func:`~.plan.transitions`).

**The pool is the only authority on its members' replicas, and its decision lives in its own
status** (docs/modelpool.md, "grant"): ``status.members[].slot`` is ``Granted`` or ``Released``
(:mod:`~.grant`); the InferenceService controller sizes the member's Deployment from it and never
raises one without the grant. No field of a member is written, so re-applying members with
``kubectl apply``, Helm or Argo CD moves nothing, and a member whose ``replicas`` is unset (= 1)
does not run merely for being applied.

**A pool with a slot server** (``spec.slotServer``, :mod:`~.slotruntime`): before the plan, its
server's objects are applied and its ``/models`` read, and each member is seen as its model there
(:mod:`~.slotmembers`), so the same plan drains and grants; once the decision is written, the
server is told to unload and load (the orders follow the status, never precede it).

**Writes are optimistic.** The status write carries the cached ``resourceVersion``: a 409 means our
cache was stale, and the key is requeued to decide again on the newer pool.

**Driven by watches** (docs/modelpool.md): pools, their members, the members' Deployments, pods
(``inference.modelpool.dev/inferenceservice`` label) and EndpointSlices
(``kubernetes.io/service-name``), and pool Leases (selected by their
``inference.modelpool.dev/pool`` label). Two timed requeues are backstops for what no watch
reports: a deferred drain is re-probed, and a valid intent is re-checked just after it would
expire.

**Traced as part of the request that asked** (DESIGN 4.11): a reconcile that acts on a valid intent
carrying a ``traceparent`` is a child of the activator's ``swap`` span (:meth:`trace_parent`, which
the framework asks before it starts the ``reconcile`` span), not a root. Inside it: ``drain
decision`` (the plan, with one ``slots probe`` per endpoint), one ``write status`` span per
decision written (who was released, who granted),
and the swap's waiting phases, ``wait for pods gone`` and ``owner up``, recorded with their true
start and end (:mod:`~.phases`) under the swap's span too. A parent, not a link: a trace viewer
draws children in the request's waterfall, where the 40 s are, while a link is a footnote.

**Metrics** (:mod:`~.metrics`): the resident and phase per pool, since when it is Swapping and its
budget, swaps completed, drain deferrals by reason, idle-probe outcomes and latency.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelPoolStatus
from controlplane.api.v1alpha1.activation import POOL_LABEL, pool_for_lease, pool_lease_name
from controlplane.api.v1alpha1.demand import live_reports, pool_of_demand_lease
from controlplane.api.v1alpha1.inferenceservice import RUNTIME_LLAMACPP, update_pending
from controlplane.api.v1alpha1.modelpool import (
    DEFAULT_SWAP_BUDGET,
    PHASE_READY,
    PHASE_SWAPPING,
    PHASES,
    SLOT_RELEASED,
    WaitingDemand,
    member_since,
    member_slot,
    parse_duration,
)
from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.inferenceservice.weights import WeightsPlacement
from controlplane.controllers.inferenceservice.weightsstatus import weights_ready, weights_summary
from controlplane.controllers.modelpool import metrics
from controlplane.controllers.modelpool.claims import claimed_elsewhere
from controlplane.controllers.modelpool.grant import acknowledged, listed_members, lists_member
from controlplane.controllers.modelpool.intent import LeaseObserver, Owner, choose_owner
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.phases import PhaseSpan, SwapPhases
from controlplane.controllers.modelpool.plan import (
    DEFER_REQUEUE_SECONDS,
    PoolView,
    blocking_reports,
    decided_slots,
    deferral_from,
    deployment_drained,
    plan_actions,
    pool_status,
    requeue_result,
    slot_allocated_since,
    status_changed,
    transitions,
)
from controlplane.controllers.modelpool.residents import kept_residents, newly_resident
from controlplane.controllers.modelpool.slotmembers import unreadable_why
from controlplane.controllers.modelpool.slotruntime import (
    DEFAULT_POLL_SECONDS,
    DEFAULT_WAIT_SECONDS,
    SlotObservation,
    SlotRuntime,
)
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL, slot_server_name
from controlplane.controllers.modelpool.waiting import SeenReport, waiting_demand
from controlplane.probes.idle import IdleOutcome, IdleProbe, IdleReport
from controlplane.probes.llamacpp import SlotsProbe
from controlplane.runtime.cache import LABEL_INDEX, NAMESPACE_INDEX, Object
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import SERVICE_NAME_LABEL, member_urls, starting_urls
from controlplane.runtime.errors import Conflict, KubeError, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, LEASES, PODS, SERVICES
from controlplane.runtime.tracing import context_of_traceparent
from controlplane.scheduling.budget import Budget, pool_budget

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.controllers.modelpool")

CONTROLLER_NAME: Final = "modelpool"
EVENT_REPORTER: Final = "modelpool-operator/modelpool"
#: The Event of a resident drained because a change to its pod waits for the pool.
EVENT_UPDATING_MEMBER: Final = "UpdatingMember"
#: Probes per pool run concurrently; members are at most 32 (the API's bound).
MAX_CONCURRENT_RECONCILES: Final = 4


class ModelPoolReconciler:
    """Level-triggered: owner from the intent, drain gated on idle probes, status on change."""

    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        *,
        pools: Informer,
        inference_services: Informer,
        deployments: Informer,
        pods: Informer,
        endpoint_slices: Informer,
        leases: Informer,
        observer: LeaseObserver,
        probes: Mapping[str, IdleProbe],
        slot_runtime: SlotRuntime | None = None,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.pools = pools
        self.inference_services = inference_services
        self.deployments = deployments
        self.pods = pods
        self.endpoint_slices = endpoint_slices
        self.leases = leases
        self.observer = observer
        #: Per pool, the resourceVersion our last status write replaced: while the cache still
        #: shows it, the cache is older than what we wrote.
        self._superseded: dict[str, str | None] = {}
        #: The idle probe of each runtime (``spec.runtime``); llama.cpp's is the only one in v1.
        self.probes = probes
        #: Pools with ``spec.slotServer``: their server's objects, reading and orders.
        self.slot_runtime = slot_runtime
        #: The waiting phases of swaps under way, to record as spans when they end.
        self.phases = SwapPhases()
        #: Per pool, the resident last exported (its gauge is removed when it changes).
        self._exported_resident: dict[str, frozenset[str]] = {}

    # -- reading the caches ----------------------------------------------------------------------

    def _in_namespace(self, informer: Informer, label: str, namespace: str) -> set[str]:
        store = informer.store
        return set(store.index_keys(LABEL_INDEX, label)) & set(
            store.index_keys(NAMESPACE_INDEX, namespace)
        )

    def member_state(self, pool: Object, name: str, claimed_by: str | None = None) -> MemberState:
        """``name`` as the caches show it, with ``pool``'s last written decision about it;
        ``claimed_by``, the other pool whose claim on it stands, if one does."""
        namespace = pool["metadata"].get("namespace") or ""
        isvc = self.inference_services.store.get(f"{namespace}/{name}")
        if isvc is None:
            return MemberState(name, found=False)
        spec = isvc.get("spec") or {}
        pods = self._in_namespace(self.pods, f"{ISVC_LABEL}={name}", namespace)
        deployment = self.deployments.store.get(f"{namespace}/{name}")
        since = member_since(pool, name)
        return MemberState(
            name,
            slot=member_slot(pool, name),
            since=since,
            acknowledged=acknowledged(isvc, pool["metadata"]["name"], since, deployment),
            runtime=str(spec.get("runtime") or RUNTIME_LLAMACPP),
            phase=(isvc.get("status") or {}).get("phase"),
            urls=tuple(member_urls(self.endpoint_slices.store, namespace, name)),
            starting_urls=tuple(starting_urls(self.endpoint_slices.store, namespace, name)),
            pods=len(pods),
            deployment_drained=deployment_drained(deployment),
            weights_ready=weights_ready(isvc),
            weights=weights_summary(isvc),
            update_pending=update_pending(isvc),
            claimed_by=claimed_by,
        )

    # -- tracing -----------------------------------------------------------------------------------

    def _swap_context(self, namespace: str, pool: str) -> otel_context.Context | None:
        """The trace context of the valid intent on ``pool``'s Lease, if it carries one."""
        lease = self.leases.store.get(f"{namespace}/{pool_lease_name(pool)}")
        intent = self.observer.intent(lease)
        return context_of_traceparent(intent.traceparent) if intent is not None else None

    def trace_parent(self, request: Request) -> otel_context.Context | None:
        """A reconcile acting on a traced intent is a child of the swap that wrote it."""
        return self._swap_context(request.namespace, request.name)

    def _record_phase(self, namespace: str, pool: str, phase: PhaseSpan | None) -> None:
        """A finished phase as a span, under the swap's span when the intent still says which,
        else under the current reconcile."""
        if phase is None:
            return
        attributes = {"k8s.namespace.name": namespace, "modelpool.pool": pool, **phase.attributes}
        span = tracer.start_span(
            phase.name,
            context=self._swap_context(namespace, pool),
            attributes=attributes,
            start_time=phase.start_ns,
        )
        span.end(end_time=phase.end_ns)

    # -- the reconcile ---------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.pools.store.get(key)
        if obj is None:
            self._superseded.pop(key, None)
            self.phases.forget(key)
            self._forget_metrics(request.namespace, request.name)
            return Result()
        if obj["metadata"].get("resourceVersion") == self._superseded.get(key):
            # Our own status write has not reached the cache yet: deciding on the older status
            # could take the resident for somebody it no longer is. Its watch event requeues us.
            return Result(requeue_after=DEFER_REQUEUE_SECONDS)
        self._superseded.pop(key, None)
        pool = ModelPool.from_dict(obj)
        if pool.metadata.deletion_timestamp:
            return Result()
        namespace = request.namespace
        names = pool.spec.member_names()
        rivals = self.pools.store.by_index(NAMESPACE_INDEX, namespace)
        claims = claimed_elsewhere(obj, names, rivals)
        members = {name: self.member_state(obj, name, claims.get(name)) for name in names}
        lease = self.leases.store.get(f"{namespace}/{pool_lease_name(request.name)}")
        intent = self.observer.intent(lease)
        owner = choose_owner(names, pool.spec.default, pool.status.resident_member, intent)
        budget = pool_budget(obj.get("spec") or {})
        evict = owner.intent.evict if owner.intent is not None else ()
        seen = await self._observe_slot_server(pool, members)
        planned_owner = owner.name
        if seen is not None:
            members = seen.members
            if seen.outdated:
                planned_owner = None  # the server restarts once nothing is loaded: drain first
        keep = kept_residents(members, pool.status.resident_names, planned_owner, evict, budget)
        plan = plan_actions(members, planned_owner, keep, budget)

        with tracer.start_as_current_span(
            "drain decision",
            attributes={
                "k8s.namespace.name": namespace,
                "modelpool.pool": request.name,
                "modelpool.owner": owner.name or "",
                "modelpool.owner.reason": owner.reason.value,
            },
        ) as decision:
            deferral = None
            release = list(plan.release)
            if plan.probe:
                models_of = seen.models_of if seen is not None else {}
                reports = await self._probe_members(members, plan.probe, models_of)
                blocking = {m: blocking_reports(members[m], reports[m]) for m in plan.probe}
                release += [m for m in plan.probe if reports[m] and not blocking[m]]
                deferral = deferral_from({m: r for m, r in blocking.items() if r})
            decision.set_attribute("modelpool.drain", release)
            decision.set_attribute("modelpool.owner_up", plan.grant is not None)
            if deferral is not None:
                decision.set_attribute("modelpool.deferred", deferral.reason)
                metrics.DRAIN_DEFERRALS.labels(namespace, request.name, deferral.reason).inc()
        grant = plan.grant
        withheld = grant is not None and not await self._room_confirmed(
            namespace, names, grant, budget, [*plan.holding, *keep]
        )
        if withheld:
            grant = None  # the caches are behind; looked at again (the pods' events come too)
        if grant is not None:
            self._record_phase(
                namespace,
                request.name,
                self.phases.owner_may_go_up(key, grant, time.time_ns()),
            )
        slots = decided_slots(members, release, grant)

        now = datetime.now(UTC)
        waiting = self.waiting(namespace, request.name, names, pool.status.resident_member)
        view = PoolView(members, owner, plan, deferral, now, waiting, slots, budget, keep)
        status = pool_status(pool, view)
        if status.phase == PHASE_READY:
            phase = self.phases.owner_ready(key, status.resident_member, time.time_ns())
            self._record_phase(namespace, request.name, phase)
        self._export(namespace, request.name, pool.spec.swap_budget, status)
        if status_changed(pool.status, status):
            previous = pool.status
            pool.status = status
            released = [m for m in release if members[m].slot != SLOT_RELEASED]
            attributes = {
                "k8s.namespace.name": namespace,
                "modelpool.pool": request.name,
                "modelpool.released": ", ".join(released),
                "modelpool.granted": grant or "",
            }
            with tracer.start_as_current_span("write status", attributes=attributes) as span:
                try:
                    await self.client.update_status(ModelPool.resource(), pool.to_dict())
                    self._superseded[key] = obj["metadata"].get("resourceVersion")
                except Conflict:
                    span.set_attribute("modelpool.outcome", "Conflict")
                    return Result(requeue=True)  # our cache was stale; the watch brings it
                except NotFound:
                    span.set_attribute("modelpool.outcome", "NotFound")
                    return Result()
                span.set_attribute("modelpool.outcome", "written")
            self._decided(key, owner.name, released, grant)
            self._record_transitions(obj, previous, status, owner, now)
            resident = newly_resident(previous, status)
            if resident is not None:
                metrics.SWAPS_COMPLETED.labels(namespace, request.name, resident).inc()
        for name in plan.refresh:
            if name in release:
                note = f"{name} drained to change its pod; it is granted again once changed"
                self.recorder.event(obj, "Normal", EVENT_UPDATING_MEMBER, "Drain", note)
        if deferral is not None:
            log.info("%s: %s: %s", key, deferral.reason, deferral.message)
            self.recorder.event(obj, "Warning", deferral.reason, "Drain", deferral.message)
        if owner.ignored is not None:
            self.recorder.event(obj, "Warning", "IntentIgnored", "SelectOwner", owner.ignored)
        result = requeue_result(deferral, intent, waiting=bool(status.waiting))
        if seen is not None and self.slot_runtime is not None:
            # The decision is written (or was already): the server carries it out.
            again = await self.slot_runtime.carry_out(key, slots, seen)
            if again is not None:
                result = Result(requeue_after=min(result.requeue_after or again, again))
        if withheld:
            again = min(result.requeue_after or DEFER_REQUEUE_SECONDS, DEFER_REQUEUE_SECONDS)
            return Result(requeue_after=again)
        return result

    def waiting(
        self, namespace: str, pool: str, members: Sequence[str], resident: str | None
    ) -> list[WaitingDemand]:
        """Every live, well-formed demand report of ``pool``, summed (``status.waiting``)."""
        mono_now, wall_now = time.monotonic(), time.time()
        live = live_reports(
            self.leases.store.by_index(NAMESPACE_INDEX, namespace),
            pool,
            self.observer.expiry,
            on_malformed=lambda key, why: log.debug("demand report %s ignored: %s", key, why),
        )
        reports = [SeenReport(wall_now - (mono_now - r.seen_at), r.demand) for r in live]
        return waiting_demand(reports, members, resident)

    async def _room_confirmed(
        self,
        namespace: str,
        members: Sequence[str],
        owner: str,
        budget: Budget | None,
        holding: Sequence[str],
    ) -> bool:
        """The grant's last check, on a live LIST (a consistent read) of the other members' pods,
        since a pod's events may reach our cache after its Deployment's: of an exclusive pool, no
        pod of any member but ``owner`` is left; of a pool with a budget, ``owner`` fits beside
        every member that has a pod (Terminating ones included) or holds part of the slot as the
        caches say (``holding``)."""
        others = sorted(m for m in members if m != owner)
        if not others:
            return True
        selector = f"{ISVC_LABEL} in ({','.join(others)})"
        try:
            found = await self.client.list(PODS, namespace, label_selector=selector)
        except KubeError as err:
            log.info("%s/%s: pods not listed before the grant (%s); deciding later", namespace,
                     owner, err)  # fmt: skip
            return False
        if budget is not None:
            with_pods = {(p["metadata"].get("labels") or {}).get(ISVC_LABEL) for p in found.items}
            occupied = {str(m) for m in with_pods if m} | set(holding)
            if budget.fits(owner, occupied):
                return True
            log.info("%s/%s: not granted yet: it does not fit beside %s", namespace, owner,
                     ", ".join(sorted(occupied)))  # fmt: skip
            return False
        if found.items:
            names = ", ".join(sorted(p["metadata"]["name"] for p in found.items))
            log.info("%s/%s: not granted yet: pods of other members remain: %s", namespace, owner,
                     names)  # fmt: skip
        return not found.items

    async def _observe_slot_server(
        self, pool: ModelPool, members: Mapping[str, MemberState]
    ) -> SlotObservation | None:
        """Of a pool with a slot server, its members as the server shows them; else None."""
        if pool.spec.slot_server is None or self.slot_runtime is None:
            return None
        namespace = pool.metadata.namespace or ""
        isvcs = {
            name: isvc
            for name in members
            if (isvc := self.inference_services.store.get(f"{namespace}/{name}")) is not None
        }
        return await self.slot_runtime.observe(pool, members, isvcs)

    async def _probe_members(
        self,
        members: Mapping[str, MemberState],
        names: Sequence[str],
        models_of: Mapping[str, str],
    ) -> dict[str, list[tuple[str, IdleReport]]]:
        """Probe every ready endpoint of each member (a starting one's starting endpoints), all
        at once; of a member served by a slot server, about its model (``models_of``)."""
        reports: dict[str, list[tuple[str, IdleReport]]] = {name: [] for name in names}

        async def one(probe: IdleProbe, runtime: str, member: str, url: str) -> None:
            started = time.perf_counter()
            if (why := unreadable_why(url)) is not None:
                reports[member].append(("slot server", IdleReport(IdleOutcome.FAILED, why)))
                return
            report = await probe.probe(url, member=member, model=models_of.get(member))
            metrics.IDLE_PROBE_DURATION.labels(runtime).observe(time.perf_counter() - started)
            metrics.IDLE_PROBES.labels(runtime, report.outcome.value).inc()
            reports[member].append((url, report))

        async with anyio.create_task_group() as group:
            for name in names:
                state = members[name]
                probe = self.probes.get(state.runtime)
                if probe is None:
                    why = f"runtime {state.runtime!r} has no idle probe"
                    reports[name].append(("-", IdleReport(IdleOutcome.FAILED, why)))
                elif not state.probe_urls:
                    why = "Ready, but no ready endpoint to probe"
                    reports[name].append(("-", IdleReport(IdleOutcome.FAILED, why)))
                else:
                    for url in state.probe_urls:
                        group.start_soon(one, probe, state.runtime, name, url)
        for results in reports.values():
            results.sort()
        return reports

    def _decided(
        self,
        key: str,
        owner: str | None,
        released: Sequence[str],
        granted: str | None,
    ) -> None:
        """What a written status changed of the slot: the swap's phases move, and it is logged."""
        now = time.time_ns()
        for name in released:
            self.phases.drained(key, name, owner, now)
            log.info("%s: %s released: drained", key, name)
        if granted is not None:
            self.phases.raised(key, granted, now)
            log.info("%s: %s granted the slot", key, granted)

    # -- metrics -------------------------------------------------------------------------------

    def _export(
        self, namespace: str, pool: str, budget: str | None, status: ModelPoolStatus
    ) -> None:
        """The pool's gauges from the status just decided (written or unchanged)."""
        key = f"{namespace}/{pool}"
        residents = frozenset(status.residents)
        for gone in self._exported_resident.get(key, frozenset()) - residents:
            with contextlib.suppress(KeyError):
                metrics.POOL_RESIDENT.remove(namespace, pool, gone)
        for resident in residents:
            metrics.POOL_RESIDENT.labels(namespace, pool, resident).set(1)
        self._exported_resident[key] = residents
        for phase in PHASES:
            metrics.POOL_PHASE.labels(namespace, pool, phase).set(int(status.phase == phase))
        since = 0.0
        if status.phase == PHASE_SWAPPING:
            since = _epoch_seconds(slot_allocated_since(status)) or time.time()
        metrics.SWAPPING_SINCE.labels(namespace, pool).set(since)
        metrics.SWAP_BUDGET.labels(namespace, pool).set(
            parse_duration(budget, parse_duration(DEFAULT_SWAP_BUDGET, 300.0))
        )

    def _forget_metrics(self, namespace: str, pool: str) -> None:
        """A deleted pool's series go with it."""
        residents = self._exported_resident.pop(f"{namespace}/{pool}", frozenset())
        removals: list[tuple[Any, tuple[str, ...]]] = [
            (metrics.SWAPPING_SINCE, (namespace, pool)),
            (metrics.SWAP_BUDGET, (namespace, pool)),
            *((metrics.POOL_PHASE, (namespace, pool, phase)) for phase in PHASES),
        ]
        removals += [(metrics.POOL_RESIDENT, (namespace, pool, m)) for m in sorted(residents)]
        for family, labels in removals:
            with contextlib.suppress(KeyError):
                family.remove(*labels)

    def _record_transitions(
        self,
        pool: Object,
        before: ModelPoolStatus,
        after: ModelPoolStatus,
        owner: Owner,
        now: datetime,
    ) -> None:
        """Log and record the events of a status change (:func:`~.plan.transitions`)."""
        key = f"{pool['metadata'].get('namespace')}/{pool['metadata']['name']}"
        for event in transitions(before, after, owner, now):
            if event.warning:
                log.warning("%s: %s: %s", key, event.reason, event.message)
            else:
                log.info("%s: %s", key, event.message)
            self.recorder.event(
                pool,
                "Warning" if event.warning else "Normal",
                event.reason,
                event.action,
                event.message,
            )

    # -- mapping events to pools -----------------------------------------------------------------

    def pools_with_member(self, namespace: str, member: str) -> list[Request]:
        return [
            Request(namespace, pool["metadata"]["name"])
            for pool in self.pools.store.by_index(NAMESPACE_INDEX, namespace)
            if lists_member(pool, member)
        ]

    def map_rivals(self, obj: Object) -> Iterable[Request]:
        """A pool to the other pools of its namespace that list one of its members: which claim
        on a shared member stands changes with it (created, deciding, deleted)."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        names = set(listed_members(obj))
        return [
            Request(namespace, pool["metadata"]["name"])
            for pool in self.pools.store.by_index(NAMESPACE_INDEX, namespace)
            if pool["metadata"]["name"] != meta["name"] and names.intersection(listed_members(pool))
        ]

    def map_member(self, obj: Object) -> Iterable[Request]:
        """An InferenceService or Deployment (same name) to the pools it is a member of; a slot
        server's Deployment to its pool."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        if pool := (meta.get("labels") or {}).get(SLOT_SERVER_LABEL):
            return (Request(namespace, pool),)
        return self.pools_with_member(namespace, meta["name"])

    def map_slice(self, obj: Object) -> Iterable[Request]:
        """An EndpointSlice to the pools listing its Service's member, or whose slot server's
        Service it belongs to."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not service:
            return ()
        slot_of = [
            Request(namespace, pool["metadata"]["name"])
            for pool in self.pools.store.by_index(NAMESPACE_INDEX, namespace)
            if slot_server_name(pool["metadata"]["name"]) == service
        ]
        return slot_of or self.pools_with_member(namespace, service)

    def map_labelled(self, label: str) -> Any:
        def mapper(obj: Object) -> Iterable[Request]:
            meta = obj["metadata"]
            member = (meta.get("labels") or {}).get(label)
            return self.pools_with_member(meta.get("namespace") or "", member) if member else ()

        return mapper


def _epoch_seconds(stamp: str | None) -> float | None:
    """An RFC 3339 condition time as Unix seconds, or None."""
    if not stamp:
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def map_lease(obj: Object) -> Iterable[Request]:
    """A pool's intent, or a replica's demand report for it, is the pool's business."""
    pool = pool_for_lease(obj) or pool_of_demand_lease(obj)
    return (Request(obj["metadata"].get("namespace") or "", pool),) if pool else ()


def setup_model_pool_controller(
    manager: Manager,
    identity: str,
    probe: IdleProbe | None = None,
    *,
    placement: WeightsPlacement | None = None,
    slot_server_poll_seconds: float = DEFAULT_POLL_SECONDS,
    slot_server_wait_seconds: float = DEFAULT_WAIT_SECONDS,
) -> ModelPoolReconciler:
    """Wire the controller into ``manager`` (every namespace); shares informers with the
    InferenceService controller where both read the same thing. ``placement``: the node cache
    a slot server mounts fetched weights from; ``slot_server_poll_seconds``: how often a pool
    waiting on its slot server reads it (``--slot-server-poll``); ``slot_server_wait_seconds``,
    how long one that sent an order watches for its effect (``--slot-server-wait``)."""
    pools = manager.informer(ModelPool.resource())
    inference_services = manager.informer(InferenceService.resource())
    deployments = manager.informer(DEPLOYMENTS)
    pods = manager.informer(PODS, label_selector=ISVC_LABEL)
    endpoint_slices = manager.informer(ENDPOINT_SLICES, label_selector=SERVICE_NAME_LABEL)
    leases = manager.informer(LEASES, label_selector=POOL_LABEL)
    observer = LeaseObserver()
    leases.add_handler(observer)  # before the controller's handler: seen before reconciled
    recorder = manager.event_recorder(EVENT_REPORTER, identity)
    slot_runtime = SlotRuntime(
        manager.client,
        deployments=deployments,
        services=manager.informer(SERVICES),
        endpoint_slices=endpoint_slices,
        placement=placement,
        poll_seconds=slot_server_poll_seconds,
        wait_seconds=slot_server_wait_seconds,
    )
    reconciler = ModelPoolReconciler(
        manager.client,
        recorder,
        pools=pools,
        inference_services=inference_services,
        deployments=deployments,
        pods=pods,
        endpoint_slices=endpoint_slices,
        leases=leases,
        observer=observer,
        probes={RUNTIME_LLAMACPP: probe or SlotsProbe()},
        slot_runtime=slot_runtime,
    )
    (
        manager.new_controller(
            CONTROLLER_NAME, reconciler, max_concurrent_reconciles=MAX_CONCURRENT_RECONCILES
        )
        .for_(pools)
        .watches(pools, reconciler.map_rivals)
        .watches(inference_services, reconciler.map_member)
        .watches(deployments, reconciler.map_member)
        .watches(pods, reconciler.map_labelled(ISVC_LABEL))
        .watches(endpoint_slices, reconciler.map_slice)
        .watches(leases, map_lease)
    )
    return reconciler
