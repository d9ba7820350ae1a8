"""The stand-in's Node object, and whether a pod fits it (the scheduler's part).

The stand-in registers :data:`~controlplane.standin.builders.NODE_NAME` as a kubelet registers
its node: labels ``kubernetes.io/hostname``, ``kubernetes.io/os`` and ``kubernetes.io/arch``;
addresses ``InternalIP`` 127.0.0.1 and ``Hostname``; ``daemonEndpoints.kubeletEndpoint.Port``
the port of its kubelet API (:mod:`controlplane.standin.kubeletapi`), which is what lets
``kubectl logs`` and ``GET pods/NAME/log`` reach it through the API server; a ``Ready``
condition; modest capacity. Only one stand-in at a time owns the node: the last one started
points the endpoint at itself. The Node is left in place when the stand-in stops (the next one
takes it over; nothing here watches heartbeats).

:func:`node_fits` is what the scheduler checks of a pod the stand-in binds (a Job's): its
``nodeSelector`` and required node affinity against the node's labels. The node has no taints,
so tolerations never matter. The builders are pure; :func:`register_node` writes.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Mapping
from typing import Any, Final

import anyio

from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import LOOPBACK
from controlplane.runtime.errors import KubeError, NotFound
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import Resource
from controlplane.standin.builders import NODE_NAME
from controlplane.standin.podstatus import now

log = logging.getLogger(__name__)

NODES: Final = Resource("", "v1", "nodes", "Node", namespaced=False)
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
NOT_READY_TAINT: Final = "node.kubernetes.io/not-ready"
_ARCH: Final = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
NODE_LABELS: Final = {
    HOSTNAME_LABEL: NODE_NAME,
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": _ARCH.get(platform.machine(), platform.machine()),
}
#: What the node offers: modest, fixed values (nothing here accounts for requests).
CAPACITY: Final = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
UNSCHEDULABLE: Final = (
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)


def node_body(kubelet_port: int) -> Object:
    """The Node as its kubelet registers it, status included."""
    stamp = now()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": dict(NODE_LABELS)},
        "spec": {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": LOOPBACK},
                {"type": "Hostname", "address": NODE_NAME},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "capacity": dict(CAPACITY),
            "allocatable": dict(CAPACITY),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "the modelpool node stand-in is posting ready status",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "nodeInfo": {
                "architecture": NODE_LABELS["kubernetes.io/arch"],
                "operatingSystem": "linux",
                "kubeletVersion": "modelpool-sim-node",
                "containerRuntimeVersion": "sim://",
                "kernelVersion": platform.release(),
                "osImage": "the modelpool node stand-in",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
                "kubeProxyVersion": "",
            },
        },
    }


async def register_node(client: KubeClient, kubelet_port: int) -> None:
    """Create the Node, or take it over (labels and status) if it exists."""
    body = node_body(kubelet_port)
    try:
        current = await client.get(NODES, NODE_NAME)
    except NotFound:
        current = await client.create(NODES, body)
    meta = current["metadata"]
    labels = {**(meta.get("labels") or {}), **NODE_LABELS}
    # The API server taints a new node not-ready until the node lifecycle controller (not run
    # here) sees it Ready: the node is Ready from the start, so the taint goes.
    spec = dict(current.get("spec") or {})
    spec["taints"] = [t for t in spec.get("taints") or () if t.get("key") != NOT_READY_TAINT]
    current = await client.update(
        NODES, {**current, "metadata": {**meta, "labels": labels}, "spec": spec}
    )
    await client.update_status(NODES, {**current, "status": body["status"]})


async def keep_registering(
    client: KubeClient, kubelet_port: int, retry_seconds: float = 1.0
) -> None:
    """:func:`register_node` until it succeeds: an API error at start (the server still coming
    up, a race with another stand-in's update) must not take the node down."""
    while True:
        try:
            await register_node(client, kubelet_port)
        except KubeError as err:
            log.warning("could not register node %s (retrying): %s", NODE_NAME, err)
            await anyio.sleep(retry_seconds)
        else:
            return


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = str(expression.get("key")), str(expression.get("operator"))
    values = [str(v) for v in expression.get("values") or ()]
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    fields = {"metadata.name": NODE_NAME}
    expressions = term.get("matchExpressions") or ()
    field_expressions = term.get("matchFields") or ()
    if not expressions and not field_expressions:
        return False  # an empty term matches nothing
    return all(_matches(e, labels) for e in expressions) and all(
        _matches(e, fields) for e in field_expressions
    )


def node_fits(pod: Mapping[str, Any], labels: Mapping[str, str] = NODE_LABELS) -> bool:
    """Whether the pod's ``nodeSelector`` and required node affinity accept the node."""
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = affinity.get("nodeSelectorTerms") or ()
    return not terms or any(_term_matches(term, labels) for term in terms)
