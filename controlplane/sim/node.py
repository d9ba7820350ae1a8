"""The node stand-in: plays kubelet, ReplicaSet and endpoint controllers for member Deployments.

The local control plane has no kubelet, no scheduler and no deployment, ReplicaSet or endpoint
controllers, so a member Deployment would never get a pod. This process plays all of them for
member Deployments (labelled ``app.kubernetes.io/managed-by=modelpool-operator`` and
``inference.modelpool.dev/inferenceservice``; in every namespace, or one), with a simulator
process (``controlplane sim``) as each pod's container. In kind or a real cluster it is not
used: real kubelets run the simulator image (or llama.cpp) and the built-in
controllers write everything below.

Per Deployment (one reconcile per Deployment key, level-triggered from Deployment, Pod, Service
and EndpointSlice watches):

* **ReplicaSet controller, Recreate strategy.** At most one pod (a member is 0 or 1; larger
  ``replicas`` are capped at 1 and logged). A pod whose ``pod-template-hash`` label no longer
  matches the template, or that belongs to an older Deployment of the same name, is deleted; so is
  a pod beyond the desired count. A new pod is created only when no pod of the Deployment is left,
  Terminating ones included: two servers of one model never overlap on the GPU. Pods are owned
  by the Deployment itself (``controller: true``), not by a ReplicaSet.
* **kubelet**, for pods bound to :data:`NODE_NAME`. A pod gets a simulator started with the served
  name (``--alias``), slots (``--parallel``) and context (``--ctx-size``) read from the container's
  llama-server arguments; its status (via the status subresource) turns Running, with ``podIP``
  127.0.0.1, once the simulator listens, and Ready once its ``/health`` answers 200. The model
  load takes :attr:`NodeSettings.load_seconds`, unless the arguments carry
  ``--sim-load-seconds N`` (:data:`LOAD_SECONDS_ARG`): an InferenceService's ``spec.args`` can
  give one member a slow load (a stand-in flag only; a real llama-server would refuse it). The
  simulator's environment names its pod and member (``MODELPOOL_POD``, ``MODELPOOL_MEMBER``, see
  :func:`controlplane.sim.process.identity_env`), so a test can tell from ``/proc`` alone which
  member's server is running. A
  simulator that dies is restarted (``restartCount`` grows). Deleting a pod bound to a node only
  marks it (``deletionTimestamp``: it is Terminating); the stand-in then sends SIGTERM, waits for
  the process to exit, and only then deletes the pod with ``gracePeriodSeconds: 0``. So Terminating
  pods really exist for as long as the server takes to stop, as on a real node.
* **endpoint controller.** One EndpointSlice per Service selecting the Deployment's pods, named
  ``SERVICE-sim``, labelled ``kubernetes.io/service-name``, owned by the Service, with
  ``conditions.ready`` true once ``/health`` answers 200. Its port is the simulator's **actual**
  port, not the Service's: in local runs every simulator listens on its own free loopback port,
  and clients reach members through the slice, never the ClusterIP (nothing implements Services
  here). Simulators listen on 127.0.0.1 only, and everything stays on loopback; since the API
  server refuses loopback IPs in IPv4 slices, the slice is ``addressType: FQDN`` with the address
  ``POD.NAMESPACE.localhost``, a name that is loopback by definition (RFC 6761) and that
  :func:`controlplane.runtime.endpoints.connect_host` maps to 127.0.0.1 without a DNS query.
* **deployment controller.** ``status`` with ``observedGeneration``, ``replicas`` (pods not
  terminating), ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``,
  ``unavailableReplicas`` and the ``Available`` and ``Progressing`` conditions, written through
  the status subresource only when it changes. ``ProgressDeadlineExceeded`` is never reported.

A running simulator is re-checked every :attr:`NodeSettings.resync_seconds` (the kubelet's sync
loop); a starting one every :attr:`NodeSettings.starting_poll_seconds`. Every simulator is a child
that dies with the stand-in (``PR_SET_PDEATHSIG``); SIGTERM stops them all cleanly and, by
default, deletes the pods they backed (the node leaves and takes its pods along), so namespaces
of finished tests can be deleted.

The stand-in is a development tool run as the cluster admin: its permissions are not part of the
operator's RBAC.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import msgspec

from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import LOCALHOST_DOMAIN, LOOPBACK
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, PODS, SERVICES
from controlplane.sim.nodesettings import NodeSettings
from controlplane.sim.process import (
    SimulatorProcess,
    SimulatorStartError,
    identity_env,
    simulator_argv,
)

log = logging.getLogger(__name__)

NODE_NAME: Final = "modelpool-sim-node"
CONTROLLER_NAME: Final = "sim-node"
FIELD_MANAGER: Final = "modelpool-sim-node"
#: The Deployments (and their pods) this stand-in plays the node for.
#: Member Deployments only: the operator also manages router-proxy Deployments, which are not
#: model servers and get no simulator.
#: The label naming a member pod's InferenceService (the operator's, repeated here: the simulator
#: package knows nothing of the controllers).
MEMBER_LABEL: Final = "inference.modelpool.dev/inferenceservice"
MANAGED_SELECTOR: Final = f"app.kubernetes.io/managed-by=modelpool-operator,{MEMBER_LABEL}"
#: A stand-in-only server argument: this member's model load time, overriding the node's.
LOAD_SECONDS_ARG: Final = "--sim-load-seconds"
POD_TEMPLATE_HASH_LABEL: Final = "pod-template-hash"
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
SLICE_MANAGED_BY_LABEL: Final = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGED_BY: Final = "sim-node.modelpool.dev"

HEALTH_TIMEOUT_SECONDS: Final = 1.0
#: How long a graceful exit may spend stopping simulators and deleting their pods.
EXIT_CLEANUP_SECONDS: Final = 15.0

Object = dict[str, Any]


# -- pure helpers ----------------------------------------------------------------------------------


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def server_args(container: Mapping[str, Any], fallback_name: str) -> ServerArgs:
    """``--alias`` (else the ``--model`` file's stem) names the model; ``--parallel`` gives the
    slots and ``--ctx-size`` is shared between them, as llama-server does; ``--sim-load-seconds``
    (a non-negative number) overrides the node's load time for this member."""
    args = [str(a) for a in container.get("args") or ()]
    model = _flag(args, "--alias", "-a")
    if not model:
        source = _flag(args, "--model", "-m")
        model = Path(source).stem if source else fallback_name
    slots_text = _flag(args, "--parallel", "-np")
    slots = max(int(slots_text), 1) if slots_text and slots_text.isdigit() else 1
    ctx_text = _flag(args, "--ctx-size", "-c")
    ctx = int(ctx_text) // slots if ctx_text and ctx_text.isdigit() and int(ctx_text) else None
    return ServerArgs(model, slots, ctx or None, _non_negative(_flag(args, LOAD_SECONDS_ARG)))


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


def _condition(
    existing: Sequence[Mapping[str, Any]], type_: str, status: bool, **extra: str
) -> Object:
    """A condition that keeps its ``lastTransitionTime`` unless its status flips."""
    value = "True" if status else "False"
    old = next((c for c in existing if c.get("type") == type_), None)
    stamp = old.get("lastTransitionTime") if old and old.get("status") == value else None
    return {"type": type_, "status": value, "lastTransitionTime": stamp or now(), **extra}


def pod_status(
    pod: Mapping[str, Any],
    *,
    ip: str,
    ready: bool,
    restarts: int,
    started_at: str,
    container_id: str,
) -> Object:
    """The status a kubelet reports for a pod whose (simulated) containers run."""
    current: Object = dict(pod.get("status") or {})
    conditions = current.get("conditions") or []
    containers = (pod.get("spec") or {}).get("containers") or []
    status = dict(current)
    status.update(
        phase="Running",
        hostIP=ip,
        hostIPs=[{"ip": ip}],
        podIP=ip,
        podIPs=[{"ip": ip}],
        startTime=current.get("startTime") or started_at,
        conditions=[
            _condition(conditions, "PodReadyToStartContainers", True),
            _condition(conditions, "Initialized", True),
            _condition(conditions, "Ready", ready),
            _condition(conditions, "ContainersReady", ready),
            _condition(conditions, "PodScheduled", True),
        ],
        containerStatuses=[
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": f"sim://{container.get('image', '')}",
                "containerID": container_id,
                "ready": ready,
                "started": True,
                "restartCount": restarts,
                "state": {"running": {"startedAt": started_at}},
            }
            for container in containers
        ],
    )
    return status


def pod_status_summary(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a pod status write would change; the rest (timestamps) follows from it."""
    conditions = tuple(
        sorted((c.get("type"), c.get("status")) for c in status.get("conditions") or ())
    )
    containers = tuple(
        (c.get("name"), c.get("ready"), c.get("restartCount"), c.get("containerID"))
        for c in status.get("containerStatuses") or ()
    )
    return (status.get("phase"), status.get("podIP"), conditions, containers)


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


_STATUS_COUNTS: Final = (
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
)


def deployment_status(
    deployment: Mapping[str, Any], live_pods: Sequence[Mapping[str, Any]], hash_: str
) -> Object:
    """The status a deployment controller would write for ``live_pods`` (not terminating)."""
    desired = min(desired_replicas(deployment), 1)
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
    service: Mapping[str, Any], container: Mapping[str, Any], backends: Sequence[Backend]
) -> Object:
    """The EndpointSlice for ``service``; its port is the simulator's, not the Service's."""
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
            "name": f"{meta['name']}-sim",
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


# -- the stand-in ----------------------------------------------------------------------------------


@dataclass
class _Simulated:
    """A pod's simulator and what its status reports."""

    process: SimulatorProcess
    started_at: str
    restarts: int


class NodeStandIn:
    """The reconciler (one Deployment per request) and a runnable that stops simulators at exit."""

    needs_leader_election = False

    def __init__(self, manager: Manager, settings: NodeSettings) -> None:
        self.settings = settings
        self.client: KubeClient = manager.client
        ns = settings.namespace
        self.deployments: Informer = manager.informer(
            DEPLOYMENTS, ns, label_selector=MANAGED_SELECTOR
        )
        self.pods: Informer = manager.informer(PODS, ns, label_selector=MANAGED_SELECTOR)
        self.services: Informer = manager.informer(SERVICES, ns)
        self.slices: Informer = manager.informer(
            ENDPOINT_SLICES, ns, label_selector=f"{SLICE_MANAGED_BY_LABEL}={SLICE_MANAGED_BY}"
        )
        controller = manager.new_controller(CONTROLLER_NAME, self, max_concurrent_reconciles=4)
        controller.needs_leader_election = False
        controller.for_(self.deployments).owns(self.pods)
        controller.watches(self.services, self._service_to_deployments)
        controller.watches(self.slices, self._slice_to_deployments)
        manager.add(self)
        self._simulated: dict[str, _Simulated] = {}  # by pod uid
        self._pod_keys: dict[str, tuple[str, str]] = {}  # pod uid -> (namespace, name)
        self._applied_slices: dict[str, bytes] = {}
        self._http = httpx.AsyncClient(timeout=HEALTH_TIMEOUT_SECONDS)

    # -- event mapping -------------------------------------------------------------------------

    def _deployments_selected_by(self, service: Mapping[str, Any]) -> Iterable[Request]:
        namespace = service["metadata"].get("namespace") or ""
        for deployment in self.deployments.store.objects():
            meta = deployment["metadata"]
            labels = ((deployment["spec"].get("template") or {}).get("metadata") or {}).get(
                "labels"
            ) or {}
            if meta.get("namespace") == namespace and selects(service, labels):
                yield Request(namespace, meta["name"])

    def _service_to_deployments(self, service: Object) -> Iterable[Request]:
        return list(self._deployments_selected_by(service))

    def _slice_to_deployments(self, slice_: Object) -> Iterable[Request]:
        meta = slice_["metadata"]
        service_name = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        service = self.services.store.get(f"{meta.get('namespace')}/{service_name}")
        return list(self._deployments_selected_by(service)) if service else []

    # -- reconcile -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        pods = self._pods_of(request)
        for pod in pods:
            if is_terminating(pod):
                await self._finish_pod(pod)  # the kubelet's part of a deletion
        live = [pod for pod in pods if not is_terminating(pod)]
        deployment = self.deployments.store.get(key)
        if deployment is None or is_terminating(deployment):
            return Result()  # the garbage collector deletes its pods; we finish them
        hash_ = template_hash(deployment)
        desired = desired_replicas(deployment)
        if desired > 1:
            log.warning("%s: replicas %d capped at 1 (one simulated GPU)", key, desired)
            desired = 1
        uid = deployment["metadata"]["uid"]
        stale = [
            pod
            for pod in live
            if (pod["metadata"].get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL) != hash_
            or (controller_of(pod) or {}).get("uid") != uid
        ]
        keep = [pod for pod in live if pod not in stale]
        doomed = stale + keep[desired:]
        for pod in doomed:
            await self._delete_pod(pod)  # graceful: Terminating until the kubelet part ends it
        live = [pod for pod in keep if pod not in doomed]
        if desired and not live and not pods:
            live = [await self._create_pod(deployment, hash_)]

        requeue: float | None = None
        backends: list[Backend] = []
        for index, pod in enumerate(live):
            live[index], ready = await self._run_pod(pod)
            simulated = self._simulated.get(pod["metadata"]["uid"])
            if simulated is not None:
                address = loopback_name(live[index])
                backends.append(Backend(live[index], address, simulated.process.port, ready))
            delay = self.settings.resync_seconds if ready else self.settings.starting_poll_seconds
            requeue = delay if requeue is None else min(requeue, delay)

        await self._write_deployment_status(deployment, live, hash_)
        await self._sync_slices(deployment, backends)
        return Result(requeue_after=requeue) if requeue is not None else Result()

    def _pods_of(self, request: Request) -> list[Object]:
        found = []
        for pod in self.pods.store.by_index("namespace", request.namespace):
            ref = controller_of(pod)
            if ref and ref.get("kind") == "Deployment" and ref.get("name") == request.name:
                found.append(pod)
        return found

    # -- ReplicaSet controller -----------------------------------------------------------------

    async def _create_pod(self, deployment: Mapping[str, Any], hash_: str) -> Object:
        pod = new_pod(deployment, hash_, secrets.token_hex(3)[:5])
        created = await self.client.create(PODS, pod)
        log.info("created pod %s/%s", created["metadata"]["namespace"], created["metadata"]["name"])
        return created

    async def _delete_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            await self.client.delete(PODS, meta["name"], meta["namespace"], uid=meta["uid"])
        except (NotFound, Conflict):
            return
        log.info("deleting pod %s/%s (Terminating)", meta["namespace"], meta["name"])

    # -- kubelet -------------------------------------------------------------------------------

    async def _run_pod(self, pod: Object) -> tuple[Object, bool]:
        """Make sure the pod's simulator runs; report its status. Returns the pod and readiness."""
        meta = pod["metadata"]
        uid = meta["uid"]
        simulated = self._simulated.get(uid)
        if simulated is None or not simulated.process.running():
            restarts = _restart_count(pod)
            if simulated is not None or (pod.get("status") or {}).get("phase") == "Running":
                restarts += 1  # the container died, or ran under a stand-in that is gone
                log.warning("%s/%s: simulator not running; restarting", *_key(meta))
            simulated = await self._start_simulator(pod, restarts)
        ready = await self._healthy(simulated.process)
        status = pod_status(
            pod,
            ip=LOOPBACK,
            ready=ready,
            restarts=simulated.restarts,
            started_at=simulated.started_at,
            container_id=f"sim://{simulated.process.pid}",
        )
        if pod_status_summary(status) != pod_status_summary(pod.get("status") or {}):
            try:
                pod = await self.client.update_status(PODS, {**pod, "status": status})
            except Conflict:
                return pod, False  # a newer pod is in the cache; the watch brings it back here
        return pod, ready

    async def _start_simulator(self, pod: Mapping[str, Any], restarts: int) -> _Simulated:
        meta = pod["metadata"]
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        args = server_args(containers[0], meta["name"])
        load_seconds = args.load_seconds
        if load_seconds is None:
            load_seconds = self.settings.load_seconds
        argv = simulator_argv(
            args.model_name,
            host=LOOPBACK,
            load_seconds=load_seconds,
            token_seconds=self.settings.token_seconds,
            slots=args.slots,
            ctx_size=args.ctx_size,
        )
        member = (meta.get("labels") or {}).get(MEMBER_LABEL, "")
        process = SimulatorProcess(
            argv,
            self.settings.log_dir / f"{meta['namespace']}_{meta['name']}.log",
            env=identity_env(meta["namespace"], meta["name"], member),
        )
        try:
            url = await process.start()
        except SimulatorStartError as err:
            raise RuntimeError(f"pod {meta['namespace']}/{meta['name']}: simulator: {err}") from err
        log.info("pod %s/%s: simulator for %s on %s", meta["namespace"], meta["name"],
                 args.model_name, url)  # fmt: skip
        simulated = _Simulated(process, now(), restarts)
        self._simulated[meta["uid"]] = simulated
        self._pod_keys[meta["uid"]] = (meta["namespace"], meta["name"])
        return simulated

    async def _healthy(self, process: SimulatorProcess) -> bool:
        try:
            response = await self._http.get(f"{process.url}/health")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _finish_pod(self, pod: Mapping[str, Any]) -> None:
        """A Terminating pod: stop its simulator (SIGTERM, wait), then remove the pod."""
        meta = pod["metadata"]
        simulated = self._simulated.pop(meta["uid"], None)
        self._pod_keys.pop(meta["uid"], None)
        if simulated is not None:
            code = await simulated.process.stop()
            log.info("pod %s/%s: simulator exited with %s", meta["namespace"], meta["name"], code)
        await self._force_delete(meta["namespace"], meta["name"], meta["uid"])

    async def _force_delete(self, namespace: str, name: str, uid: str) -> None:
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            await self.client.request("DELETE", PODS.path(namespace, name), body=options)
        except (NotFound, Conflict):
            return
        log.info("pod %s/%s deleted", namespace, name)

    # -- deployment controller -----------------------------------------------------------------

    async def _write_deployment_status(
        self, deployment: Object, live: Sequence[Mapping[str, Any]], hash_: str
    ) -> None:
        status = deployment_status(deployment, live, hash_)
        if deployment_status_summary(status) == deployment_status_summary(
            deployment.get("status") or {}
        ):
            return
        try:
            await self.client.update_status(DEPLOYMENTS, {**deployment, "status": status})
        except (Conflict, NotFound):
            return  # the watch brings the newer version, which reconciles again

    # -- endpoint controller -------------------------------------------------------------------

    async def _sync_slices(
        self, deployment: Mapping[str, Any], backends: Sequence[Backend]
    ) -> None:
        namespace = deployment["metadata"]["namespace"]
        template = deployment["spec"].get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        containers = (template.get("spec") or {}).get("containers") or [{}]
        for service in self.services.store.by_index("namespace", namespace):
            if not selects(service, labels):
                continue
            wanted = endpoint_slice(service, containers[0], backends)
            key = f"{namespace}/{wanted['metadata']['name']}"
            body = msgspec.json.encode(wanted, order="sorted")
            if key in self.slices.store and self._applied_slices.get(key) == body:
                continue
            await self.client.apply(
                ENDPOINT_SLICES, wanted, field_manager=FIELD_MANAGER, force=True
            )
            self._applied_slices[key] = body

    # -- runnable: stop every simulator on the way out -----------------------------------------

    async def start(self) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(EXIT_CLEANUP_SECONDS):
                await self.stop_all()

    async def stop_all(self) -> None:
        """SIGTERM every simulator and wait for them; delete their pods if configured."""
        simulated, self._simulated = self._simulated, {}
        keys, self._pod_keys = self._pod_keys, {}
        async with anyio.create_task_group() as group:
            for sim in simulated.values():
                group.start_soon(sim.process.stop)
        log.info("stopped %d simulator(s)", len(simulated))
        if self.settings.delete_pods_on_exit:
            for uid, (namespace, name) in keys.items():
                try:
                    await self._force_delete(namespace, name, uid)
                except Exception as err:  # best effort on the way out
                    log.warning("could not delete pod %s/%s: %s", namespace, name, err)
        await self._http.aclose()


def _key(meta: Mapping[str, Any]) -> tuple[str, str]:
    return (meta["namespace"], meta["name"])


def _restart_count(pod: Mapping[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return max((int(s.get("restartCount") or 0) for s in statuses), default=0)


async def run_node(client_config: Any, settings: NodeSettings) -> None:
    """Run the stand-in until SIGTERM or SIGINT."""
    from controlplane.runtime.manager import ManagerOptions

    manager = Manager(
        client_config,
        ManagerOptions(name="modelpool-sim-node", probe_address=None, metrics_address=None),
    )
    NodeStandIn(manager, settings)
    scope = f"namespace {settings.namespace}" if settings.namespace else "all namespaces"
    log.info("node stand-in %s: playing the node for %s in %s", NODE_NAME, MANAGED_SELECTOR, scope)
    await manager.run_until_signal()
