"""The node stand-in's pure builders: what it reads from a Deployment's pods, and what it writes.

*Why one module of this size:* every builder reads the same few fields of the operator's
Deployments (labels, template hash, the server's arguments); most of its lines are tables of what a
kubelet and the built-in controllers write.

No I/O here: a pod for a Deployment (:func:`new_pod`), the status a deployment controller writes
(:func:`deployment_status`), the EndpointSlices an endpoint controller writes
(:func:`endpoint_slices`), and the command lines of the processes that play a pod's server
container (:func:`server_args` for a simulator playing a member, :func:`llama_server_argv` for a
real llama-server, :func:`proxy_argv` for a router-proxy). What a kubelet writes of a pod (its
phase, conditions, container statuses) is :mod:`controlplane.standin.podstatus`'s, re-exported
here (:func:`pod_status`, :func:`pod_status_summary`, :func:`is_pod_ready`); what it does before a
server starts has modules of its own, each pure but for a few file operations: the pod's volumes
and the arguments pointed at them (:mod:`~controlplane.standin.volumes`), a container's
environment (:mod:`~controlplane.standin.containerenv`), which other containers can run
(:mod:`~controlplane.standin.entrypoints`), a container's record across restarts
(:mod:`~controlplane.standin.containers`), its end and termination message
(:mod:`~controlplane.standin.termination`), its log (:mod:`~controlplane.standin.logfiles`), and
the Node and whether a pod fits it (:mod:`~controlplane.standin.node`).
:mod:`controlplane.standin.controller` does the reading and writing; its tests live on these
functions.

Which Deployments are played (:func:`pod_role`): the operator's (labelled
``app.kubernetes.io/managed-by=modelpool-operator``) that are either a **member** (labelled
``inference.modelpool.dev/inferenceservice``: one simulator or real llama-server, at most one
pod, after its init containers) or a **router-proxy** (labelled
``inference.modelpool.dev/modelrouter``: ``spec.replicas`` pods, each a ``controlplane
router-proxy`` process) or a **slot server** (labelled ``inference.modelpool.dev/slot-server``
with its pool's name: llama-server in router mode over the models mounted into its
``--models-dir``, at most one pod: :mod:`controlplane.standin.slotserver`). The operator's pods
that no Deployment owns (a Job's) are played by
:mod:`controlplane.standin.jobs`. The labels are the operator's, repeated here: the stand-in
knows nothing of the controllers.
"""

from __future__ import annotations

import enum
import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from controlplane.runtime.endpoints import LOCALHOST_DOMAIN, LOOPBACK
from controlplane.runtime.objects import Object
from controlplane.standin.podstatus import (
    KUBELET_CONDITIONS,
    is_pod_ready,
    now,
    pod_status,
    pod_status_summary,
    readiness_gates,
)
from controlplane.standin.podstatus import (
    condition as _condition,
)
from controlplane.standin.slotserver import SLOT_SERVER_LABEL
from controlplane.standin.volumes import Mount, local_path

# The pod statuses a kubelet writes were here; they are podstatus's now, and still importable
# from here (the controller and its tests read them with the rest).
__all__ = [
    "KUBELET_CONDITIONS",
    "is_pod_ready",
    "now",
    "pod_status",
    "pod_status_summary",
    "readiness_gates",
]

NODE_NAME: Final = "modelpool-sim-node"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "modelpool-operator"
#: The label naming a member pod's InferenceService.
MEMBER_LABEL: Final = "inference.modelpool.dev/inferenceservice"
#: The label naming a router-proxy pod's ModelRouter.
ROUTER_LABEL: Final = "inference.modelpool.dev/modelrouter"
#: What the Deployment and Pod informers select; :func:`pod_role` sorts members from proxies.
MANAGED_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
#: A stand-in-only server argument: this member's model load time, overriding the node's.
LOAD_SECONDS_ARG: Final = "--sim-load-seconds"
#: A stand-in-only server argument: every slot restore of this member's simulator first hangs
#: this long (a restore that does not answer, for tests of its bound).
RESTORE_DELAY_ARG: Final = "--sim-slot-restore-seconds"
SLOT_SAVE_PATH_ARG: Final = "--slot-save-path"
#: llama-server's flag for its Prometheus ``/metrics``, passed on to a simulator.
METRICS_ARG: Final = "--metrics"
#: Arguments only the stand-in understands: a real llama-server must not be given them.
STANDIN_ONLY_ARGS: Final = (LOAD_SECONDS_ARG, RESTORE_DELAY_ARG)
POD_TEMPLATE_HASH_LABEL: Final = "pod-template-hash"
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
SLICE_MANAGED_BY_LABEL: Final = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGED_BY: Final = "sim-node.modelpool.dev"
#: One simulated GPU: a member Deployment gets at most this many pods.
MEMBER_MAX_REPLICAS: Final = 1


class PodRole(enum.Enum):
    """What a played Deployment's pods run."""

    #: A model server: a simulator (``controlplane sim``), at most one pod, Recreate.
    MEMBER = "member"
    #: A router-proxy replica: ``controlplane router-proxy`` as the pod's ServiceAccount.
    ROUTER_PROXY = "router-proxy"
    #: A pool's slot server: llama-server in router mode (real or simulated), at most one pod,
    #: Recreate, as a member.
    SLOT_SERVER = "slot-server"

    @property
    def one_gpu(self) -> bool:
        """A model server on the one simulated GPU: at most one pod, the old one gone first."""
        return self is not PodRole.ROUTER_PROXY


def pod_role(deployment: Mapping[str, Any]) -> PodRole | None:
    """The role of a Deployment's pods, from its template's labels; None: not played here."""
    template = deployment.get("spec", {}).get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
        return None
    if labels.get(MEMBER_LABEL):
        return PodRole.MEMBER
    if labels.get(ROUTER_LABEL):
        return PodRole.ROUTER_PROXY
    if labels.get(SLOT_SERVER_LABEL):
        return PodRole.SLOT_SERVER
    return None


def max_replicas(role: PodRole) -> int | None:
    """A member or slot server is capped at one pod (one simulated GPU); proxies are not."""
    return MEMBER_MAX_REPLICAS if role.one_gpu else None


def template_hash(deployment: Mapping[str, Any]) -> str:
    """A short stable hash of the pod template (the ``pod-template-hash`` label's value)."""
    template = deployment["spec"].get("template") or {}
    return hashlib.sha256(msgspec.json.encode(template, order="sorted")).hexdigest()[:10]


def desired_replicas(deployment: Mapping[str, Any]) -> int:
    replicas = deployment["spec"].get("replicas")
    return 1 if replicas is None else int(replicas)


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _flag(args: Sequence[str], *names: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``args`` (the last one wins)."""
    found = None
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                found = args[index + 1]
            elif arg.startswith(f"{name}="):
                found = arg.partition("=")[2]
    return found


@dataclass(frozen=True, slots=True)
class ServerArgs:
    """What a simulator takes from a container's llama-server arguments."""

    model_name: str
    slots: int
    ctx_size: int | None
    #: ``--sim-load-seconds``: this member's load time; None means the node's default.
    load_seconds: float | None = None
    #: ``--slot-save-path`` as the container sees it (a path inside the container).
    slot_save_path: str | None = None
    #: ``--sim-slot-restore-seconds``: each slot restore hangs this long first.
    restore_delay_seconds: float | None = None
    #: ``--metrics``: serve llama-server's ``/metrics`` (the operator gives every member this).
    metrics: bool = False


def server_args(container: Mapping[str, Any], fallback_name: str) -> ServerArgs:
    """``--alias`` (else the ``--model`` file's stem) names the model; ``--parallel`` gives the
    slots and ``--ctx-size`` is shared between them, as llama-server does; ``--sim-load-seconds``
    (a non-negative number) overrides the node's load time for this member; ``--metrics`` is
    passed on."""
    args = [str(a) for a in container.get("args") or ()]
    model = _flag(args, "--alias", "-a")
    if not model:
        source = _flag(args, "--model", "-m")
        model = Path(source).stem if source else fallback_name
    slots_text = _flag(args, "--parallel", "-np")
    slots = max(int(slots_text), 1) if slots_text and slots_text.isdigit() else 1
    ctx_text = _flag(args, "--ctx-size", "-c")
    ctx = int(ctx_text) // slots if ctx_text and ctx_text.isdigit() and int(ctx_text) else None
    return ServerArgs(
        model,
        slots,
        ctx or None,
        _non_negative(_flag(args, LOAD_SECONDS_ARG)),
        _flag(args, SLOT_SAVE_PATH_ARG) or None,
        _non_negative(_flag(args, RESTORE_DELAY_ARG)),
        METRICS_ARG in args,
    )


def host_folder(pod_spec: Mapping[str, Any], container: Mapping[str, Any], path: str,
                host_root: Path, scratch: Path) -> Path:  # fmt: skip
    """Where the container's ``path`` is on this machine, counting hostPath volumes only: under
    one mounted at a prefix of it (the deepest mount wins), ``host_root/HOSTPATH/REST`` (the
    node's disk, which outlives the pod); anywhere else, ``scratch/PATH``. The stand-in itself
    maps every kind of volume (:func:`controlplane.standin.volumes.container_mounts`)."""
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or ()}
    mounts = []
    for mount in container.get("volumeMounts") or ():
        mounted = "/" + str(mount.get("mountPath") or "").strip("/")
        host = (volumes.get(mount.get("name")) or {}).get("hostPath")
        local = host_root / str(host.get("path") or "").lstrip("/") if host else None
        mounts.append(Mount(mounted, local or scratch / mounted.lstrip("/")))
    mounts.sort(key=lambda m: len(m.mount_path), reverse=True)
    found = local_path(mounts, path, scratch)
    assert found is not None  # given a scratch folder, every path has a place
    return found


def with_slot_save_path(args: Sequence[str], folder: Path) -> list[str]:
    """``args`` with every ``--slot-save-path`` pointing at ``folder`` (this machine's folder for
    the container's path, :func:`host_folder`): what a real llama-server playing the pod must be
    given, as the simulator is."""
    out: list[str] = []
    replace_next = False
    for arg in args:
        if replace_next:
            out.append(str(folder))
            replace_next = False
        elif arg == SLOT_SAVE_PATH_ARG:
            out.append(arg)
            replace_next = True
        elif arg.startswith(f"{SLOT_SAVE_PATH_ARG}="):
            out.append(f"{SLOT_SAVE_PATH_ARG}={folder}")
        else:
            out.append(arg)
    return out


#: The flags whose values the stand-in chooses for a real llama-server (it listens on loopback).
_LISTEN_FLAGS: Final = ("--host", "--port")
#: llama-server's spellings of its generation thread count.
_THREADS_FLAGS: Final = ("--threads", "-t")
#: The threads a real server gets unless its arguments say otherwise: at llama.cpp's default
#: (every core) a shared 2-core machine spins in OpenMP and generates 20 to 100 times slower.
REAL_SERVER_THREADS: Final = 1


def model_source(container: Mapping[str, Any]) -> str | None:
    """The ``--model`` (``-m``) argument of a member's container: the GGUF file it serves."""
    return _flag([str(a) for a in container.get("args") or ()], "--model", "-m")


def llama_server_argv(binary: Path, container: Mapping[str, Any], *, port: int) -> list[str]:
    """The real ``llama-server`` with a member container's arguments (the operator's ``--model``,
    ``--alias``, then ``spec.args``), except that it listens on ``LOOPBACK:port`` (``--host`` and
    ``--port`` rewritten), the stand-in's own flags (:data:`STANDIN_ONLY_ARGS`) are dropped (the
    real server refuses unknown flags), and ``--threads`` is :data:`REAL_SERVER_THREADS` unless
    given. The caller points ``--slot-save-path`` at the pod's folder on this machine."""
    args = [str(a) for a in container.get("args") or ()]
    kept: list[str] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        name = arg.partition("=")[0]
        if name in (*_LISTEN_FLAGS, *STANDIN_ONLY_ARGS):
            skip_next = "=" not in arg
            continue
        kept.append(arg)
    if _flag(kept, *_THREADS_FLAGS) is None:
        kept += ["--threads", str(REAL_SERVER_THREADS)]
    return [str(binary), *kept, "--host", LOOPBACK, "--port", str(port)]


def _non_negative(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def new_pod(deployment: Mapping[str, Any], hash_: str, suffix: str) -> Object:
    """The pod a ReplicaSet would create, already bound to the stand-in's node."""
    meta = deployment["metadata"]
    template = deployment["spec"].get("template") or {}
    template_meta = template.get("metadata") or {}
    labels = {**(template_meta.get("labels") or {}), POD_TEMPLATE_HASH_LABEL: hash_}
    pod_meta: Object = {
        "name": f"{meta['name']}-{hash_}-{suffix}",
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    spec = {**(template.get("spec") or {}), "nodeName": NODE_NAME}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


_STATUS_COUNTS: Final = (
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
)


def deployment_status(
    deployment: Mapping[str, Any],
    live_pods: Sequence[Mapping[str, Any]],
    hash_: str,
    cap: int | None = MEMBER_MAX_REPLICAS,
) -> Object:
    """The status a deployment controller would write for ``live_pods`` (not terminating); the
    desired count is ``spec.replicas`` capped at ``cap`` (None: not capped)."""
    desired = desired_replicas(deployment)
    if cap is not None:
        desired = min(desired, cap)
    current: Object = dict(deployment.get("status") or {})
    existing = current.get("conditions") or []
    ready = sum(1 for pod in live_pods if is_pod_ready(pod))
    updated = sum(
        1
        for pod in live_pods
        if (pod["metadata"].get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL) == hash_
    )
    available = ready
    complete = updated == desired and available == desired and len(live_pods) == desired
    stamp = now()

    def condition(type_: str, status: bool, reason: str, message: str) -> Object:
        made = _condition(existing, type_, status, reason=reason, message=message)
        old = next((c for c in existing if c.get("type") == type_), None)
        unchanged = old is not None and all(
            old.get(k) == made.get(k) for k in ("status", "reason", "message")
        )
        made["lastUpdateTime"] = (old or {}).get("lastUpdateTime") if unchanged else stamp
        return made

    name = deployment["metadata"]["name"]
    status: Object = {
        "observedGeneration": deployment["metadata"].get("generation", 0),
        "replicas": len(live_pods),
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": max(desired - available, 0),
        "conditions": [
            condition(
                "Available",
                available >= desired,
                (
                    "MinimumReplicasAvailable"
                    if available >= desired
                    else "MinimumReplicasUnavailable"
                ),
                "Deployment has minimum availability."
                if available >= desired
                else "Deployment does not have minimum availability.",
            ),
            condition(
                "Progressing",
                True,
                "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                f'Pods of Deployment "{name}" have successfully progressed.'
                if complete
                else f'Pods of Deployment "{name}" are progressing.',
            ),
        ],
    }
    return status


def deployment_status_summary(status: Mapping[str, Any]) -> tuple[Any, ...]:
    counts = tuple(int(status.get(key) or 0) for key in _STATUS_COUNTS)
    conditions = tuple(
        sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or ()
        )
    )
    return (counts, conditions)


def selects(service: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True, slots=True)
class Backend:
    """A pod with a running simulator, as the endpoint controller sees it."""

    pod: Mapping[str, Any]
    address: str
    port: int
    ready: bool


def loopback_name(pod: Mapping[str, Any]) -> str:
    """``POD.NAMESPACE.localhost``: the pod's slice address, loopback by definition (RFC 6761)."""
    meta = pod["metadata"]
    return f"{meta['name']}.{meta['namespace']}{LOCALHOST_DOMAIN}"


def endpoint_slice(
    service: Mapping[str, Any],
    container: Mapping[str, Any],
    backends: Sequence[Backend],
    name: str | None = None,
) -> Object:
    """An EndpointSlice for ``service`` (named ``SERVICE-sim`` unless ``name`` is given) holding
    ``backends``, which share one port: the process's, not the Service's."""
    meta = service["metadata"]
    names = {p.get("name") for p in container.get("ports") or ()}
    numbers = {p.get("containerPort") for p in container.get("ports") or ()}
    ports: list[Object] = []
    if backends:
        for port in (service.get("spec") or {}).get("ports") or ():
            target = port.get("targetPort", port.get("port"))
            if target in names or target in numbers:
                entry: Object = {"port": backends[0].port, "protocol": port.get("protocol", "TCP")}
                if port.get("name"):
                    entry["name"] = port["name"]
                ports.append(entry)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name or f"{meta['name']}-sim",
            "namespace": meta["namespace"],
            "labels": {SERVICE_NAME_LABEL: meta["name"], SLICE_MANAGED_BY_LABEL: SLICE_MANAGED_BY},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "addressType": "FQDN",
        "endpoints": [
            {
                "addresses": [b.address],
                "conditions": {"ready": b.ready, "serving": b.ready, "terminating": False},
                "nodeName": NODE_NAME,
                "targetRef": {
                    "kind": "Pod",
                    "namespace": b.pod["metadata"]["namespace"],
                    "name": b.pod["metadata"]["name"],
                    "uid": b.pod["metadata"]["uid"],
                },
            }
            for b in backends
        ],
        "ports": ports,
    }


def endpoint_slices(
    service: Mapping[str, Any], container: Mapping[str, Any], backends: Sequence[Backend]
) -> list[Object]:
    """The EndpointSlices for ``service``. A slice's ports apply to all its endpoints, and every
    local process listens on a port of its own, so there is one slice per port: ``SERVICE-sim``
    when the backends share one (a member's single pod, or none at all), else
    ``SERVICE-sim-PORT`` for each (router-proxy replicas)."""
    ports = sorted({b.port for b in backends})
    if len(ports) <= 1:
        return [endpoint_slice(service, container, backends)]
    name = service["metadata"]["name"]
    return [
        endpoint_slice(
            service, container, [b for b in backends if b.port == port], f"{name}-sim-{port}"
        )
        for port in ports
    ]


# -- router-proxy pods -----------------------------------------------------------------------------


def service_account_of(pod: Mapping[str, Any]) -> str:
    """The pod's ServiceAccount (``default`` when the template names none, as in Kubernetes)."""
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def proxy_argv(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    *,
    kubeconfig: Path,
    port: int,
    cache_dir: Path,
) -> list[str]:
    """``controlplane router-proxy`` with the container's arguments (the image's entrypoint is
    ``controlplane``), then what the pod's environment gives it in a cluster: its identity (the
    pod name, ``$POD_NAME``), its ServiceAccount's credentials (``kubeconfig``), a loopback
    ``port`` and a cache folder for the preflight's verdicts."""
    args = [str(a) for a in container.get("args") or ()]
    return [
        sys.executable, "-m", "controlplane.cli", *args,
        "--kubeconfig", str(kubeconfig),
        "--identity", pod["metadata"]["name"],
        "--bind-address", f"{LOOPBACK}:{port}",
        "--preflight-cache-dir", str(cache_dir),
    ]  # fmt: skip


def pod_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The downward-API variables a router-proxy reads (``POD_NAME``, ``POD_NAMESPACE``)."""
    meta = pod["metadata"]
    return {"POD_NAME": meta["name"], "POD_NAMESPACE": meta["namespace"]}


def token_kubeconfig(server: str, ca_file: str | None, token: str) -> Object:
    """A kubeconfig for ``server`` that authenticates with a ServiceAccount's ``token``;
    without a CA file, the server's certificate is not verified."""
    cluster: Object = {"server": server}
    if ca_file:
        cluster["certificate-authority"] = ca_file
    else:
        cluster["insecure-skip-tls-verify"] = True
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "service-account", "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "service-account"}}],
        "current-context": "local",
    }
