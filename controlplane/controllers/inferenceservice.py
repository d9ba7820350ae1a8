"""The InferenceService controller: one Deployment and one Service per InferenceService.

An InferenceService serves one model with one llama.cpp-compatible server. The controller owns a
Deployment and a Service of the same name (``ownerReferences`` with ``controller`` and
``blockOwnerDeletion``, so deleting the InferenceService cascades through the garbage collector)
and copies ``spec.replicas`` (0 or 1; absent means 1), the activation signal pools drive, to the
Deployment.

**Pool members run only when granted** (DESIGN 4.6, :mod:`~controlplane.controllers.poolgrant`).
The Deployment's replicas are :func:`~controlplane.controllers.poolgrant.deployment_replicas`:
``spec.replicas`` for an InferenceService no pool lists or one its pool has granted the slot
(``inference.modelpool.dev/granted-by``); otherwise never more than the Deployment already has.
Lowering is always allowed; raising (creating the Deployment above 0 included) is confirmed with
the API server first (:meth:`InferenceServiceReconciler._confirm_raise`): a live GET of the
InferenceService (a grant revoked since the cache was filled starts nothing) and, when the cache
shows no pool listing it, a live LIST of the namespace's ModelPools (a pool applied together with
it may not have reached the cache). An InferenceService no pool lists is started only once it has
been known for :data:`UNLISTED_SETTLE_SECONDS`: ``kubectl apply -f`` of a directory creates the
members a few milliseconds before their pool, faster than any reconcile, and a member started in
that gap would run beside the pool's choice. A withheld member is Stopped with reason
``NotGranted`` naming the pool, and ``status.pool`` names the pool that decides.

**Writes.** Both children are written with server-side apply as ``modelpool-operator`` (forced:
the fields we own are ours), and only when the cached child differs from what is wanted. "Differs"
is decided by :func:`needs_apply`: every field we want must be present with the same value in the
cached object (server defaults are extra fields and do not count), and the wanted object carries
a hash of itself in the ``inference.modelpool.dev/spec-hash`` annotation, so a field we stopped
wanting (a removed argument, a dropped node selector) changes the hash and is applied away too.
``resources`` are compared through the hash only, because the API server canonicalises
quantities (``0.5`` becomes ``500m``). A child of that name that another controller owns is never
taken over: the InferenceService stays Pending and says which object is in the way.

**Phase**, first rule that matches (:func:`compute_phase`):

1. Pending: the spec cannot be acted on: a Deployment or Service of that name is not controlled
   by this InferenceService.
2. Creating: the Deployment is missing from the cache, or its status was never written (no
   ``status.observedGeneration``: no deployment controller has looked at it yet).
3. Ready: ``readyReplicas >= 1`` (the server answers ``/health``), whatever the desired count: a
   member being scaled down still serves until its pod stops being ready.
4. Stopped: desired replicas 0 (the Deployment's, after the grant), no ready replica, the
   Deployment reports no replicas **and** no pod of this InferenceService is left, Terminating
   ones included: Stopped means the process has exited and its GPU memory is free, which is what
   a pool waits for before the next member starts.
5. Failed: the Deployment's ``Progressing`` condition is ``False`` with reason
   ``ProgressDeadlineExceeded`` (``progressDeadlineSeconds`` is :data:`PROGRESS_DEADLINE_SECONDS`).
6. Creating otherwise: starting (desired 1, nothing ready yet; reason ``Starting``) or stopping
   (desired 0, pods still terminating; reason ``Stopping``). The phase enum has no "Stopping":
   the ``Ready`` condition's reason tells the two apart.

**Status** (``phase``, ``readyReplicas``, ``endpoint`` = ``http://NAME.NAMESPACE.svc:PORT``,
``observedGeneration`` and a ``Ready`` condition) is written through the status subresource with
the cached ``resourceVersion`` and only when it differs from the cached status; a 409 requeues.
Each phase change is recorded as an ``events.k8s.io`` event on the InferenceService.

Pods are watched (by the ``inference.modelpool.dev/inferenceservice`` label, which the Deployment's
template carries) only to know when the last one is gone; nothing is polled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from controlplane.api.v1alpha1 import (
    InferenceService,
    InferenceServiceStatus,
    ModelPool,
    set_condition,
)
from controlplane.api.v1alpha1.conditions import FALSE, TRUE
from controlplane.api.v1alpha1.inferenceservice import (
    DEFAULT_IMAGE,
    DEFAULT_PORT,
    PHASE_CREATING,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_READY,
    PHASE_STOPPED,
)
from controlplane.api.v1alpha1.meta import API_VERSION
from controlplane.controllers.children import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PROGRESS_DEADLINE_EXCEEDED,
    foreign_child,
    needs_apply,
    progress_deadline_exceeded,
    resource_requirements,
    with_spec_hash,
)
from controlplane.controllers.poolgrant import (
    deployment_replicas,
    granted_by,
    pools_listing,
    withheld_by,
)
from controlplane.runtime.cache import NAMESPACE_INDEX, Object
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.resources import DEPLOYMENTS, PODS, SERVICES

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "inferenceservice"
FIELD_MANAGER: Final = "modelpool-operator"
EVENT_REPORTER: Final = "modelpool-operator/inferenceservice"

#: Labels on everything the controller creates; the last one is the selector.
NAME_LABEL: Final = "app.kubernetes.io/name"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
ISVC_LABEL: Final = "inference.modelpool.dev/inferenceservice"
SERVER_NAME: Final = "llama-server"

CONTAINER_NAME: Final = "server"
PORT_NAME: Final = "http"
HEALTH_PATH: Final = "/health"
#: A model load takes minutes: liveness starts judging only after this long, so a slow load is
#: never killed; readiness (no delay) is what gates traffic.
LIVENESS_INITIAL_DELAY_SECONDS: Final = 600
LIVENESS_PERIOD_SECONDS: Final = 20
LIVENESS_FAILURE_THRESHOLD: Final = 3
READINESS_PERIOD_SECONDS: Final = 5
#: How long a rollout may go without progress before the Deployment (and we) call it Failed.
PROGRESS_DEADLINE_SECONDS: Final = 1800
TERMINATION_GRACE_SECONDS: Final = 30
REVISION_HISTORY_LIMIT: Final = 2

CONDITION_READY: Final = "Ready"
REASON_NOT_OWNED: Final = "NotOwned"
REASON_DEPLOYMENT_CREATING: Final = "DeploymentCreating"
REASON_DEPLOYMENT_NOT_OBSERVED: Final = "DeploymentNotObserved"
REASON_SERVER_READY: Final = "ServerReady"
REASON_SCALED_TO_ZERO: Final = "ScaledToZero"
REASON_PROGRESS_DEADLINE: Final = PROGRESS_DEADLINE_EXCEEDED
REASON_STARTING: Final = "Starting"
REASON_STOPPING: Final = "Stopping"
REASON_NOT_GRANTED: Final = "NotGranted"
REASON_WAITING_FOR_POOLS: Final = "WaitingForPools"

#: How long an InferenceService no pool lists waits, from when this controller first saw it,
#: before its Deployment is first raised: ``kubectl apply -f`` of a pool and its members creates
#: the members first, one round trip apart, and a member started before its pool exists would run
#: beside the pool's choice. A model load takes far longer than this.
UNLISTED_SETTLE_SECONDS: Final = 2.0


# -- what is wanted ------------------------------------------------------------------------------


def selector_labels(name: str) -> dict[str, str]:
    return {ISVC_LABEL: name}


def child_labels(name: str) -> dict[str, str]:
    return {
        NAME_LABEL: SERVER_NAME,
        INSTANCE_LABEL: name,
        MANAGED_BY_LABEL: MANAGED_BY,
        ISVC_LABEL: name,
    }


def owner_reference(isvc: InferenceService) -> dict[str, Any]:
    """The controller reference children carry: deletion cascades, and blocks in foreground."""
    if not isvc.metadata.uid:
        raise ValueError(f"InferenceService {isvc.name} has no uid (it was never stored)")
    return {
        "apiVersion": API_VERSION,
        "kind": InferenceService.KIND,
        "name": isvc.name,
        "uid": isvc.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def server_port(isvc: InferenceService) -> int:
    return isvc.spec.port or DEFAULT_PORT


def server_args(isvc: InferenceService) -> list[str]:
    """llama-server's arguments: the model, its served name, where to listen, then ``spec.args``."""
    model = isvc.spec.model
    if model is None or not model.name or not model.source:
        raise ValueError(f"InferenceService {isvc.name}: spec.model.name and .source are required")
    return [
        "--model",
        model.source,
        "--alias",
        model.name,
        "--host",
        "0.0.0.0",
        "--port",
        str(server_port(isvc)),
        *isvc.spec.args,
    ]


def endpoint(isvc: InferenceService) -> str:
    return f"http://{isvc.name}.{isvc.namespace}.svc:{server_port(isvc)}"


def _resources(isvc: InferenceService) -> dict[str, Any]:
    wanted = isvc.spec.resources
    return resource_requirements(wanted.limits, wanted.requests) if wanted is not None else {}


def _probe(initial_delay: int, period: int, failures: int) -> dict[str, Any]:
    probe: dict[str, Any] = {
        "httpGet": {"path": HEALTH_PATH, "port": PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }
    if initial_delay:
        probe["initialDelaySeconds"] = initial_delay
    return probe


def _metadata(isvc: InferenceService) -> dict[str, Any]:
    return {
        "name": isvc.name,
        "namespace": isvc.namespace,
        "labels": child_labels(isvc.name),
        "ownerReferences": [owner_reference(isvc)],
    }


def desired_deployment(isvc: InferenceService, replicas: int | None = None) -> dict[str, Any]:
    """The Deployment this InferenceService wants, as a server-side apply body; ``replicas`` is
    what the grant allows (:func:`~controlplane.controllers.poolgrant.deployment_replicas`),
    ``spec.replicas`` when not given."""
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": isvc.spec.image or DEFAULT_IMAGE,
        "args": server_args(isvc),
        "ports": [{"name": PORT_NAME, "containerPort": server_port(isvc), "protocol": "TCP"}],
        "readinessProbe": _probe(0, READINESS_PERIOD_SECONDS, 3),
        "livenessProbe": _probe(
            LIVENESS_INITIAL_DELAY_SECONDS, LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURE_THRESHOLD
        ),
        # The server image decides its user (llama.cpp's runs as root), so runAsNonRoot is left
        # to the image; everything that does not depend on it is locked down.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if resources := _resources(isvc):
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    if isvc.spec.node_selector:
        pod_spec["nodeSelector"] = dict(isvc.spec.node_selector)
    return with_spec_hash(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(isvc),
            "spec": {
                "replicas": isvc.spec.desired_replicas() if replicas is None else replicas,
                "selector": {"matchLabels": selector_labels(isvc.name)},
                # One GPU: the old pod must be gone before the new one starts.
                "strategy": {"type": "Recreate"},
                "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
                "revisionHistoryLimit": REVISION_HISTORY_LIMIT,
                "template": {
                    "metadata": {"labels": child_labels(isvc.name)},
                    "spec": pod_spec,
                },
            },
        }
    )


def desired_service(isvc: InferenceService) -> dict[str, Any]:
    """The ClusterIP Service in front of the server, as a server-side apply body."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(isvc),
            "spec": {
                "type": "ClusterIP",
                "selector": selector_labels(isvc.name),
                "ports": [
                    {
                        "name": PORT_NAME,
                        "port": server_port(isvc),
                        "targetPort": PORT_NAME,
                        "protocol": "TCP",
                    }
                ],
            },
        }
    )


# -- what is observed ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hold:
    """Why the Deployment has fewer replicas than ``spec.replicas`` asks, if it has."""

    #: The pool(s) listing it that have not granted it the slot.
    withheld_by: str | None = None
    #: Listed by no pool and too new to be sure none is coming: seconds left to wait.
    settle_seconds: float = 0.0

    @property
    def settling(self) -> bool:
        return self.settle_seconds > 0


@dataclass(frozen=True, slots=True)
class PhaseDecision:
    """The phase and the ``Ready`` condition's reason and message that go with it."""

    phase: str
    reason: str
    message: str


def compute_phase(
    desired_replicas: int,
    deployment: Mapping[str, Any] | None,
    pods: int,
    conflict: str | None = None,
) -> PhaseDecision:
    """The phase, by the rules in the module docstring (first match wins)."""
    if conflict is not None:
        return PhaseDecision(PHASE_PENDING, REASON_NOT_OWNED, conflict)
    if deployment is None:
        return PhaseDecision(
            PHASE_CREATING, REASON_DEPLOYMENT_CREATING, "the Deployment is being created"
        )
    status = deployment.get("status") or {}
    if status.get("observedGeneration") is None:
        return PhaseDecision(
            PHASE_CREATING,
            REASON_DEPLOYMENT_NOT_OBSERVED,
            "no deployment controller has reported on the Deployment yet",
        )
    ready = int(status.get("readyReplicas") or 0)
    if ready >= 1:
        return PhaseDecision(PHASE_READY, REASON_SERVER_READY, f"{ready} ready replica(s)")
    if desired_replicas == 0 and pods == 0 and not status.get("replicas"):
        return PhaseDecision(PHASE_STOPPED, REASON_SCALED_TO_ZERO, "scaled to zero; no pods left")
    if (progressing := progress_deadline_exceeded(deployment)) is not None:
        return PhaseDecision(
            PHASE_FAILED,
            REASON_PROGRESS_DEADLINE,
            str(progressing.get("message") or "the Deployment made no progress in time"),
        )
    if desired_replicas == 0:
        return PhaseDecision(PHASE_CREATING, REASON_STOPPING, f"{pods} pod(s) still terminating")
    return PhaseDecision(PHASE_CREATING, REASON_STARTING, "waiting for the server to be ready")


def explain_hold(decision: PhaseDecision, hold: Hold) -> PhaseDecision:
    """Say why a member that asks to run does not: withheld by its pool (Stopped, ``NotGranted``)
    or waiting for a pool that may list it (Creating, ``WaitingForPools``). A phase that reports
    something else (Ready, pods still terminating, Failed, not owned) is left as it is."""
    if decision.reason == REASON_SCALED_TO_ZERO and hold.withheld_by is not None:
        message = f"a member of pool {hold.withheld_by}, which has not granted it the slot"
        return PhaseDecision(PHASE_STOPPED, REASON_NOT_GRANTED, message)
    if hold.settling and decision.reason in (REASON_SCALED_TO_ZERO, REASON_DEPLOYMENT_NOT_OBSERVED):
        message = "no pool lists it yet; it starts unless one does within a moment"
        return PhaseDecision(PHASE_CREATING, REASON_WAITING_FOR_POOLS, message)
    return decision


def desired_status(
    isvc: InferenceService,
    decision: PhaseDecision,
    deployment: Mapping[str, Any] | None,
    pools: Iterable[str] = (),
) -> InferenceServiceStatus:
    """The status to write: a copy of the current one with every field we own set.

    ``lastTransitionTime`` of the ``Ready`` condition moves only when its status flips, so the
    result equals the current status whenever nothing changed.
    """
    status = InferenceServiceStatus.from_dict(isvc.status.to_dict())
    ready = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)
    status.phase = decision.phase
    status.ready_replicas = ready
    status.endpoint = endpoint(isvc)
    status.pool = ", ".join(pools) or None
    status.observed_generation = isvc.metadata.generation
    set_condition(
        status.conditions,
        CONDITION_READY,
        TRUE if decision.phase == PHASE_READY else FALSE,
        decision.reason,
        decision.message,
        isvc.metadata.generation,
    )
    return status


def status_changed(current: InferenceServiceStatus, wanted: InferenceServiceStatus) -> bool:
    return bool(current.to_dict() != wanted.to_dict())


# -- the reconciler ------------------------------------------------------------------------------


Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Replicas:
    """What the Deployment gets, why it may get less than asked, and the objects it was decided
    from (the live ones when a raise was confirmed)."""

    count: int
    hold: Hold
    pools: tuple[str, ...]
    obj: Object


class InferenceServiceReconciler:
    """Level-triggered: reads the caches, applies what differs, writes status on change."""

    def __init__(
        self,
        manager: Manager,
        recorder: EventRecorder,
        *,
        inference_services: Informer,
        deployments: Informer,
        services: Informer,
        pods: Informer,
        pools: Informer,
        clock: Clock = time.monotonic,
    ) -> None:
        self.client = manager.client
        self.recorder = recorder
        self.inference_services = inference_services
        self.deployments = deployments
        self.services = services
        self.pods = pods
        self.pools = pools
        self.clock = clock
        #: Per key, the uid and when we first saw it, for :data:`UNLISTED_SETTLE_SECONDS`.
        self._first_seen: dict[str, tuple[str | None, float]] = {}

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.inference_services.store.get(key)
        if obj is None:
            self._first_seen.pop(key, None)
            return Result()  # deleted: the garbage collector removes what it owned
        if obj["metadata"].get("deletionTimestamp"):
            return Result()
        deployment = self.deployments.store.get(key)
        service = self.services.store.get(key)
        conflict = foreign_child(
            "InferenceService",
            obj["metadata"].get("uid"),
            (("Deployment", deployment), ("Service", service)),
        )
        replicas = self._replicas(obj, deployment)
        if conflict is None and replicas.count > _deployment_replicas(deployment):
            try:
                replicas = await self._confirm_raise(key, obj, deployment)
            except NotFound:
                return Result()  # deleted meanwhile
        isvc = InferenceService.from_dict(replicas.obj)
        if conflict is None:
            wanted = desired_deployment(isvc, replicas.count)
            if needs_apply(deployment, wanted):
                deployment = await self.client.apply(
                    DEPLOYMENTS, wanted, field_manager=FIELD_MANAGER, force=True
                )
                log.info("%s: applied Deployment (replicas %d)", key, replicas.count)
            wanted = desired_service(isvc)
            if needs_apply(service, wanted):
                await self.client.apply(SERVICES, wanted, field_manager=FIELD_MANAGER, force=True)
                log.info("%s: applied Service", key)
        decision = compute_phase(replicas.count, deployment, self._pod_count(isvc), conflict)
        decision = explain_hold(decision, replicas.hold)
        settle = (
            Result(requeue_after=replicas.hold.settle_seconds)
            if replicas.hold.settling
            else Result()
        )
        status = desired_status(isvc, decision, deployment, replicas.pools)
        if not status_changed(isvc.status, status):
            return settle
        previous = isvc.status.phase
        isvc.status = status
        try:
            await self.client.update_status(InferenceService.resource(), isvc.to_dict())
        except Conflict:
            return Result(requeue=True)  # our cache was stale; the watch brings the new version
        except NotFound:
            return Result()
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

    def _replicas(
        self,
        obj: Object,
        deployment: Mapping[str, Any] | None,
        pools: Iterable[Object] | None = None,
    ) -> Replicas:
        """The Deployment's replicas by the grant, from the cached pools unless ``pools`` (a live
        list) is given; an unlisted InferenceService still settling is held at what it has."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        if pools is None:
            pools = self.pools.store.by_index(NAMESPACE_INDEX, namespace)
        listing = tuple(pools_listing(pools, meta["name"]))
        wanted = InferenceService.from_dict(obj).spec.desired_replicas()
        grant = granted_by(obj)
        current = _deployment_replicas(deployment)
        count = deployment_replicas(wanted, listing, grant, current)
        hold = Hold(withheld_by=withheld_by(wanted, listing, grant))
        settle = self._settle_seconds(f"{namespace}/{meta['name']}", meta.get("uid"))
        if not listing and count > current and settle > 0:
            count, hold = current, replace(hold, settle_seconds=settle)
        return Replicas(count, hold, listing, obj)

    async def _confirm_raise(
        self, key: str, cached: Object, deployment: Mapping[str, Any] | None
    ) -> Replicas:
        """Decide a raise again from the API server, not the caches.

        A live GET of the InferenceService: a grant the pool revoked after our cache was filled
        starts nothing. When the cache shows no pool listing it, a live LIST of the namespace's
        ModelPools (a consistent read): a pool created together with it may not be cached yet.
        What remains is one round trip, from the GET to our apply: a pool that revokes the grant,
        sees the member released (its Deployment still at 0) and grants another member, all inside
        that round trip, would see our raise only afterwards. The pool needs two writes and a
        watch delivery to do so; we need one request. Raises are rare (a swap's last step), and
        the pool keeps watching the Deployment, so it would then hold every further grant until
        the raised member is drained again.
        """
        meta = cached["metadata"]
        namespace = meta.get("namespace") or ""
        live = await self.client.get(InferenceService.resource(), meta["name"], namespace)
        replicas = self._replicas(live, deployment)
        if not replicas.pools:
            pools = (await self.client.list(ModelPool.resource(), namespace)).items
            replicas = self._replicas(live, deployment, pools)
        if replicas.count > _deployment_replicas(deployment):
            log.info("%s: raising the Deployment, confirmed live", key)
        return replicas

    def _settle_seconds(self, key: str, uid: str | None) -> float:
        """Seconds left before an InferenceService first seen just now may be started unlisted."""
        now = self.clock()
        seen = self._first_seen.get(key)
        if seen is None or seen[0] != uid:
            seen = (uid, now)
            self._first_seen[key] = seen
        return max(0.0, seen[1] + UNLISTED_SETTLE_SECONDS - now)

    def _pod_count(self, isvc: InferenceService) -> int:
        label = f"{ISVC_LABEL}={isvc.name}"
        keys = set(self.pods.store.index_keys("label", label))
        return len(keys & set(self.pods.store.index_keys(NAMESPACE_INDEX, isvc.namespace or "")))


def _deployment_replicas(deployment: Mapping[str, Any] | None) -> int:
    """The replicas the Deployment is asked for: 0 when there is none yet."""
    if deployment is None:
        return 0
    return int((deployment.get("spec") or {}).get("replicas") or 0)


def _pool_to_members(pool: Mapping[str, Any]) -> Iterable[Request]:
    """A pool to every InferenceService it lists: joining or leaving a pool changes whether a
    member may be raised and what its status says."""
    meta = pool["metadata"]
    refs = (pool.get("spec") or {}).get("members") or ()
    names = {
        str(name) for ref in refs if (name := (ref.get("inferenceServiceRef") or {}).get("name"))
    }
    return tuple(Request(meta.get("namespace") or "", name) for name in sorted(names))


def _pods_to_owner(pod: Mapping[str, Any]) -> Iterable[Request]:
    meta = pod["metadata"]
    name = (meta.get("labels") or {}).get(ISVC_LABEL)
    return (Request(meta.get("namespace") or "", name),) if name else ()


def setup_inference_service_controller(
    manager: Manager, identity: str
) -> InferenceServiceReconciler:
    """Wire the controller into ``manager`` (watching every namespace)."""
    inference_services = manager.informer(InferenceService.resource())
    deployments = manager.informer(DEPLOYMENTS)
    services = manager.informer(SERVICES)
    pods = manager.informer(PODS, label_selector=ISVC_LABEL)
    pools = manager.informer(ModelPool.resource())
    recorder = manager.event_recorder(EVENT_REPORTER, identity)
    reconciler = InferenceServiceReconciler(
        manager,
        recorder,
        inference_services=inference_services,
        deployments=deployments,
        services=services,
        pods=pods,
        pools=pools,
    )
    (
        manager.new_controller(CONTROLLER_NAME, reconciler, max_concurrent_reconciles=2)
        .for_(inference_services)
        .owns(deployments)
        .owns(services)
        .watches(pods, _pods_to_owner)
        .watches(pools, _pool_to_members)
    )
    return reconciler
