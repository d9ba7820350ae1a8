"""What an InferenceService wants: its Deployment and its Service, as server-side apply bodies.

Pure functions of the InferenceService (and of the replicas the grant allows), kept apart from the
status rules and the reconciler so that ``tests/unit/test_inferenceservice_desired.py`` checks them
as such. With ``spec.kvCache.enabled`` the server's pod gets the KV cache's folder (a hostPath
volume, :func:`kv_cache_host_path`, mounted at :data:`KV_CACHE_MOUNT_PATH` and given to the server
as ``--slot-save-path``) and a readiness gate (:data:`KV_CACHE_RESTORED_CONDITION`) that the
reconciler sets once the saved slots are restored, so the pod counts as Ready only after that.
Both children carry a controller ``ownerReference`` with ``blockOwnerDeletion`` (deleting
the InferenceService cascades through the garbage collector) and the labels of
:func:`child_labels`; :data:`ISVC_LABEL` is the selector, and the pool controller reads it (and
:data:`PORT_NAME`) to find a member's pods and endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.inferenceservice import DEFAULT_IMAGE, DEFAULT_PORT
from controlplane.api.v1alpha1.meta import API_VERSION
from controlplane.controllers.children import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    resource_requirements,
    with_spec_hash,
)
from controlplane.controllers.inferenceservice.rollout import with_template_hash
from controlplane.controllers.inferenceservice.weights import (
    WeightsPlacement,
    model_pod_parts,
    pinned_affinity,
    placement_fields,
    user_env,
    user_env_from,
)
from controlplane.runtime.endpoints import MEMBER_PORT_NAME

#: Labels on everything the controller creates; the last one is the selector.
ISVC_LABEL: Final = "inference.modelpool.dev/inferenceservice"
SERVER_NAME: Final = "llama-server"
#: The :data:`~controlplane.controllers.children.COMPONENT_LABEL` of every member's children,
#: whatever its runtime: the members' PodMonitor (manifests/monitoring) selects by it.
MEMBER_COMPONENT: Final = "member"

CONTAINER_NAME: Final = "server"
PORT_NAME: Final = MEMBER_PORT_NAME
HEALTH_PATH: Final = "/health"
#: A model load takes minutes. The startup probe asks ``/health`` every second for up to 660
#: attempts (the 11 min the liveness probe used to allow: a 600 s delay, then three 20 s periods),
#: so a slow load is never killed; liveness and readiness wait for it. The kubelet probes readiness
#: at once when a container has started and has no readiness result yet (its prober manager), so
#: a loaded member is Ready within about a second, not at readiness's next 5 s period: what the
#: pool's ``residentMember``, the other proxy replicas and the end of a swap wait for.
STARTUP_PERIOD_SECONDS: Final = 1
STARTUP_FAILURE_THRESHOLD: Final = 660
LIVENESS_PERIOD_SECONDS: Final = 20
LIVENESS_FAILURE_THRESHOLD: Final = 3
READINESS_PERIOD_SECONDS: Final = 5
#: How long a rollout may go without progress before the Deployment (and we) call it Failed.
PROGRESS_DEADLINE_SECONDS: Final = 1800
TERMINATION_GRACE_SECONDS: Final = 30
#: The pod condition (a readiness gate) the reconciler sets True once the KV cache is restored,
#: or once it has given up on it: the pod is Ready only when it is True.
KV_CACHE_RESTORED_CONDITION: Final = "inference.modelpool.dev/kv-cache-restored"
KV_CACHE_VOLUME: Final = "kv-cache"
#: Where the KV cache's folder is mounted in the server's container (its ``--slot-save-path``).
KV_CACHE_MOUNT_PATH: Final = "/var/lib/modelpool/kv-cache"
SLOT_SAVE_PATH_ARG: Final = "--slot-save-path"
#: llama-server serves its Prometheus ``/metrics`` only when started with this flag; the members'
#: PodMonitor scrapes it.
METRICS_ARG: Final = "--metrics"
REVISION_HISTORY_LIMIT: Final = 2


def selector_labels(name: str) -> dict[str, str]:
    return {ISVC_LABEL: name}


def child_labels(name: str) -> dict[str, str]:
    return {
        NAME_LABEL: SERVER_NAME,
        INSTANCE_LABEL: name,
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: MEMBER_COMPONENT,
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


def server_args(isvc: InferenceService, model_path: str | None = None) -> list[str]:
    """llama-server's arguments: the model (``model_path``, where its source is mounted: see
    :func:`~controlplane.controllers.inferenceservice.weights.model_pod_parts`), its served name,
    where to listen, ``--metrics`` (the members' PodMonitor scrapes ``/metrics``; not repeated
    when ``spec.args`` has it), then ``spec.args``."""
    model = isvc.spec.model
    if model is None or not model.name or not model.source:
        raise ValueError(f"InferenceService {isvc.name}: spec.model.name and .source are required")
    if model_path is None:
        model_path = model_pod_parts(isvc, WeightsPlacement()).model_path
    return [
        "--model",
        model_path,
        "--alias",
        model.name,
        "--host",
        "0.0.0.0",
        "--port",
        str(server_port(isvc)),
        *([] if METRICS_ARG in isvc.spec.args else [METRICS_ARG]),
        *isvc.spec.args,
        # Last, so that an argument of the user's cannot point the server away from the mount.
        *([SLOT_SAVE_PATH_ARG, KV_CACHE_MOUNT_PATH] if isvc.spec.kv_cache_enabled() else []),
    ]


def kv_cache_host_path(isvc: InferenceService) -> str:
    """The node folder of this InferenceService's saved slots: ``hostPath/NAMESPACE/NAME``."""
    kv_cache = isvc.spec.kv_cache
    if kv_cache is None:
        raise ValueError(f"InferenceService {isvc.name} has no spec.kvCache")
    root = kv_cache.root().rstrip("/")
    return f"{root}/{isvc.namespace}/{isvc.name}"


def endpoint(isvc: InferenceService) -> str:
    return f"http://{isvc.name}.{isvc.namespace}.svc:{server_port(isvc)}"


def _resources(isvc: InferenceService) -> dict[str, Any]:
    wanted = isvc.spec.resources
    return resource_requirements(wanted.limits, wanted.requests) if wanted is not None else {}


def health_probe(initial_delay: int, period: int, failures: int) -> dict[str, Any]:
    """llama-server's ``/health`` on the named port: a member's probes, and a slot server's."""
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


def desired_deployment(
    isvc: InferenceService,
    replicas: int | None = None,
    *,
    placement: WeightsPlacement | None = None,
    node: str | None = None,
) -> dict[str, Any]:
    """The Deployment this InferenceService wants, as a server-side apply body; ``replicas`` is
    what the grant allows (:func:`~controlplane.controllers.modelpool.grant.deployment_replicas`),
    ``spec.replicas`` when not given. ``placement`` is the operator's node cache and fetch image;
    ``node``, the node whose cache holds the downloaded weights, to which the pod is pinned."""
    weights = model_pod_parts(isvc, placement or WeightsPlacement())
    pod_fields = isvc.spec.pod
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": isvc.spec.image or DEFAULT_IMAGE,
        "args": server_args(isvc, weights.model_path),
        "ports": [{"name": PORT_NAME, "containerPort": server_port(isvc), "protocol": "TCP"}],
        "startupProbe": health_probe(0, STARTUP_PERIOD_SECONDS, STARTUP_FAILURE_THRESHOLD),
        "readinessProbe": health_probe(0, READINESS_PERIOD_SECONDS, 3),
        "livenessProbe": health_probe(0, LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURE_THRESHOLD),
        # The server image decides its user (llama.cpp's runs as root), so runAsNonRoot is left
        # to the image; everything that does not depend on it is locked down.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if resources := _resources(isvc):
        container["resources"] = resources
    volumes = list(weights.volumes)
    mounts = list(weights.server_mounts)
    if env := user_env(isvc):
        container["env"] = env
    if env_from := user_env_from(isvc):
        container["envFrom"] = env_from
    if pod_fields is not None:
        volumes += [volume.to_dict() for volume in pod_fields.volumes]
        mounts += [mount.to_dict() for mount in pod_fields.volume_mounts]
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        **placement_fields(isvc),
    }
    if weights.init_containers:
        pod_spec["initContainers"] = weights.init_containers
    if node is not None:
        pod_spec["affinity"] = pinned_affinity(pod_spec.get("affinity"), node)
    if pod_fields is not None and pod_fields.runtime_class_name:
        pod_spec["runtimeClassName"] = pod_fields.runtime_class_name
    if isvc.spec.kv_cache_enabled():
        mounts.append({"name": KV_CACHE_VOLUME, "mountPath": KV_CACHE_MOUNT_PATH})
        volumes.append(
            {
                "name": KV_CACHE_VOLUME,
                "hostPath": {"path": kv_cache_host_path(isvc), "type": "DirectoryOrCreate"},
            }
        )
        pod_spec["readinessGates"] = [{"conditionType": KV_CACHE_RESTORED_CONDITION}]
    if mounts:
        container["volumeMounts"] = mounts
    if volumes:
        pod_spec["volumes"] = volumes
    template_metadata: dict[str, Any] = {
        "labels": {**(pod_fields.labels if pod_fields else {}), **child_labels(isvc.name)}
    }
    if pod_fields is not None and pod_fields.annotations:
        template_metadata["annotations"] = dict(pod_fields.annotations)
    deployment = with_spec_hash(
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
                "template": {"metadata": template_metadata, "spec": pod_spec},
            },
        }
    )
    return with_template_hash(deployment)


def desired_service(
    isvc: InferenceService, selector: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The ClusterIP Service in front of the server, as a server-side apply body; ``selector``:
    the pods it selects when not the member's own (a pool's slot server)."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(isvc),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(selector) if selector else selector_labels(isvc.name),
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
