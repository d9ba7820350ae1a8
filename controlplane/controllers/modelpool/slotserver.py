"""A pool's slot server: one long-lived llama.cpp server in router mode (``spec.slotServer``).

Pure functions of the pool and its members (no I/O), unit-tested as such
(``tests/unit/test_slot_server.py``); the reconciler applies what they return.

*Why a server of the pool's own:* a swap between pods pays the old pod's teardown and the new pod's
creation and start (2.2 s and 1.1 s in kind, bench/README.md); llama.cpp's router mode loads and
unloads models as child processes of one server instead. The pool keeps every decision: the server
runs with ``--no-models-autoload`` (a request never loads a model) and ``--models-max 1`` (the
server itself refuses a second model, beside the pool's own rule), and the pool controller loads
and unloads through its API, the unload gated on ``/slots?model=`` as a scale to 0 is.

What is built here:

* :func:`desired_slot_deployment`: one replica, ``Recreate``; the server's arguments are
  ``--models-dir`` :data:`~controlplane.api.v1alpha1.modelpool.SLOT_SERVER_MODELS_DIR`, the two
  flags above, where to listen, then ``spec.slotServer.args``. Each member's weights are mounted
  read-only as ``<models dir>/<spec.model.name>.gguf`` (llama.cpp names a model of its models
  folder by its file name), so a client's ``model`` reaches the right child unchanged.
* :func:`desired_slot_service`: the pool controller's way to the server (its EndpointSlice says
  when it is ready); members' own Services select the same pod (:func:`member_service_selector`).
* :func:`unservable`: why a member cannot be served by a slot server (a path inside a member's own
  image cannot be mounted into another pod; a model name that is not a file name).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.meta import API_VERSION
from controlplane.api.v1alpha1.modelpool import (
    DEFAULT_SLOT_SERVER_IMAGE,
    DEFAULT_SLOT_SERVER_PORT,
    SLOT_SERVER_MODEL_NAME_PATTERN,
    SLOT_SERVER_MODELS_DIR,
)
from controlplane.api.v1alpha1.modelsource import SourceError, SourceKind
from controlplane.controllers.children import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    covers,
    idle_gated_budget,
    resource_requirements,
    with_spec_hash,
)
from controlplane.controllers.inferenceservice.desired import health_probe
from controlplane.controllers.inferenceservice.weights import (
    WeightsPlacement,
    cache_host_path,
    pinned_affinity,
)
from controlplane.runtime.endpoints import MEMBER_PORT_NAME

#: The label naming the pool on its slot server's Deployment, Service and pod; the selector.
SLOT_SERVER_LABEL: Final = "inference.modelpool.dev/slot-server"
SLOT_SERVER_COMPONENT: Final = "slot-server"
SLOT_SERVER_NAME: Final = "llama-server"
CONTAINER_NAME: Final = "server"
#: The server is long-lived: its readiness matters once, at its start; liveness as a member's.
READINESS_PERIOD_SECONDS: Final = 2
LIVENESS_INITIAL_DELAY_SECONDS: Final = 60
LIVENESS_PERIOD_SECONDS: Final = 20
TERMINATION_GRACE_SECONDS: Final = 30
#: Kubernetes object names are DNS labels for Services: at most 63 characters.
_MAX_NAME: Final = 63
_SUFFIX: Final = "-slot"
_MODEL_NAME = re.compile(SLOT_SERVER_MODEL_NAME_PATTERN)


def slot_server_name(pool: str) -> str:
    """The slot server's Deployment and Service name: ``<pool>-slot``, shortened with a hash of
    the pool's name when that would exceed a DNS label."""
    name = pool + _SUFFIX
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(pool.encode()).hexdigest()[:8]
    return f"{pool[: _MAX_NAME - len(_SUFFIX) - 9]}-{digest}{_SUFFIX}"


def slot_server_labels(pool: str) -> dict[str, str]:
    return {
        NAME_LABEL: SLOT_SERVER_NAME,
        INSTANCE_LABEL: slot_server_name(pool),
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: SLOT_SERVER_COMPONENT,
        SLOT_SERVER_LABEL: pool,
    }


def member_service_selector(pool: str) -> dict[str, str]:
    """What a member's Service selects while a pool with a slot server lists it: the server."""
    return {SLOT_SERVER_LABEL: pool}


def model_file(model_name: str) -> str:
    """Where a member's weights are in the slot server's container."""
    return f"{SLOT_SERVER_MODELS_DIR}/{model_name}.gguf"


def unservable(isvc: InferenceService) -> str | None:
    """Why the slot server cannot serve ``isvc``, in words for the pool's condition; None: it
    can."""
    model = isvc.spec.model
    if model is None or not model.name:
        return f"{isvc.name} names no model"
    if not _MODEL_NAME.match(model.name) or model.name.endswith(".gguf"):
        return (
            f"{isvc.name}'s model name {model.name!r} cannot name a file of the slot server's "
            f"models folder (letters, digits, '.', '_' and '-', not ending in .gguf)"
        )
    try:
        source = model.parsed()
    except SourceError as err:
        return f"{isvc.name}'s source is invalid: {err}"
    if source.kind is SourceKind.IMAGE:
        return (
            f"{isvc.name}'s weights are a path inside its own image, which a slot server cannot "
            "mount: use file://, pvc://, https:// or hf://"
        )
    return None


def mounted_members(
    names: Sequence[str],
    members: Mapping[str, InferenceService],
    ready: Collection[str],
    nodes: Mapping[str, str],
) -> list[InferenceService]:
    """The members whose weights the server mounts, in the pool's order: those it can serve
    (:func:`unservable`) whose weights are ready (``ready``), and, of downloaded ones (``nodes``:
    member -> the node whose cache holds the file), only those on the first one's node: one pod
    reads every file. A member left out waits ("not in the slot server's models yet")."""
    servable = [
        members[n] for n in names if n in members and n in ready and unservable(members[n]) is None
    ]
    pinned = next((nodes[m.name] for m in servable if m.name in nodes), None)
    return [m for m in servable if nodes.get(m.name, pinned) == pinned]


def _weights_mount(
    index: int, isvc: InferenceService, placement: WeightsPlacement
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume and mount that put ``isvc``'s weights at :func:`model_file` (read-only)."""
    model = isvc.spec.model
    if model is None or not model.name:
        raise ValueError(unservable(isvc))
    source = model.parsed()
    volume_name = f"model-{index}"
    mount: dict[str, Any] = {
        "name": volume_name,
        "mountPath": model_file(model.name),
        "readOnly": True,
    }
    volume: dict[str, Any] = {"name": volume_name}
    if source.kind is SourceKind.FILE:
        volume["hostPath"] = {"path": source.path, "type": "File"}
    elif source.kind is SourceKind.PVC:
        volume["persistentVolumeClaim"] = {"claimName": source.claim, "readOnly": True}
        mount["subPath"] = source.path
    else:  # fetched: the verified file in the node cache's folder, which the fetch Job made
        volume["hostPath"] = {"path": cache_host_path(source, placement), "type": "Directory"}
        mount["subPath"] = source.file_in_cache
    return volume, mount


def _owner_reference(pool: ModelPool) -> dict[str, Any]:
    if not pool.metadata.uid:
        raise ValueError(f"ModelPool {pool.metadata.name} has no uid (it was never stored)")
    return {
        "apiVersion": API_VERSION,
        "kind": ModelPool.KIND,
        "name": pool.metadata.name,
        "uid": pool.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(pool: ModelPool) -> dict[str, Any]:
    name = str(pool.metadata.name)
    return {
        "name": slot_server_name(name),
        "namespace": pool.metadata.namespace,
        "labels": slot_server_labels(name),
        "ownerReferences": [_owner_reference(pool)],
    }


def slot_server_port(pool: ModelPool) -> int:
    spec = pool.spec.slot_server
    return (spec.port if spec is not None else None) or DEFAULT_SLOT_SERVER_PORT


def server_args(pool: ModelPool) -> list[str]:
    """llama-server in router mode: the pool's decisions only (no autoload, one model at most)."""
    spec = pool.spec.slot_server
    return [
        "--models-dir",
        SLOT_SERVER_MODELS_DIR,
        "--models-max",
        "1",
        "--no-models-autoload",
        "--host",
        "0.0.0.0",
        "--port",
        str(slot_server_port(pool)),
        *(spec.args if spec is not None else ()),
    ]


def desired_slot_deployment(
    pool: ModelPool,
    members: Sequence[InferenceService],
    placement: WeightsPlacement | None = None,
    nodes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The slot server's Deployment, as a server-side apply body. ``members``: the servable
    members whose weights are ready, in the pool's order; ``nodes``: of fetched ones, the node
    whose cache holds the file (the pod is pinned to the first one named)."""
    placement = placement or WeightsPlacement()
    spec = pool.spec.slot_server
    volumes, mounts = [], []
    for index, isvc in enumerate(members):
        volume, mount = _weights_mount(index, isvc, placement)
        volumes.append(volume)
        mounts.append(mount)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": (spec.image if spec is not None else None) or DEFAULT_SLOT_SERVER_IMAGE,
        "args": server_args(pool),
        "ports": [
            {
                "name": MEMBER_PORT_NAME,
                "containerPort": slot_server_port(pool),
                "protocol": "TCP",
            }
        ],
        "readinessProbe": health_probe(0, READINESS_PERIOD_SECONDS, 3),
        "livenessProbe": health_probe(LIVENESS_INITIAL_DELAY_SECONDS, LIVENESS_PERIOD_SECONDS, 3),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    wanted = spec.resources if spec is not None else None
    if wanted is not None and (resources := resource_requirements(wanted.limits, wanted.requests)):
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    if volumes:
        pod_spec["volumes"] = volumes
    if pool.spec.node_selector:
        pod_spec["nodeSelector"] = dict(pool.spec.node_selector)
    pinned = next((nodes[m.name] for m in members if nodes and m.name in nodes), None)
    if pinned is not None:
        pod_spec["affinity"] = pinned_affinity(None, pinned)
    name = str(pool.metadata.name)
    return with_spec_hash(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(pool),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {SLOT_SERVER_LABEL: name}},
                # One GPU: the old server must be gone before the new one starts.
                "strategy": {"type": "Recreate"},
                "revisionHistoryLimit": 2,
                "template": {"metadata": {"labels": slot_server_labels(name)}, "spec": pod_spec},
            },
        }
    )


def desired_slot_service(pool: ModelPool) -> dict[str, Any]:
    """The ClusterIP Service in front of the slot server, as a server-side apply body."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(pool),
            "spec": {
                "type": "ClusterIP",
                "selector": member_service_selector(str(pool.metadata.name)),
                "ports": [
                    {
                        "name": MEMBER_PORT_NAME,
                        "port": slot_server_port(pool),
                        "targetPort": MEMBER_PORT_NAME,
                        "protocol": "TCP",
                    }
                ],
            },
        }
    )


def desired_slot_disruption_budget(pool: ModelPool) -> dict[str, Any]:
    """The slot server's PodDisruptionBudget: an eviction of its Ready pod is refused, as a
    member's is; a node drain moves the server through the pool's fenced drain instead
    (:mod:`.slotruntime`)."""
    return idle_gated_budget(_metadata(pool), member_service_selector(str(pool.metadata.name)))


def restarts_server(cached: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Applying ``wanted`` over ``cached`` would replace the server's pod (its template differs):
    every loaded model would go with it, so the pool applies it only once nothing is loaded."""
    if cached is None:
        return False
    return not covers(
        (cached.get("spec") or {}).get("template"), (wanted.get("spec") or {}).get("template")
    )
