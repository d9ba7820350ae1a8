"""What the cache's collection runs: the paths the cluster names, the nodes, and the Job (pure).

**Named paths.** A file of the node cache is named while the ``spec.model.source`` of some
InferenceService, in any namespace, is its source, *or* some member pod's ``fetch-model`` init
container names it: a pod of an older spec (a rollout waiting for idle, a pod still terminating)
reads its file until it is gone. Paths are relative to the cache, as the fetcher lays them out
(``CACHE/<cache key>/<file in cache>``).

**Nodes.** Every node whose ``Ready`` condition is True: the cache is a hostPath, which the API
does not show, so any node a fetch pod could have landed on may hold files (a node that is not
Ready would leave the Job's pod pending; it is collected once back).

**The Job** runs the collector on the fetch image (the project's image, ``--fetch-image``),
pinned to its node by the fetch Job's own affinity (:func:`~controlplane.controllers.
inferenceservice.weights.pinned_affinity`), tolerating every taint (a GPU node's taints are the
rule, and the Job takes no GPU), with the node cache mounted read-write as the fetcher has it
(root, every capability dropped, read-only root filesystem, no service account token). It runs
in ``--model-cache-collect-namespace`` (default :data:`DEFAULT_NAMESPACE`, which the manifests and
the chart create), which must admit privileged pods (hostPath). A finished Job goes after
:data:`JOB_TTL_SECONDS` (``ttlSecondsAfterFinished``, time to read its log); one that cannot
run (its node went away) fails after :data:`JOB_DEADLINE_SECONDS`, and goes the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from controlplane.api.v1alpha1.modelsource import SourceError, parse_source
from controlplane.controllers.children import MANAGED_BY, MANAGED_BY_LABEL
from controlplane.controllers.inferenceservice.weights import (
    FETCH_CONTAINER,
    WeightsPlacement,
    node_cache_security_context,
    pinned_affinity,
)
from controlplane.modelcache.command import DEFAULT_RETENTION, SUBCOMMAND

#: Every how many seconds each node's cache is collected, by default (0: never).
DEFAULT_INTERVAL: Final = 3600.0
DEFAULT_RETENTION_SECONDS: Final = DEFAULT_RETENTION
#: The cache's size cap per node, by default: none.
DEFAULT_MAX_BYTES: Final = 0
#: Where the collection Jobs run by default: a namespace of their own that admits privileged pods
#: (a hostPath, as root), created by ``manifests/default`` and the chart; the operator's own
#: namespace enforces the restricted Pod Security Standard and would refuse them.
DEFAULT_NAMESPACE: Final = "modelpool-node-cache"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
COMPONENT: Final = "model-cache-collector"
#: The node a collection Job runs on, as a label (a hash: a node's name may be longer than a
#: label value may be) and as an annotation (its name).
NODE_LABEL: Final = "inference.modelpool.dev/model-cache-node"
NODE_ANNOTATION: Final = "inference.modelpool.dev/node"
CONTAINER: Final = "collect-model-cache"
CACHE_VOLUME: Final = "model-cache"
CACHE_MOUNT_DIR: Final = "/var/lib/modelpool/cache"
#: How long a finished collection Job (and its pod's log) stays.
JOB_TTL_SECONDS: Final = 3600
#: How long a collection Job may run, pending included, before it fails.
JOB_DEADLINE_SECONDS: Final = 600
JOB_BACKOFF_LIMIT: Final = 2


@dataclass(frozen=True, slots=True)
class CollectionSettings:
    """The operator's ``--model-cache-*`` flags of the collection."""

    #: Where the Jobs run (``--model-cache-collect-namespace``).
    namespace: str
    interval: float = DEFAULT_INTERVAL
    retention: float = DEFAULT_RETENTION_SECONDS
    max_bytes: int = DEFAULT_MAX_BYTES


def cache_path_of(source: str, sha256: str | None) -> str | None:
    """The cache path of a fetched source, None for one read where it is (or not valid)."""
    try:
        parsed = parse_source(source, sha256)
    except SourceError:
        return None
    return f"{parsed.cache_key}/{parsed.file_in_cache}" if parsed.fetched else None


def _flag(args: Sequence[Any], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return str(args[i + 1])
        if isinstance(arg, str) and arg.startswith(f"{name}="):
            return arg.partition("=")[2]
    return None


def pod_cache_path(pod: Mapping[str, Any]) -> str | None:
    """The cache path a member pod's ``fetch-model`` init container names, if it has one."""
    for container in (pod.get("spec") or {}).get("initContainers") or ():
        if container.get("name") == FETCH_CONTAINER:
            args = container.get("args") or ()
            source = _flag(args, "--source")
            return cache_path_of(source, _flag(args, "--sha256")) if source else None
    return None


def named_paths(
    inference_services: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> frozenset[str]:
    """Every cache path named in the cluster (module docstring)."""
    named: set[str] = set()
    for isvc in inference_services:
        model = (isvc.get("spec") or {}).get("model") or {}
        if source := model.get("source"):
            named.add(cache_path_of(str(source), model.get("sha256")) or "")
    for pod in pods:
        named.add(pod_cache_path(pod) or "")
    named.discard("")
    return frozenset(named)


def ready_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names of the nodes whose ``Ready`` condition is True, sorted."""
    return sorted(
        str(node["metadata"]["name"])
        for node in nodes
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or ()
        )
    )


def node_key(node: str) -> str:
    return hashlib.sha256(node.encode()).hexdigest()[:16]


def job_node(job: Mapping[str, Any]) -> str | None:
    return ((job.get("metadata") or {}).get("annotations") or {}).get(NODE_ANNOTATION)


def job_finished(job: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


def collector_args(named: Iterable[str], settings: CollectionSettings) -> list[str]:
    keep = [word for path in sorted(named) for word in ("--keep", path)]
    return [SUBCOMMAND, "--cache-dir", CACHE_MOUNT_DIR, "--retention", f"{settings.retention:g}",
            "--max-bytes", str(settings.max_bytes), *keep]  # fmt: skip


def collection_job(
    node: str,
    named: Iterable[str],
    settings: CollectionSettings,
    placement: WeightsPlacement,
    started: float,
) -> dict[str, Any]:
    """The Job that collects ``node``'s cache (module docstring); its name carries the node's
    hash and the millisecond it was started, so each run is a Job of its own."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: COMPONENT, NODE_LABEL: node_key(node)}
    container = {
        "name": CONTAINER,
        "image": placement.fetch_image,
        "args": collector_args(named, settings),
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT_DIR}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": node_cache_security_context(),
    }
    volume = {
        "name": CACHE_VOLUME,
        "hostPath": {"path": placement.cache_path, "type": "DirectoryOrCreate"},
    }
    pod_spec = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [volume],
        "affinity": pinned_affinity(None, node),
        "tolerations": [{"operator": "Exists"}],
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"model-cache-{node_key(node)}-{int(started * 1000)}",
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": {NODE_ANNOTATION: node},
        },
        "spec": {
            "backoffLimit": JOB_BACKOFF_LIMIT,
            "activeDeadlineSeconds": JOB_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
