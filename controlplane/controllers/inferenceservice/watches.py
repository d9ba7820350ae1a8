"""Which InferenceService a watched object's change concerns: the controller's event mapping.

*Why a module of its own:* the controller watches seven kinds besides its own (pods, Job pods,
EndpointSlices, pools, nodes, and the children it owns); each map is a small pure function of the
object (and, for a node, of the caches it is looked up in), testable without a manager, and none
of them is the reconcile's business. Pods are watched (by the
``inference.modelpool.dev/inferenceservice`` label, which the Deployment's template carries) to
know when the last one is gone and when one needs its KV cache restored, pools to know whether a
member may be raised and whether its pool is swapping to it, and EndpointSlices to know where a
pod's server answers; nothing is polled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.inferenceservice.weights import MODEL_OF_LABEL
from controlplane.controllers.modelpool.grant import listed_members
from controlplane.runtime.cache import Store
from controlplane.runtime.controller import Request
from controlplane.runtime.endpoints import SERVICE_NAME_LABEL


def pool_to_members(pool: Mapping[str, Any]) -> Iterable[Request]:
    """A pool to every InferenceService it lists: joining or leaving a pool, or the pool swapping
    to a member, changes whether a member may be raised and what its status says."""
    namespace = pool["metadata"].get("namespace") or ""
    return tuple(Request(namespace, name) for name in sorted(set(listed_members(pool))))


def pod_to_owner(pod: Mapping[str, Any]) -> Iterable[Request]:
    meta = pod["metadata"]
    name = (meta.get("labels") or {}).get(ISVC_LABEL)
    return (Request(meta.get("namespace") or "", name),) if name else ()


def slice_to_owner(slice_: Mapping[str, Any]) -> Iterable[Request]:
    """A member's Service has the member's name: its slices say where its pods answer."""
    meta = slice_["metadata"]
    name = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return (Request(meta.get("namespace") or "", name),) if name else ()


def job_pod_to_owner(pod: Mapping[str, Any]) -> Iterable[Request]:
    meta = pod["metadata"]
    name = (meta.get("labels") or {}).get(MODEL_OF_LABEL)
    return (Request(meta.get("namespace") or "", name),) if name else ()


def on_node(inference_services: Store, pods: Store, node: Mapping[str, Any]) -> Iterable[Request]:
    """The InferenceServices whose weights are cached on ``node`` (it left, or came back) or
    whose pods run there (it was cordoned for a drain, or uncordoned)."""
    name = node["metadata"]["name"]
    pinned = (
        Request(obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        for obj in inference_services.objects()
        if ((obj.get("status") or {}).get("model") or {}).get("node") == name
    )
    running = (
        request
        for pod in pods.objects()
        if (pod.get("spec") or {}).get("nodeName") == name
        for request in pod_to_owner(pod)
    )
    return tuple(sorted({*pinned, *running}, key=str))
