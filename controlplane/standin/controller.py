"""The node stand-in: plays kubelet, ReplicaSet, endpoint controllers and kube-proxy locally.

*Why one module of this size:* a third of it is this account of which built-in component it plays
and how; the reconciler itself is the rest.

The local control plane has no kubelet, no scheduler, no kube-proxy and no deployment, ReplicaSet
or endpoint controllers, so a member or router-proxy Deployment would never get a pod. This
process plays all of them for the operator's Deployments (in every namespace, or one; which ones
and what their pods run: :func:`controlplane.standin.builders.pod_role`):

* **member** Deployments (``inference.modelpool.dev/inferenceservice``): a simulator process
  (``controlplane sim``) as the pod's container, or the real llama.cpp ``llama-server`` when the
  stand-in was given one (:attr:`NodeSettings.llama_server`, ``sim-node --llama-server PATH``)
  and the member's ``--model`` is a GGUF file on this machine: then the container's arguments
  are passed through (``spec.args`` included) with ``--host``/``--port`` rewritten to a loopback
  port the stand-in chooses and ``--threads 1`` unless given
  (:func:`~controlplane.standin.builders.llama_server_argv`);
* **router-proxy** Deployments (``inference.modelpool.dev/modelrouter``), when
  :attr:`NodeSettings.router_proxies` is on (``sim-node --router-proxies``; ``make dev`` and
  ``make demo`` turn it on, e2e tests that run their own proxies leave it off):
  ``spec.replicas`` pods, each a ``controlplane router-proxy`` process with the container's
  arguments, authenticated as the pod's ``serviceAccountName`` by a TokenRequest token the
  stand-in mints as the admin (a kubelet mounts one the same way), on a free loopback port.
  Each router Service gets one stable local address (:mod:`controlplane.standin.forwarder`),
  logged as ``router NS/NAME answers at http://127.0.0.1:PORT``.

In kind or a real cluster the stand-in is not used: real kubelets run the images and the built-in
controllers write everything below. The pure parts (pods, statuses, slices, command lines) are in
:mod:`controlplane.standin.builders`; this module reads and writes.

Per Deployment (one reconcile per Deployment key, level-triggered from Deployment, Pod, Service
and EndpointSlice watches):

* **ReplicaSet controller.** A pod whose ``pod-template-hash`` label no longer matches the
  template, or that belongs to an older Deployment of the same name, is deleted; so is a pod
  beyond the desired count. Members: Recreate, at most one pod (a member is 0 or 1; larger
  ``replicas`` are capped at 1 and logged), and a new pod is created only when no pod of the
  Deployment is left, Terminating ones included: two servers of one model never overlap on the
  GPU. Router-proxies: ``spec.replicas`` pods, a new one created while fewer live pods exist
  (Terminating ones not counted). Pods are owned by the Deployment itself (``controller:
  true``), not by a ReplicaSet.
* **kubelet**, for pods bound to :data:`NODE_NAME`. A pod gets a simulator started with the served
  name (``--alias``), slots (``--parallel``) and context (``--ctx-size``) read from the container's
  llama-server arguments; its status (via the status subresource) turns Running, with ``podIP``
  127.0.0.1, once the simulator listens, and Ready once its ``/health`` answers 200. The model
  load takes :attr:`NodeSettings.load_seconds`, unless the arguments carry
  ``--sim-load-seconds N`` (:data:`LOAD_SECONDS_ARG`): an InferenceService's ``spec.args`` can
  give one member a slow load (a stand-in flag only; a real llama-server would refuse it). The
  simulator's environment names its pod and member (``MODELPOOL_POD``, ``MODELPOOL_MEMBER``, see
  :func:`controlplane.standin.process.identity_env`), so a test can tell from ``/proc`` alone which
  member's server is running. **Readiness gates** are honoured as a kubelet does: the pod is
  Ready only when its container is ready *and* every ``spec.readinessGates`` condition is True
  (otherwise Ready is False with reason ``ReadinessGatesNotReady``), and conditions the kubelet
  does not own are kept as they are on every status write. **hostPath volumes** are folders of
  the node's disk, :attr:`NodeSettings.host_root` (``LOG_DIR/hostpath``): a volume ``/P`` is
  ``host_root/P`` (created for ``DirectoryOrCreate``), and a ``--slot-save-path`` under a
  mounted hostPath is rewritten to that folder (anywhere else, to a scratch folder of the pod,
  gone with it); ``--sim-slot-restore-seconds N`` (:data:`RESTORE_DELAY_ARG`) makes the
  simulator's slot restores hang N seconds first. A
  simulator that dies is restarted (``restartCount`` grows). Deleting a pod bound to a node only
  marks it (``deletionTimestamp``: it is Terminating); the stand-in then sends SIGTERM, waits for
  the process to exit, and only then deletes the pod with ``gracePeriodSeconds: 0``. So Terminating
  pods really exist for as long as the server takes to stop, as on a real node.
* **endpoint controller.** One EndpointSlice per Service selecting the Deployment's pods, named
  ``SERVICE-sim``, labelled ``kubernetes.io/service-name``, owned by the Service, with
  ``conditions.ready`` true once ``/health`` (a proxy: ``/readyz``) answers 200. Its port is the
  process's **actual** port (one slice per port when replicas listen on several, named
  ``SERVICE-sim-PORT``), not the Service's: in local runs every process listens on its own free
  loopback port, and clients reach members through the slice, never the ClusterIP (nothing
  implements Services here but the router forwarders below). Processes listen on 127.0.0.1 only,
  and everything stays on loopback; since the API server refuses loopback IPs in IPv4 slices, the
  slice is ``addressType: FQDN`` with the address ``POD.NAMESPACE.localhost``, a name that is
  loopback by definition (RFC 6761) and that :func:`controlplane.runtime.endpoints.connect_host`
  maps to 127.0.0.1 without a DNS query.
* **kube-proxy**, for router Services only: one loopback address per Service, forwarding to its
  ready endpoints in turn (:class:`~controlplane.standin.forwarder.ServiceForwarder`).
* **deployment controller.** ``status`` with ``observedGeneration``, ``replicas`` (pods not
  terminating), ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``,
  ``unavailableReplicas`` and the ``Available`` and ``Progressing`` conditions, written through
  the status subresource only when it changes. ``ProgressDeadlineExceeded`` is never reported.

A running process is re-checked every :attr:`NodeSettings.resync_seconds` (the kubelet's sync
loop); a starting one every :attr:`NodeSettings.starting_poll_seconds`. Every process is a child
that dies with the stand-in (``PR_SET_PDEATHSIG``); SIGTERM stops them all cleanly and, by
default, deletes the pods they backed (the node leaves and takes its pods along), so namespaces
of finished tests can be deleted.

The stand-in is a development tool run as the cluster admin: its permissions are not part of the
operator's RBAC.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import msgspec
from anyio.abc import TaskGroup

from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import LOOPBACK
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, PODS, SERVICES
from controlplane.standin.builders import (
    MANAGED_SELECTOR,
    MEMBER_LABEL,
    NODE_NAME,
    POD_TEMPLATE_HASH_LABEL,
    ROUTER_LABEL,
    SERVICE_NAME_LABEL,
    SLICE_MANAGED_BY,
    SLICE_MANAGED_BY_LABEL,
    Backend,
    PodRole,
    controller_of,
    deployment_status,
    deployment_status_summary,
    desired_replicas,
    endpoint_slices,
    host_folder,
    is_pod_ready,
    is_terminating,
    llama_server_argv,
    loopback_name,
    max_replicas,
    model_source,
    new_pod,
    now,
    pod_env,
    pod_role,
    pod_status,
    pod_status_summary,
    proxy_argv,
    selects,
    server_args,
    service_account_of,
    template_hash,
    with_slot_save_path,
)
from controlplane.standin.forwarder import ServiceForwarder
from controlplane.standin.process import (
    LlamaServerProcess,
    PodProcess,
    ProxyProcess,
    SimulatorProcess,
    SimulatorStartError,
    identity_env,
    is_gguf,
    simulator_argv,
)
from controlplane.standin.settings import NodeSettings
from controlplane.standin.tokens import service_account_token, write_token_kubeconfig

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sim-node"
FIELD_MANAGER: Final = "modelpool-sim-node"
HEALTH_TIMEOUT_SECONDS: Final = 1.0
#: How long a graceful exit may spend stopping processes and deleting their pods.
EXIT_CLEANUP_SECONDS: Final = 15.0
#: What the stand-in logs when a router Service gets its local address (``make dev`` relays it).
ROUTER_ADDRESS_LOG: Final = "router %s/%s answers at %s"


@dataclass
class _Running:
    """A pod's process and what its status reports."""

    process: PodProcess
    started_at: str
    restarts: int


class NodeStandIn:
    """The reconciler (one Deployment per request) and a runnable that runs the Services'
    forwarders and stops every process at exit."""

    needs_leader_election = False

    def __init__(self, manager: Manager, settings: NodeSettings) -> None:
        self.settings = settings
        self.client: KubeClient = manager.client
        self.config: ClientConfig = manager.client.config
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
        self._running: dict[str, _Running] = {}  # by pod uid
        self._pod_keys: dict[str, tuple[str, str]] = {}  # pod uid -> (namespace, name)
        self._applied_slices: dict[str, bytes] = {}
        self._forwarders: dict[str, ServiceForwarder] = {}  # by Service key
        self._group: TaskGroup | None = None
        self._http = httpx.AsyncClient(timeout=HEALTH_TIMEOUT_SECONDS)

    def _role(self, deployment: Mapping[str, Any]) -> PodRole | None:
        role = pod_role(deployment)
        if role is PodRole.ROUTER_PROXY and not self.settings.router_proxies:
            return None
        return role

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
        role = self._role(deployment)
        if role is None:
            return Result()  # not a Deployment this stand-in plays
        hash_ = template_hash(deployment)
        desired = desired_replicas(deployment)
        cap = max_replicas(role)
        if cap is not None and desired > cap:
            log.warning("%s: replicas %d capped at %d (one simulated GPU)", key, desired, cap)
            desired = cap
        uid = deployment["metadata"]["uid"]
        stale = [
            pod
            for pod in live
            if (pod["metadata"].get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL) != hash_
            or (controller_of(pod) or {}).get("uid") != uid
        ]
        keep = [pod for pod in live if pod not in stale]
        doomed = stale + keep[desired:]
        marked = []  # graceful deletions: Terminating until the kubelet part below ends them
        for pod in doomed:
            if (deleted := await self._delete_pod(pod)) is not None and is_terminating(deleted):
                marked.append(deleted)
        live = [pod for pod in keep if pod not in doomed]
        if role is PodRole.MEMBER:
            if desired and not live and not pods:  # Recreate: nothing of the old one is left
                live = [await self._create_pod(deployment, hash_)]
        else:
            while len(live) < desired:
                live.append(await self._create_pod(deployment, hash_))

        requeue: float | None = None
        backends: list[Backend] = []
        for index, pod in enumerate(live):
            live[index], ready = await self._run_pod(pod, role)
            running = self._running.get(pod["metadata"]["uid"])
            if running is not None:
                address = loopback_name(live[index])
                backends.append(Backend(live[index], address, running.process.port, ready))
            delay = self.settings.resync_seconds if ready else self.settings.starting_poll_seconds
            requeue = delay if requeue is None else min(requeue, delay)

        await self._write_deployment_status(deployment, live, hash_, cap)
        await self._sync_slices(deployment, backends, role)
        # Stopped once its endpoint is out of the slice (clients stop picking it first, as a
        # preStop hook ensures on a node), and at once: not on the next pass that the pod's
        # watch event would queue.
        for pod in marked:
            await self._finish_pod(pod)
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

    async def _delete_pod(self, pod: Mapping[str, Any]) -> Object | None:
        """Graceful deletion; the pod as the API left it (Terminating), None if it was gone."""
        meta = pod["metadata"]
        try:
            deleted = await self.client.delete(
                PODS, meta["name"], meta["namespace"], uid=meta["uid"]
            )
        except (NotFound, Conflict):
            return None
        log.info("deleting pod %s/%s (Terminating)", meta["namespace"], meta["name"])
        return deleted

    # -- kubelet -------------------------------------------------------------------------------

    async def _run_pod(self, pod: Object, role: PodRole) -> tuple[Object, bool]:
        """Make sure the pod's process runs; report its status. Returns the pod and readiness."""
        meta = pod["metadata"]
        uid = meta["uid"]
        running = self._running.get(uid)
        if running is None or not running.process.running():
            restarts = _restart_count(pod)
            if running is not None or (pod.get("status") or {}).get("phase") == "Running":
                restarts += 1  # the container died, or ran under a stand-in that is gone
                log.warning("%s/%s: %s not running; restarting", *_key(meta), role.value)
            if role is PodRole.MEMBER:
                process: PodProcess = await self._start_member(pod)
            else:
                process = await self._start_proxy(pod)
            running = _Running(process, now(), restarts)
            self._running[uid] = running
            self._pod_keys[uid] = (meta["namespace"], meta["name"])
        healthy = await self._healthy(running.process)
        status = pod_status(
            pod,
            ip=LOOPBACK,
            ready=healthy,
            restarts=running.restarts,
            started_at=running.started_at,
            container_id=f"sim://{running.process.pid}",
        )
        if pod_status_summary(status) != pod_status_summary(pod.get("status") or {}):
            try:
                pod = await self.client.update_status(PODS, {**pod, "status": status})
            except Conflict:
                return pod, False  # a newer pod is in the cache; the watch brings it back here
        # Ready as the endpoint controller reads it: the pod's condition, readiness gates included.
        return pod, is_pod_ready({"status": status})

    async def _start_member(self, pod: Mapping[str, Any]) -> PodProcess:
        """The real llama-server when the stand-in has one and the member's model is a GGUF
        file here; a simulator otherwise."""
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        source = model_source(containers[0])
        binary = self.settings.llama_server
        if binary is not None and source and await anyio.to_thread.run_sync(is_gguf, source):
            return await self._start_llama_server(pod, binary)
        return await self._start_simulator(pod)

    async def _start_llama_server(self, pod: Mapping[str, Any], binary: Path) -> PodProcess:
        meta = pod["metadata"]
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        port = _free_port()
        member = (meta.get("labels") or {}).get(MEMBER_LABEL, "")
        argv = llama_server_argv(binary, containers[0], port=port)
        save_path = server_args(containers[0], meta["name"]).slot_save_path
        if save_path:  # the pod's folder on this machine, as for a simulator
            argv = with_slot_save_path(argv, self._host_folder(pod, containers[0], save_path))
        process = LlamaServerProcess(
            argv,
            self.settings.log_dir / f"{meta['namespace']}_{meta['name']}.log",
            port,
            env=identity_env(meta["namespace"], meta["name"], member),
        )
        url = await process.start()
        log.info("pod %s/%s: llama-server for %s on %s", meta["namespace"], meta["name"],
                 model_source(containers[0]), url)  # fmt: skip
        return process

    async def _start_simulator(self, pod: Mapping[str, Any]) -> SimulatorProcess:
        meta = pod["metadata"]
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        args = server_args(containers[0], meta["name"])
        load_seconds = args.load_seconds
        if load_seconds is None:
            load_seconds = self.settings.load_seconds
        save_path = None
        if args.slot_save_path:
            save_path = self._host_folder(pod, containers[0], args.slot_save_path)
        argv = simulator_argv(
            args.model_name,
            host=LOOPBACK,
            load_seconds=load_seconds,
            token_seconds=self.settings.token_seconds,
            slots=args.slots,
            ctx_size=args.ctx_size,
            slot_save_path=save_path,
            slot_restore_delay=args.restore_delay_seconds,
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
        return process

    def _host_folder(self, pod: Mapping[str, Any], container: Mapping[str, Any], path: str) -> Path:
        """The local folder for the container's ``path``, made as a kubelet makes a
        ``DirectoryOrCreate`` hostPath (and a container's own folders exist in its image)."""
        meta = pod["metadata"]
        scratch = self.settings.log_dir / "pods" / f"{meta['namespace']}_{meta['name']}"
        spec = pod.get("spec") or {}
        folder = host_folder(spec, container, path, self.settings.host_root, scratch)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    async def _start_proxy(self, pod: Mapping[str, Any]) -> ProxyProcess:
        """A router-proxy as the pod's ServiceAccount (a fresh token, as a kubelet mounts one),
        with its container's arguments, on a free loopback port."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        account = service_account_of(pod)
        token = await service_account_token(self.client, namespace, account)
        folder = self.settings.log_dir / "router-proxies" / f"{namespace}_{name}"
        kubeconfig = write_token_kubeconfig(self.config, token, folder / "kubeconfig")
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        port = _free_port()
        argv = proxy_argv(
            containers[0], pod, kubeconfig=kubeconfig, port=port, cache_dir=folder / "cache"
        )
        process = ProxyProcess(
            argv, self.settings.log_dir / f"{namespace}_{name}.log", port, env=pod_env(pod)
        )
        url = await process.start()
        log.info("pod %s/%s: router-proxy as ServiceAccount %s/%s on %s",
                 namespace, name, namespace, account, url)  # fmt: skip
        return process

    async def _healthy(self, process: PodProcess) -> bool:
        try:
            response = await self._http.get(f"{process.url}{process.health_path}")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _finish_pod(self, pod: Mapping[str, Any]) -> None:
        """A Terminating pod: stop its process (SIGTERM, wait), then remove the pod."""
        meta = pod["metadata"]
        running = self._running.pop(meta["uid"], None)
        self._pod_keys.pop(meta["uid"], None)
        if running is not None:
            code = await running.process.stop()
            log.info("pod %s/%s: process exited with %s", meta["namespace"], meta["name"], code)
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
        self,
        deployment: Object,
        live: Sequence[Mapping[str, Any]],
        hash_: str,
        cap: int | None,
    ) -> None:
        status = deployment_status(deployment, live, hash_, cap)
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
        self, deployment: Mapping[str, Any], backends: Sequence[Backend], role: PodRole
    ) -> None:
        namespace = deployment["metadata"]["namespace"]
        template = deployment["spec"].get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        containers = (template.get("spec") or {}).get("containers") or [{}]
        for service in self.services.store.by_index("namespace", namespace):
            if not selects(service, labels):
                continue
            wanted = endpoint_slices(service, containers[0], backends)
            for slice_ in wanted:
                key = f"{namespace}/{slice_['metadata']['name']}"
                body = msgspec.json.encode(slice_, order="sorted")
                if key in self.slices.store and self._applied_slices.get(key) == body:
                    continue
                await self.client.apply(
                    ENDPOINT_SLICES, slice_, field_manager=FIELD_MANAGER, force=True
                )
                self._applied_slices[key] = body
            await self._delete_other_slices(service, {s["metadata"]["name"] for s in wanted})
            if role is PodRole.ROUTER_PROXY:
                ready = [(LOOPBACK, b.port) for b in backends if b.ready]
                self._forwarder(service).set_targets(ready)

    async def _delete_other_slices(self, service: Mapping[str, Any], keep: set[str]) -> None:
        """Our slices of ``service`` not among ``keep`` (a proxy replica's port went away)."""
        meta = service["metadata"]
        for slice_ in self.slices.store.by_index("namespace", meta["namespace"]):
            slice_meta = slice_["metadata"]
            labels = slice_meta.get("labels") or {}
            if labels.get(SERVICE_NAME_LABEL) != meta["name"] or slice_meta["name"] in keep:
                continue
            self._applied_slices.pop(f"{meta['namespace']}/{slice_meta['name']}", None)
            with contextlib.suppress(NotFound):
                await self.client.delete(ENDPOINT_SLICES, slice_meta["name"], meta["namespace"])

    # -- kube-proxy: one local address per router Service ------------------------------------

    def _forwarder(self, service: Mapping[str, Any]) -> ServiceForwarder:
        meta = service["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        forwarder = self._forwarders.get(key)
        if forwarder is None:
            forwarder = self._forwarders[key] = ServiceForwarder(key)
            router = (meta.get("labels") or {}).get(ROUTER_LABEL) or meta["name"]
            log.info(ROUTER_ADDRESS_LOG, meta["namespace"], router, forwarder.url)
            if self._group is not None:
                self._group.start_soon(forwarder.serve)
        return forwarder

    # -- runnable: the forwarders; stop every process on the way out -------------------------

    async def start(self) -> None:
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                for forwarder in self._forwarders.values():  # made before the runnable started
                    group.start_soon(forwarder.serve)
                await anyio.sleep_forever()
        finally:
            self._group = None
            with anyio.CancelScope(shield=True), anyio.move_on_after(EXIT_CLEANUP_SECONDS):
                await self.stop_all()

    async def stop_all(self) -> None:
        """SIGTERM every process and wait for them; delete their pods if configured."""
        running, self._running = self._running, {}
        keys, self._pod_keys = self._pod_keys, {}
        async with anyio.create_task_group() as group:
            for each in running.values():
                group.start_soon(each.process.stop)
        log.info("stopped %d process(es)", len(running))
        if self.settings.delete_pods_on_exit:
            for uid, (namespace, name) in keys.items():
                try:
                    await self._force_delete(namespace, name, uid)
                except Exception as err:  # best effort on the way out
                    log.warning("could not delete pod %s/%s: %s", namespace, name, err)
        await self._http.aclose()


def _free_port() -> int:
    """A loopback port that was free a moment ago (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _key(meta: Mapping[str, Any]) -> tuple[str, str]:
    return (meta["namespace"], meta["name"])


def _restart_count(pod: Mapping[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return max((int(s.get("restartCount") or 0) for s in statuses), default=0)


async def run_node(client_config: ClientConfig, settings: NodeSettings) -> None:
    """Run the stand-in until SIGTERM or SIGINT."""
    from controlplane.runtime.manager import ManagerOptions

    manager = Manager(
        client_config,
        ManagerOptions(name="modelpool-sim-node", probe_address=None, metrics_address=None),
    )
    NodeStandIn(manager, settings)
    scope = f"namespace {settings.namespace}" if settings.namespace else "all namespaces"
    played = "members and router-proxies" if settings.router_proxies else "members"
    log.info("node stand-in %s: playing the node for %s (%s) in %s", NODE_NAME, MANAGED_SELECTOR,
             played, scope)  # fmt: skip
    await manager.run_until_signal()
