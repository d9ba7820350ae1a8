"""The ModelPool reconciler: one exclusive GPU slot shared by a pool's members (docs/modelpool.md).

*Why this module:* it is the orchestrator of one pool's reconcile, the one place that orders its
steps: read the caches, choose the owner, observe the slot server, plan, prove what the plan
needs proved, write the status, then carry the decision out on the slot server. The pure parts
live beside it (the owner in ``intent.py``, the plan and the status in ``plan.py``, the grant in
``grant.py``, the waiting demand in ``waiting.py``, the swap's phases in ``phases.py``), and so
do the steps with I/O or state of their own: the idle probes and the grant's live LIST in
``checks.py``, the spans, events and log lines a decision leaves in ``swaprecord.py``, the
gauges in ``gauges.py``, the event maps in ``watches.py``, the slot server in ``slotruntime.py``.

Each reconcile reads everything from the caches and acts in three steps:

1. **Owner.** :func:`~.intent.choose_owner` picks the member the slot belongs to: the target of
   a valid activation intent (the pool's Lease, see :mod:`controlplane.api.v1alpha1.activation`),
   else the resident (sticky), else ``default``, else nobody. Expiry of the intent is judged on our
   clock (:class:`~.intent.LeaseObserver`).
2. **Plan** (:func:`~.plan.plan_actions`). Non-owners are released: one that serves requests
   only after its idle probe (:func:`~.checks.probe_members`) says idle on every ready endpoint;
   busy is ``PodsBusy``, anything unproven is ``IdleCheckFailed``, and both defer the drain
   (``SwapDeferred=True``, a Warning event, a re-probe after :data:`~.plan.DEFER_REQUEUE_SECONDS`:
   ``/slots`` changes produce no watch event). The owner is granted the slot only when every
   other member is released with its Deployment at 0 and no pod left, Terminating included
   (:func:`~.checks.room_confirmed`, on a live LIST). A member that does not exist makes the pool
   Degraded and no slot is changed.
3. **Status** (:func:`~.plan.pool_status`): the decision and what was seen, in one write through
   the status subresource, only when it differs, with the cached ``resourceVersion``; events for
   a swap started, completed or abandoned, a deferral, and degradation (:mod:`~.swaprecord`).

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

**Traced as part of the request that asked** (DESIGN 4.11): a reconcile that acts on a valid intent
carrying a ``traceparent`` is a child of the activator's ``swap`` span (:meth:`trace_parent`, which
the framework asks before it starts the ``reconcile`` span), not a root. Inside it: ``drain
decision`` (the plan, with one ``slots probe`` per endpoint), one ``write status`` span per
decision written (who was released, who granted), and the swap's waiting phases
(:mod:`~.swaprecord`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelPoolStatus
from controlplane.api.v1alpha1.activation import POOL_LABEL, pool_lease_name
from controlplane.api.v1alpha1.demand import LiveReport, live_reports
from controlplane.api.v1alpha1.inferenceservice import RUNTIME_LLAMACPP, update_pending
from controlplane.api.v1alpha1.modelpool import (
    PHASE_READY,
    SLOT_RELEASED,
    WaitingDemand,
    member_since,
    member_slot,
)
from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.inferenceservice.weights import WeightsPlacement
from controlplane.controllers.inferenceservice.weightsstatus import weights_ready, weights_summary
from controlplane.controllers.modelpool import metrics
from controlplane.controllers.modelpool.checks import probe_members, room_confirmed
from controlplane.controllers.modelpool.claims import claimed_elsewhere
from controlplane.controllers.modelpool.fence import judge_fence
from controlplane.controllers.modelpool.gauges import PoolGauges
from controlplane.controllers.modelpool.grant import acknowledged
from controlplane.controllers.modelpool.idle import idle_settings, reclaimed_owner
from controlplane.controllers.modelpool.intent import LeaseObserver, choose_owner
from controlplane.controllers.modelpool.member import MemberState
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
    status_changed,
)
from controlplane.controllers.modelpool.residents import kept_residents, newly_resident
from controlplane.controllers.modelpool.slotruntime import (
    DEFAULT_POLL_SECONDS,
    DEFAULT_WAIT_SECONDS,
    SlotObservation,
    SlotRuntime,
)
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL
from controlplane.controllers.modelpool.slotswitch import RuntimeSwitch, runtime_switch
from controlplane.controllers.modelpool.swaprecord import SwapRecord
from controlplane.controllers.modelpool.waiting import SeenReport, waiting_demand
from controlplane.controllers.modelpool.watches import PoolWatches, map_lease, slot_pods_on_node
from controlplane.probes.idle import IdleProbe
from controlplane.probes.llamacpp import SlotsProbe
from controlplane.runtime.cache import LABEL_INDEX, NAMESPACE_INDEX, Object
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import SERVICE_NAME_LABEL, member_urls, starting_urls
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.resources import (
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    LEASES,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    SERVICES,
)
from controlplane.runtime.tracing import context_of_traceparent
from controlplane.scheduling.budget import pool_budget
from controlplane.scheduling.idle import IdleSettings, IdleVerdict, judge_idle, parse_stamp
from controlplane.scheduling.idle import pooled_activity as activity_of

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.controllers.modelpool")

CONTROLLER_NAME: Final = "modelpool"
EVENT_REPORTER: Final = "modelpool-operator/modelpool"
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
        #: The swaps' phases as spans, the decisions' events and log lines.
        self.record = SwapRecord(recorder, self._swap_context)
        #: The pools' gauges (resident, phase, since when Swapping, budget).
        self.gauges = PoolGauges()

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

    # -- the reconcile ---------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.pools.store.get(key)
        if obj is None:
            self._superseded.pop(key, None)
            self.record.forget(key)
            self.gauges.forget(request.namespace, request.name)
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
        demand = self.live_reports(namespace, request.name)
        idle_rules = idle_settings(obj["spec"])
        idle = judge_pool_idle(
            pool.status, demand, idle_rules.rule, budget is not None, owner.intent is not None
        )
        owner = reclaimed_owner(owner, idle.act, idle_rules, pool.status.phase)
        evict = (owner.intent.evict if owner.intent is not None else ()) + idle.act
        switch = runtime_switch(obj)
        valid = all(m.found and m.claimed_by is None for m in members.values())
        seen = await self._observe_slot_server(pool, members, switch) if valid else None
        planned_owner = owner.name
        if seen is not None:
            members = seen.members
            if seen.outdated:
                planned_owner = None  # the server restarts once nothing is loaded: drain first
        if switch.switching:
            planned_owner = None  # the slot server turned on or off: what runs is drained first
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
            fence = judge_fence(
                plan.probe, pool.status.admission_closed, pool.status.admission_generation or 0,
                demand, (*plan.holding, *plan.refresh),
            )  # fmt: skip
            if fence.waiting:
                decision.set_attribute("modelpool.fence.waiting", list(fence.waiting.values()))
            if fence.fenced:
                models_of = seen.models_of if seen is not None else {}
                reports = await probe_members(self.probes, members, fence.fenced, models_of)
                blocking = {m: blocking_reports(members[m], reports[m]) for m in fence.fenced}
                release += [m for m in fence.fenced if reports[m] and not blocking[m]]
                deferral = deferral_from({m: r for m, r in blocking.items() if r})
            decision.set_attribute("modelpool.drain", release)
            decision.set_attribute("modelpool.owner_up", plan.grant is not None)
            if deferral is not None:
                decision.set_attribute("modelpool.deferred", deferral.reason)
                metrics.DRAIN_DEFERRALS.labels(namespace, request.name, deferral.reason).inc()
        grant = plan.grant
        withheld = grant is not None and not await room_confirmed(
            self.client, namespace, names, grant, budget, [*plan.holding, *keep]
        )
        if withheld:
            grant = None  # the caches are behind; looked at again (the pods' events come too)
        if grant is not None:
            self.record.owner_may_go_up(key, namespace, request.name, grant)
        slots = decided_slots(members, release, grant)
        runtime, switching = switch.current, None
        if self.slot_runtime is not None and valid:
            runtime, switching = await self.slot_runtime.switch_runtime(
                pool, switch, plan.holding, names, seen
            )

        now = datetime.now(UTC)
        waiting = self.waiting(demand, names, pool.status.resident_member)
        view = PoolView(
            members, owner, plan, deferral, now, waiting, slots, budget, keep, idle, fence, runtime
        )
        status = pool_status(pool, view)
        if status.phase == PHASE_READY:
            self.record.owner_ready(key, namespace, request.name, status.resident_member)
        self.gauges.export(namespace, request.name, pool.spec.swap_budget, status)
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
            self.record.decided(key, owner.name, released, grant)
            self.record.transitions(obj, previous, status, owner, now)
            resident = newly_resident(previous, status)
            if resident is not None:
                metrics.SWAPS_COMPLETED.labels(namespace, request.name, resident).inc()
            for member in set(released) & set(idle.act):
                metrics.RECLAIMS.labels(namespace, request.name, member, idle_rules.action).inc()
        self.record.decision_events(
            obj, key, plan.refresh, release, deferral, owner, idle.act, idle_rules.action
        )
        result = requeue_result(
            deferral, intent, waiting=bool(status.waiting), idle=idle, fencing=bool(fence.waiting)
        )
        if seen is not None and self.slot_runtime is not None:
            # The decision is written (or was already): the server carries it out.
            again = await self.slot_runtime.carry_out(key, slots, seen)
            if again is not None:
                result = Result(requeue_after=min(result.requeue_after or again, again))
        if switching is not None:
            result = Result(requeue_after=min(result.requeue_after or switching, switching))
        if withheld:
            again = min(result.requeue_after or DEFER_REQUEUE_SECONDS, DEFER_REQUEUE_SECONDS)
            return Result(requeue_after=again)
        return result

    def live_reports(self, namespace: str, pool: str) -> list[LiveReport]:
        """Every live, well-formed demand report of ``pool`` (every router-proxy replica's)."""
        return live_reports(
            self.leases.store.by_index(NAMESPACE_INDEX, namespace),
            pool,
            self.observer.expiry,
            on_malformed=lambda key, why: log.debug("demand report %s ignored: %s", key, why),
        )

    def waiting(
        self, live: Sequence[LiveReport], members: Sequence[str], resident: str | None
    ) -> list[WaitingDemand]:
        """The live reports' held requests, summed (``status.waiting``)."""
        mono_now, wall_now = time.monotonic(), time.time()
        reports = [SeenReport(wall_now - (mono_now - r.seen_at), r.demand) for r in live]
        return waiting_demand(reports, members, resident)

    async def _observe_slot_server(
        self, pool: ModelPool, members: Mapping[str, MemberState], switch: RuntimeSwitch
    ) -> SlotObservation | None:
        """Of a pool whose members run in its slot server, its members as the server shows them
        (one being turned off: read, not applied, until it is deleted); else None."""
        runtime = self.slot_runtime
        if not switch.slot_server or runtime is None:
            return None
        if switch.switching and not runtime.server_exists(pool):
            return None  # turned off and deleted: only its pods' end is waited for
        namespace = pool.metadata.namespace or ""
        isvcs = {
            name: isvc
            for name in members
            if (isvc := self.inference_services.store.get(f"{namespace}/{name}")) is not None
        }
        return await runtime.observe(pool, members, isvcs, apply=not switch.switching)


def judge_pool_idle(
    status: ModelPoolStatus,
    live: Sequence[LiveReport],
    rules: IdleSettings,
    shared: bool,
    requested: bool,
) -> IdleVerdict:
    """The idle clocks and the residents to give back (:mod:`~.idle`), on the live reports'
    demand and the clocks as last written."""
    if rules.after is None:
        return IdleVerdict()  # the common case: no clock, nothing summed
    return judge_idle(
        activity_of((m, e.held, e.active) for r in live for m, e in r.demand.items()),
        status.resident_names,
        rules,
        shared=shared,
        requested=requested,
        pool_since=parse_stamp(status.idle_since),
        member_since={m.name: parse_stamp(m.idle_since) for m in status.members if m.name},
        published=status.reclaiming,
        now=datetime.now(UTC),
    )


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
    slot_pods = manager.informer(PODS, label_selector=SLOT_SERVER_LABEL)
    slot_budgets = manager.informer(POD_DISRUPTION_BUDGETS, label_selector=SLOT_SERVER_LABEL)
    nodes = manager.informer(NODES)
    slot_runtime = SlotRuntime(
        manager.client,
        deployments=deployments,
        services=manager.informer(SERVICES),
        endpoint_slices=endpoint_slices,
        pods=slot_pods,
        nodes=nodes,
        budgets=slot_budgets,
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
    watches = PoolWatches(pools.store)
    (
        manager.new_controller(
            CONTROLLER_NAME, reconciler, max_concurrent_reconciles=MAX_CONCURRENT_RECONCILES
        )
        .for_(pools)
        .watches(pools, watches.map_rivals)
        .watches(inference_services, watches.map_member)
        .watches(deployments, watches.map_member)
        .watches(pods, watches.map_labelled(ISVC_LABEL))
        .watches(endpoint_slices, watches.map_slice)
        .watches(leases, map_lease)
        .watches(slot_pods, watches.map_member)
        .watches(slot_budgets, watches.map_member)
        .watches(nodes, slot_pods_on_node(slot_pods.store))
    )
    return reconciler
