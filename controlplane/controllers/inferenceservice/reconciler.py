"""The InferenceService reconciler: reads the caches, applies what differs, writes status on change.

*Why this module:* it is the orchestrator, the one place that decides the *order* of one
reconcile's acts on one InferenceService: the weights first, then the replicas by the pool's grant
(confirmed live before a raise), the NetworkPolicy and the PodDisruptionBudget before the
Deployment, the KV cache's save just before a lowering, the idle gate before a pod change or a
drain's move, the Service, the KV cache's restore, and last the status. Each step lives beside it
with its own state and I/O; the pure rules live beside those:

* :mod:`~controlplane.controllers.inferenceservice.fetching`: where the weights stand (the fetch
  Job and its progress, docs/inferenceservice.md, "Model weights"); until ``ModelReady`` is True
  the Deployment is held at 0, and once it is the pod is pinned to the node that holds the file;
* :mod:`~controlplane.controllers.inferenceservice.replicas`: the Deployment's replicas by the
  pool's grant, the settle of a member no pool lists, and the acknowledgement of the pool's
  decision (``status.poolDecision``);
* :mod:`~controlplane.controllers.inferenceservice.childwrites`: the children's writes
  (server-side apply, only when the cached child differs; the raise fenced);
* :mod:`~controlplane.controllers.inferenceservice.kvsteps`: the KV cache's save before a
  lowering and restore before a readiness gate;
* :mod:`~controlplane.controllers.inferenceservice.day2`: the idle gate of a pod change or a node
  drain, and the move of a pod off a cordoned node;
* :mod:`~controlplane.controllers.inferenceservice.statuswrite`: the status write and its events;
* :mod:`~controlplane.controllers.inferenceservice.watches`: which InferenceService a watched
  object's change concerns.

The steps never import this module, nor each other (import-linter contracts): what one needs of
another goes through the orchestrator's arguments. Each step is handed :attr:`client` at the call,
never keeps one, so the client this reconciler has at the moment is the one every write goes
through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Final

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.activation import POOL_LABEL
from controlplane.api.v1alpha1.inferenceservice import scales_to_zero
from controlplane.clock import TimeSource
from controlplane.controllers.children import foreign_child, needs_apply
from controlplane.controllers.inferenceservice.childwrites import ChildWriter
from controlplane.controllers.inferenceservice.day2 import UPDATE_RECHECK_SECONDS, DayTwoMoves
from controlplane.controllers.inferenceservice.desired import (
    ISVC_LABEL,
    desired_deployment,
    desired_service,
    owner_reference,
)
from controlplane.controllers.inferenceservice.fetching import WeightsFetcher
from controlplane.controllers.inferenceservice.idle import (
    StandaloneDemand,
    explain_idle,
    idle_requeue,
    judge_standalone,
    on_standalone_report,
)
from controlplane.controllers.inferenceservice.kvsteps import KvCacheSteps
from controlplane.controllers.inferenceservice.network import MemberNetworkPolicy
from controlplane.controllers.inferenceservice.replicas import ReplicaDecider, asked_replicas
from controlplane.controllers.inferenceservice.rollout import (
    UP_TO_DATE,
    pod_change,
    running_fetch_image,
)
from controlplane.controllers.inferenceservice.status import (
    compute_phase,
    desired_status,
    explain_hold,
    served_phase,
    status_changed,
)
from controlplane.controllers.inferenceservice.statuswrite import write_refused, write_status
from controlplane.controllers.inferenceservice.watches import (
    job_pod_to_owner,
    on_node,
    pod_to_owner,
    pool_to_members,
    slice_to_owner,
)
from controlplane.controllers.inferenceservice.weights import MODEL_OF_LABEL, WeightsPlacement
from controlplane.controllers.inferenceservice.weightsstatus import (
    WeightsVerdict,
    with_weights,
    without_fetch,
)
from controlplane.controllers.modelpool.slotserver import member_service_selector
from controlplane.probes.idle import IdleProbe
from controlplane.probes.llamacpp import SlotsProbe
from controlplane.probes.slotcache import SlotCacheClient
from controlplane.runtime.cache import NAMESPACE_INDEX, Object
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import SERVICE_NAME_LABEL
from controlplane.runtime.errors import Conflict, Invalid, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.resources import (
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    JOBS,
    LEASES,
    NETWORK_POLICIES,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    SERVICES,
)
from controlplane.scheduling.idle import IdleVerdict, stamp

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "inferenceservice"
EVENT_REPORTER: Final = "modelpool-operator/inferenceservice"
MAX_CONCURRENT_RECONCILES: Final = 2


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
        standalone_demand: StandaloneDemand | None = None,
        clock: TimeSource = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.inference_services = inference_services
        self.deployments = deployments
        self.services = services
        self.pods = pods
        #: None (unit tests of other rules): only sources read where they are are understood.
        self.weights = weights
        #: None for the optional children (unit tests of other rules): no NetworkPolicy or
        #: PodDisruptionBudget is read or written, and no node is known cordoned.
        self.children = ChildWriter(
            network_policies, network or MemberNetworkPolicy(), disruption_budgets
        )
        self.decider = ReplicaDecider(pools, clock)
        self.kv_cache = KvCacheSteps(
            recorder,
            slot_cache or SlotCacheClient(),
            endpoint_slices,
            clock=clock,
            wall_clock=wall_clock,
        )
        self.day2 = DayTwoMoves(idle_probe or SlotsProbe(), endpoint_slices, nodes)
        #: The router-proxies' demand for services no pool lists (None: none scales to zero).
        self.standalone_demand = standalone_demand
        #: Keys whose Deployment we lowered and whose cached Deployment still shows it up: a
        #: reconcile on that stale cache must not save the draining pod's slots a second time.
        self._lowered: set[str] = set()

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.inference_services.store.get(key)
        if obj is None:
            self.decider.forget(key)
            return Result()  # deleted: the garbage collector removes what it owned
        if obj["metadata"].get("deletionTimestamp"):
            return Result()
        deployment = self.deployments.store.get(key)
        service = self.services.store.get(key)
        policy = self.children.cached_policy(key)
        budget = self.children.cached_budget(key)
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
        replicas = self.decider.decide(obj, deployment, weights=verdict)
        idle = self._idle(obj, replicas.pools)
        if idle.act:
            replicas = replace(replicas, count=0)  # scaled to zero for idleness
        if conflict is None and replicas.count > asked_replicas(deployment):
            try:
                replicas = await self.decider.confirm_raise(
                    self.client, key, obj, deployment, verdict
                )
            except NotFound:
                return Result()  # deleted meanwhile
        isvc = InferenceService.from_dict(replicas.obj)
        pods = self._pod_count(isvc)
        requeue = _sooner(requeue, idle_requeue(idle, isvc.spec.idle_after))
        if idle.act and conflict is None and asked_replicas(deployment) > 0:
            busy = await self.day2.busy_endpoints(isvc)
            if busy:  # the /slots gate: nothing in flight is cut, as for a pool's drain
                log.info("%s: scale to zero deferred: %s", key, "; ".join(busy))
                replicas = replace(replicas, count=asked_replicas(deployment))
                requeue = _sooner(requeue, UPDATE_RECHECK_SECONDS)
        if conflict is None:
            # Before the Deployment: a member's pod never starts open to the whole cluster.
            served = replicas.slot_server
            selector = member_service_selector(served["metadata"]["name"]) if served else None
            await self.children.apply_network_policy(self.client, key, isvc, policy, selector)
            # Before the Deployment too: no eviction reaches a pod that may serve.
            await self.children.apply_budget(self.client, key, isvc, budget)
            if (running := running_fetch_image(deployment, pods)) is not None:
                placement = replace(placement, fetch_image=running)
            wanted = desired_deployment(
                isvc, replicas.count, placement=placement, node=verdict.status.node
            )
            if asked_replicas(deployment) == 0:
                self._lowered.discard(key)  # the cache has caught up with our last lowering
            write = needs_apply(deployment, wanted)
            leaving = self.day2.pods_leaving(self._pods(isvc))
            if write or leaving:
                changes_pod = write and pod_change(deployment, wanted)
                rollout = await self.day2.rollout_gate(
                    isvc,
                    changes_pod,
                    leaving,
                    wanted_replicas=replicas.count,
                    pooled=bool(replicas.pools),
                    pods=pods,
                )
                write = write and not rollout.pending
                if rollout.pending and not replicas.pools:
                    requeue = _sooner(requeue, UPDATE_RECHECK_SECONDS)  # /slots has no watch
                elif leaving and not rollout.pending and replicas.count > 0:
                    await self.day2.move_off(self.client, key, leaving)
            if write:
                lowering = replicas.count < asked_replicas(deployment)
                raising = replicas.count > asked_replicas(deployment)
                if lowering and key not in self._lowered:
                    isvc = await self.kv_cache.save(self.client, key, isvc, self._pods(isvc))
                try:
                    deployment = await self.children.apply_deployment(
                        self.client, wanted, deployment, raising=raising
                    )
                except Conflict:
                    log.info("%s: raise refused: the Deployment changed since it was read", key)
                    return Result(requeue=True)
                except Invalid as err:
                    # spec.pod's pass-through types (affinity, volumes) are validated here, by
                    # the Deployment's schema: say so, and wait for the spec to change.
                    refused = f"the API server refused its Deployment: {err.message}"
                    log.warning("%s: %s", key, refused)
                    return await write_refused(self.client, self.recorder, obj, isvc, refused)
                self.decider.applied(key, deployment)
                if lowering:
                    self._lowered.add(key)
                elif replicas.count > 0:
                    self._lowered.discard(key)
                log.info("%s: applied Deployment (replicas %d)", key, replicas.count)
            await self.children.apply_service(
                self.client, key, service, desired_service(isvc, selector)
            )
            isvc, restore_requeue = await self.kv_cache.restore(
                self.client, key, isvc, self._pods(isvc)
            )
            requeue = _sooner(requeue, restore_requeue)
        decision = compute_phase(replicas.count, deployment, pods, conflict)
        decision = served_phase(decision, replicas.slot_server, isvc.name)
        decision = explain_hold(decision, replicas.hold)
        decision = explain_idle(decision, idle, isvc.spec.idle_after)
        if replicas.hold.settling:
            requeue = min(requeue or replicas.hold.settle_seconds, replicas.hold.settle_seconds)
        settle = Result(requeue_after=requeue) if requeue is not None else Result()
        status = desired_status(
            isvc, decision, deployment, replicas.pools, replicas.count, update=rollout
        )
        with_weights(status, verdict, isvc.metadata.generation)
        status.idle_since = stamp(idle.pool_since)
        status.scaled_to_zero = True if idle.due else None
        if conflict is None:
            status.pool_decision = self.decider.acknowledgement(key, replicas, deployment)
        if not status_changed(isvc.status, status):
            return settle
        return await write_status(
            self.client, self.recorder, key, obj, isvc, status, decision, verdict, settle
        )

    def _idle(self, obj: Object, pools: tuple[str, ...]) -> IdleVerdict:
        """Of a service no pool lists, with ``spec.idleAfter``: its idle verdict (:mod:`~.idle`)."""
        if pools or self.standalone_demand is None or not scales_to_zero(obj):
            return IdleVerdict()  # the common case: no parse, no read of the reports
        isvc = InferenceService.from_dict(obj)
        activity = self.standalone_demand.activity(isvc.namespace or "", isvc.name)
        return judge_standalone(isvc, activity, datetime.now(UTC))

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

    def _pod_keys(self, isvc: InferenceService) -> set[str]:
        label = f"{ISVC_LABEL}={isvc.name}"
        keys = set(self.pods.store.index_keys("label", label))
        return keys & set(self.pods.store.index_keys(NAMESPACE_INDEX, isvc.namespace or ""))

    def _pod_count(self, isvc: InferenceService) -> int:
        return len(self._pod_keys(isvc))

    def _pods(self, isvc: InferenceService) -> list[Object]:
        return [pod for key in sorted(self._pod_keys(isvc)) if (pod := self.pods.store.get(key))]


def _sooner(first: float | None, second: float | None) -> float | None:
    """The sooner of two requeues, either of which may be none."""
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)


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
    leases = manager.informer(LEASES, label_selector=POOL_LABEL)
    standalone_demand = StandaloneDemand(leases)
    leases.add_handler(standalone_demand)  # before the controller's handler: seen, then reconciled
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
        standalone_demand=standalone_demand,
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
        .watches(job_pods, job_pod_to_owner)
        .watches(nodes, lambda node: on_node(inference_services.store, pods.store, node))
        .watches(pods, pod_to_owner)
        .watches(pools, pool_to_members)
        .watches(endpoint_slices, slice_to_owner)
        .watches(leases, lambda lease: on_standalone_report(inference_services.store, lease))
    )
    return reconciler
