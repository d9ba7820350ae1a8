"""The InferenceService controller: one Deployment and one Service per InferenceService.

An InferenceService serves one model with one llama.cpp-compatible server. The controller owns a
Deployment and a Service of the same name (``ownerReferences`` with ``controller`` and
``blockOwnerDeletion``, so deleting the InferenceService cascades through the garbage collector)
and copies ``spec.replicas`` (0 or 1; absent means 1), the activation signal pools drive, to the
Deployment.

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
4. Stopped: desired replicas 0, no ready replica, the Deployment reports no replicas **and** no
   pod of this InferenceService is left, Terminating ones included: Stopped means the process has
   exited and its GPU memory is free, which is what a pool waits for before the next member starts.
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, InferenceServiceStatus, set_condition
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
from controlplane.runtime.cache import NAMESPACE_INDEX
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


def desired_deployment(isvc: InferenceService) -> dict[str, Any]:
    """The Deployment this InferenceService wants, as a server-side apply body."""
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
                "replicas": isvc.spec.desired_replicas(),
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


def desired_status(
    isvc: InferenceService, decision: PhaseDecision, deployment: Mapping[str, Any] | None
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
    ) -> None:
        self.client = manager.client
        self.recorder = recorder
        self.inference_services = inference_services
        self.deployments = deployments
        self.services = services
        self.pods = pods

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.inference_services.store.get(key)
        if obj is None:
            return Result()  # deleted: the garbage collector removes what it owned
        isvc = InferenceService.from_dict(obj)
        if isvc.metadata.deletion_timestamp:
            return Result()
        deployment = self.deployments.store.get(key)
        service = self.services.store.get(key)
        conflict = foreign_child(
            "InferenceService",
            isvc.metadata.uid,
            (("Deployment", deployment), ("Service", service)),
        )
        if conflict is None:
            wanted = desired_deployment(isvc)
            if needs_apply(deployment, wanted):
                deployment = await self.client.apply(
                    DEPLOYMENTS, wanted, field_manager=FIELD_MANAGER, force=True
                )
                log.info("%s: applied Deployment", key)
            wanted = desired_service(isvc)
            if needs_apply(service, wanted):
                await self.client.apply(SERVICES, wanted, field_manager=FIELD_MANAGER, force=True)
                log.info("%s: applied Service", key)
        decision = compute_phase(
            isvc.spec.desired_replicas(), deployment, self._pod_count(isvc), conflict
        )
        status = desired_status(isvc, decision, deployment)
        if not status_changed(isvc.status, status):
            return Result()
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
        return Result()

    def _pod_count(self, isvc: InferenceService) -> int:
        label = f"{ISVC_LABEL}={isvc.name}"
        keys = set(self.pods.store.index_keys("label", label))
        return len(keys & set(self.pods.store.index_keys(NAMESPACE_INDEX, isvc.namespace or "")))


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
    recorder = manager.event_recorder(EVENT_REPORTER, identity)
    reconciler = InferenceServiceReconciler(
        manager,
        recorder,
        inference_services=inference_services,
        deployments=deployments,
        services=services,
        pods=pods,
    )
    (
        manager.new_controller(CONTROLLER_NAME, reconciler, max_concurrent_reconciles=2)
        .for_(inference_services)
        .owns(deployments)
        .owns(services)
        .watches(pods, _pods_to_owner)
    )
    return reconciler
