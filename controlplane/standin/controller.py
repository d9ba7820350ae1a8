"""The node stand-in: plays kubelet, scheduler, ReplicaSet, endpoint controllers and kube-proxy.

*Why one module of this size:* a third of it is this account of which built-in component it plays
and how; the reconciler itself is the rest (the pieces it drives are modules of their own).

The local control plane has no kubelet, no scheduler, no kube-proxy and no deployment, ReplicaSet
or endpoint controllers, so a member or router-proxy Deployment would never get a pod, nor a
Job's pod a node. This process plays all of them for the operator's objects (in every namespace,
or one; which Deployments and what their pods run: :func:`controlplane.standin.builders.pod_role`):

* **member** Deployments (``inference.modelpool.dev/inferenceservice``): a simulator process
  (``controlplane sim``) as the pod's server container, or the real llama.cpp ``llama-server``
  when the stand-in was given one (:attr:`NodeSettings.llama_server`, ``sim-node --llama-server
  PATH``) and the member's ``--model``, where it is on this machine, is a GGUF file: then the
  container's arguments are passed through (``spec.args`` included) with ``--host``/``--port``
  rewritten to a loopback port the stand-in chooses and ``--threads 1`` unless given
  (:mod:`controlplane.standin.servers`);
* **router-proxy** Deployments (``inference.modelpool.dev/modelrouter``), when
  :attr:`NodeSettings.router_proxies` is on (``sim-node --router-proxies``; ``make dev`` and
  ``make demo`` turn it on, e2e tests that run their own proxies leave it off):
  ``spec.replicas`` pods, each a ``controlplane router-proxy`` process with the container's
  arguments, authenticated as the pod's ``serviceAccountName`` by a TokenRequest token the
  stand-in mints as the admin (a kubelet mounts one the same way), on a free loopback port.
  Each router Service gets one stable local address (:mod:`controlplane.standin.forwarder`),
  logged as ``router NS/NAME answers at http://127.0.0.1:PORT``;
* **pods of other owners** labelled as the operator's (a Job's: the model prefetch, made by
  kube-controller-manager's ``job-controller``): scheduled to the node through ``pods/binding``
  when their ``nodeSelector`` and node affinity fit, and run to completion, by a second
  controller (:mod:`controlplane.standin.jobs`).

In kind or a real cluster the stand-in is not used: real kubelets run the images and the built-in
controllers write everything below. The pure parts (pods, statuses, slices, command lines) are in
:mod:`controlplane.standin.builders` and the modules it names; this module reads and writes.

**The node.** At start the stand-in registers the Node :data:`NODE_NAME`
(:mod:`controlplane.standin.node`: hostname and OS labels, ``InternalIP`` 127.0.0.1, Ready) with
its kubelet endpoint, an HTTPS server on loopback (:mod:`controlplane.standin.kubeletapi`) that
serves each container's log, so ``kubectl logs`` and ``GET pods/NAME/log`` answer through the
API server as on a real node. Each container writes its own log file
(:mod:`controlplane.standin.logfiles`; the server's is ``LOG_DIR/NAMESPACE_POD.log`` as always).

Per Deployment (one reconcile per Deployment key, level-triggered from Deployment, Pod, Service
and EndpointSlice watches):

* **ReplicaSet controller.** A pod whose ``pod-template-hash`` label no longer matches the
  template, or that belongs to an older Deployment of the same name, is deleted; so is a pod
  beyond the desired count. Members: Recreate, at most one pod (a member is 0 or 1; larger
  ``replicas`` are capped at 1 and logged), and a new pod is created only when no pod of the
  Deployment is left, Terminating ones included: two servers of one model never overlap on the
  GPU. Router-proxies: ``spec.replicas`` pods, a new one created while fewer live pods exist
  (Terminating ones not counted). Pods are owned by the Deployment itself (``controller:
  true``), not by a ReplicaSet, and are created bound to the node. While the node is cordoned
  (``spec.unschedulable``: ``kubectl cordon``, a drain's first step) no new pod is created at
  all, where a scheduler would leave it Pending; pods already there keep running.
* **kubelet**, for pods bound to :data:`NODE_NAME` (:mod:`controlplane.standin.runner` steps them).
  First the pod's **volumes** (:mod:`controlplane.standin.volumes`): a hostPath ``/P`` is the
  folder ``host_root/P`` of the node's disk (:attr:`NodeSettings.host_root`, ``LOG_DIR/hostpath``;
  created for ``DirectoryOrCreate``, and a ``type: File`` that is missing keeps the pod from
  starting), a ``persistentVolumeClaim`` CLAIM is ``LOG_DIR/pvc/NAMESPACE/CLAIM``, an emptyDir a
  folder of the pod; any container argument under a volume's mount path is rewritten to the
  volume's folder (the server's ``--model``, the fetcher's ``--dest``, the KV cache's
  ``--slot-save-path``; a ``--slot-save-path`` under no volume is a scratch folder of the pod, gone
  with it). Then the **init containers**, one at a time in order, each a project subcommand
  (``fetch-model``: :mod:`controlplane.standin.entrypoints`) run to its end; a failing one is
  restarted with a crash-loop back-off (:mod:`controlplane.standin.containers`) and the server
  waits; ``initContainerStatuses`` and the ``Initialized`` condition say where the pod is (Pending,
  not Ready). Each container's **environment** is resolved as a kubelet does (``value``, Secret and
  ConfigMap keys, ``envFrom``, field refs, ``$(VAR)``: :mod:`controlplane.standin.containerenv`).
  Then the **server**: its simulator is started with the served name (``--alias``), slots
  (``--parallel``) and context (``--ctx-size``) read from the container's llama-server arguments;
  its status (via the status subresource) turns Running, with ``podIP`` 127.0.0.1, once the
  simulator listens, and Ready once its ``/health`` answers 200. A member whose ``--model`` lies
  under a volume and is not there "exits 1" at once with llama-server's message in its log, as
  llama-server does, and is restarted with back-off (``restartCount`` grows, ``CrashLoopBackOff``):
  a pod started before its weights are there visibly crashes. The model load takes
  :attr:`NodeSettings.load_seconds`, unless the arguments carry ``--sim-load-seconds N``
  (:data:`LOAD_SECONDS_ARG`): an InferenceService's ``spec.args`` can give one member a slow load
  (a stand-in flag only; a real llama-server would refuse it). The simulator's environment names
  its pod and member (``MODELPOOL_POD``, ``MODELPOOL_MEMBER``, see
  :func:`controlplane.standin.process.identity_env`), so a test can tell from ``/proc`` alone which
  member's server is running. **Readiness gates** are honoured as a kubelet does: the pod is Ready
  only when its container is ready *and* every ``spec.readinessGates`` condition is True (otherwise
  Ready is False with reason ``ReadinessGatesNotReady``), and conditions the kubelet does not own
  are kept as they are on every status write. ``--sim-slot-restore-seconds N``
  (:data:`RESTORE_DELAY_ARG`) makes the simulator's slot restores hang N seconds first. A server
  that dies is restarted (the first time at once, then with back-off). Deleting a pod bound to a
  node only marks it (``deletionTimestamp``: it is Terminating); the stand-in then sends SIGTERM,
  waits for the processes to exit, and only then deletes the pod with ``gracePeriodSeconds: 0``. So
  Terminating pods really exist for as long as the server takes to stop, as on a real node. The
  wait is bounded by the pod's grace period, as a kubelet's (``deletionGracePeriodSeconds``, else
  ``terminationGracePeriodSeconds``: :mod:`controlplane.standin.stopgrace`), then SIGKILL; and it
  runs in a task of its own, not in the Deployment's reconcile, so a router-proxy relaying a
  stream for minutes holds up neither its replacement nor any other pod (a member's replacement
  still waits for the pod to be gone: Recreate).
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

A ready server is re-checked every :attr:`NodeSettings.resync_seconds` (the kubelet's sync
loop); a starting one, a crash-looping one, and a pod whose init containers (or Job containers)
run, every :attr:`NodeSettings.starting_poll_seconds`. Every process is a child that dies with the
stand-in (``PR_SET_PDEATHSIG``), and a stand-in started later takes over the pods it finds bound
to the node (their containers are reported lost and ``restartPolicy`` decides, as a kubelet
reports containers that vanished). SIGTERM stops them all cleanly and, by default, deletes the
pods they backed (the node leaves and takes its pods along; a Job's are reported Failed first),
so namespaces of finished tests can be deleted. The Node object stays.

The stand-in is a development tool run as the cluster admin: its permissions are not part of the
operator's RBAC.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
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
from controlplane.runtime.objects import Object, node_leaving
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, NODES, PODS, SERVICES
from controlplane.runtime.tls import default_tls_context
from controlplane.standin.builders import (
    MANAGED_SELECTOR,
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
    is_pod_ready,
    is_terminating,
    loopback_name,
    max_replicas,
    model_source,
    new_pod,
    pod_role,
    pod_status_summary,
    selects,
    template_hash,
)
from controlplane.standin.containerenv import EnvError, expand_args
from controlplane.standin.entrypoints import missing_model
from controlplane.standin.forwarder import ServiceForwarder
from controlplane.standin.jobs import JobPods
from controlplane.standin.kubeletapi import KubeletApi, LogTarget, UnknownContainer
from controlplane.standin.logfiles import container_log_path, container_names
from controlplane.standin.node import keep_registering
from controlplane.standin.process import ExitedProcess, PodProcess
from controlplane.standin.runner import CONFIG_ERROR, PodContainers
from controlplane.standin.servers import ServerLauncher
from controlplane.standin.settings import NodeSettings
from controlplane.standin.stopgrace import grace_seconds

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sim-node"
FIELD_MANAGER: Final = "modelpool-sim-node"
HEALTH_TIMEOUT_SECONDS: Final = 1.0
#: How long a graceful exit may spend stopping processes and deleting their pods.
EXIT_CLEANUP_SECONDS: Final = 15.0
#: What the stand-in logs when a router Service gets its local address (``make dev`` relays it).
ROUTER_ADDRESS_LOG: Final = "router %s/%s answers at %s"


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
        #: The node: while it is cordoned no new pod is placed on it (the scheduler's part).
        self.nodes: Informer = manager.informer(NODES)
        controller.watches(self.nodes, self._node_to_deployments)
        manager.add(self)
        #: The pods of other owners (a Job's): a controller of their own, on the same informer.
        self.jobs = JobPods(manager, settings, self.pods)
        self.kubelet = KubeletApi(self._locate, settings.log_dir / "kubelet")
        self.servers = ServerLauncher(settings, self.client, self.config)
        self._runs: dict[str, PodContainers] = {}  # by pod uid
        #: Terminating pods whose processes are being stopped, by uid (:meth:`_finish_soon`).
        self._finishing: dict[str, tuple[Mapping[str, Any], PodContainers | None]] = {}
        self._pod_keys: dict[str, tuple[str, str]] = {}  # pod uid -> (namespace, name)
        self._applied_slices: dict[str, bytes] = {}
        self._forwarders: dict[str, ServiceForwarder] = {}  # by Service key
        self._group: TaskGroup | None = None
        self._http = httpx.AsyncClient(timeout=HEALTH_TIMEOUT_SECONDS, verify=default_tls_context())

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

    def _node_to_deployments(self, node: Object) -> Iterable[Request]:
        if node["metadata"]["name"] != NODE_NAME:
            return []
        return [Request(d["metadata"]["namespace"], d["metadata"]["name"])
                for d in self.deployments.store.objects()]  # fmt: skip

    # -- reconcile -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        pods = self._pods_of(request)
        for pod in pods:
            if is_terminating(pod):
                self._finish_soon(pod)  # the kubelet's part of a deletion
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
        if node_leaving(self.nodes.store.get(NODE_NAME)):
            if desired > len(live):
                log.info("%s: no new pod: node %s is cordoned", key, NODE_NAME)
        elif role.one_gpu:
            if desired and not live and not pods:  # Recreate: nothing of the old one is left
                live = [await self._create_pod(deployment, hash_)]
        else:
            while len(live) < desired:
                live.append(await self._create_pod(deployment, hash_))

        requeue: float | None = None
        backends: list[Backend] = []
        for index, pod in enumerate(live):
            live[index], ready = await self._run_pod(pod, role)
            if (process := self._server_process(pod)) is not None:
                address = loopback_name(live[index])
                backends.append(Backend(live[index], address, process.port, ready))
            delay = self.settings.resync_seconds if ready else self.settings.starting_poll_seconds
            requeue = delay if requeue is None else min(requeue, delay)

        await self._write_deployment_status(deployment, live, hash_, cap)
        await self._sync_slices(deployment, backends, role)
        # Stopped once its endpoint is out of the slice (clients stop picking it first, as a
        # preStop hook ensures on a node), and at once: not on the next pass that the pod's
        # watch event would queue.
        for pod in marked:
            self._finish_soon(pod)
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

    def _server_process(self, pod: Mapping[str, Any]) -> PodProcess | None:
        run = self._runs.get(pod["metadata"]["uid"])
        server = run.containers[0] if run is not None and run.containers else None
        return server.process if server is not None else None

    async def _run_pod(self, pod: Object, role: PodRole) -> tuple[Object, bool]:
        """Run the pod's init containers, then its server; report its status. Returns the pod
        and readiness."""
        meta = pod["metadata"]
        uid = meta["uid"]
        run = self._runs.get(uid)
        if run is None:
            run = self._runs[uid] = PodContainers(pod, self.settings, self.client)
            self._pod_keys[uid] = (meta["namespace"], meta["name"])
            if lost := run.adopt(pod):  # a stand-in that is gone ran it: its processes went too
                log.warning("%s/%s: %s not running; restarting", *_key(meta), ", ".join(lost))
        server = run.containers[0]
        if await run.step_init(pod):
            spec = ((pod.get("spec") or {}).get("containers") or [{}])[0]
            if run.reap(pod, spec, server, init=False):
                log.warning("%s/%s: %s not running; restarting", *_key(meta), role.value)
            if server.may_start(time.monotonic()):
                await self._start_server(pod, role, run, spec)
        process = server.process
        healthy = process is not None and process.running() and await self._healthy(process)
        server.mark_ready(healthy)
        status = run.status(pod, LOOPBACK)
        status["containerStatuses"] = _mirrored(status["containerStatuses"])
        if pod_status_summary(status) != pod_status_summary(pod.get("status") or {}):
            try:
                pod = await self.client.update_status(PODS, {**pod, "status": status})
            except Conflict:
                return pod, False  # a newer pod is in the cache; the watch brings it back here
        # Ready as the endpoint controller reads it: the pod's condition, readiness gates included.
        return pod, is_pod_ready({"status": status})

    async def _start_server(
        self, pod: Object, role: PodRole, run: PodContainers, spec: Mapping[str, Any]
    ) -> None:
        """Start the server container with its environment and volumes; a member whose model
        should be under a volume and is not there crashes as llama-server does."""
        server = run.containers[0]
        try:
            env = await run.env(pod, spec)
        except EnvError as err:
            server.wait(CONFIG_ERROR, str(err))
            return
        container = {**spec, "args": expand_args(spec.get("args") or (), env)}
        mounts = run.mounts(pod, container)
        if role is PodRole.MEMBER:
            crash = missing_model(model_source(container), mounts)
            if crash is not None:
                log_path = container_log_path(self.settings.log_dir, pod, server.name)
                process: PodProcess = ExitedProcess(log_path, crash)
                await process.start()
                server.begin(process)
                run.reap(pod, spec, server, init=False)
                log.warning("%s/%s: the model %s is missing: exited 1", *_key(pod["metadata"]),
                            model_source(container))  # fmt: skip
                return
            process = await self.servers.member(pod, container, mounts, env)
        elif role is PodRole.SLOT_SERVER:
            process = await self.servers.slot_server(pod, container, mounts, env)
        else:
            process = await self.servers.proxy(pod, container, mounts, env)
        server.begin(process)

    def _locate(self, namespace: str, name: str, container: str) -> LogTarget:
        """A container's log, for the kubelet API (a pod of this stand-in's, or a Job's)."""
        pod = self.pods.store.get(f"{namespace}/{name}")
        if pod is None or (pod.get("spec") or {}).get("nodeName") != NODE_NAME:
            raise UnknownContainer(f'pod "{name}" not found on node {NODE_NAME}')
        if container not in container_names(pod):
            raise UnknownContainer(f'container "{container}" not found in pod "{name}"')
        uid = pod["metadata"]["uid"]

        def running() -> bool:
            run = self._runs.get(uid) or self.jobs.run_of(uid)
            found = run.container(container) if run is not None else None
            return found is not None and found.running

        return LogTarget(container_log_path(self.settings.log_dir, pod, container), running)

    async def _healthy(self, process: PodProcess) -> bool:
        try:
            response = await self._http.get(f"{process.url}{process.health_path}")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _finish_soon(self, pod: Mapping[str, Any]) -> None:
        """A Terminating pod: its processes leave the pods run here at once (no status, no
        endpoint, no restart), and :meth:`_finish_pod` stops them in a task of its own, once per
        pod; until the runnable has started, the task waits for it."""
        uid = pod["metadata"]["uid"]
        if uid in self._finishing:
            return
        self._finishing[uid] = (pod, self._runs.pop(uid, None))
        self._pod_keys.pop(uid, None)
        if self._group is not None:
            self._group.start_soon(self._finish_pod, uid)

    async def _finish_pod(self, uid: str) -> None:
        """Stop the Terminating pod's processes (SIGTERM, wait up to its grace period, SIGKILL),
        then remove the pod."""
        pod, run = self._finishing[uid]
        meta = pod["metadata"]
        try:
            if run is not None:
                grace = grace_seconds(pod)
                deadline = time.monotonic() + grace
                code = await _stop_server(run, grace)
                await run.stop(pod, max(0.0, deadline - time.monotonic()))
                log.info("pod %s/%s: process exited with %s (grace period %g s)",
                         meta["namespace"], meta["name"], code, grace)  # fmt: skip
            await self._force_delete(meta["namespace"], meta["name"], uid)
        except Exception as err:  # the pod stays Terminating: its next reconcile tries again
            log.warning("pod %s/%s: finishing failed: %s", meta["namespace"], meta["name"], err)
        # Not on cancellation (the stand-in leaving): stop_all stops what is left.
        del self._finishing[uid]

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
                for uid in list(self._finishing):  # marked before the runnable started
                    group.start_soon(self._finish_pod, uid)
                await group.start(self.kubelet.serve)
                await keep_registering(self.client, self.kubelet.port)
                log.info("node %s registered; its kubelet API on https://%s:%d", NODE_NAME,
                         LOOPBACK, self.kubelet.port)  # fmt: skip
                await anyio.sleep_forever()
        finally:
            self._group = None
            with anyio.CancelScope(shield=True), anyio.move_on_after(EXIT_CLEANUP_SECONDS):
                await self.stop_all()

    async def stop_all(self) -> None:
        """SIGTERM every process and wait for them; delete their pods if configured."""
        runs, self._runs = self._runs, {}
        keys, self._pod_keys = self._pod_keys, {}
        finishing, self._finishing = self._finishing, {}
        for uid, (pod, _) in finishing.items():
            keys[uid] = _key(pod["metadata"])
        async with anyio.create_task_group() as group:
            for run in [*runs.values(), *(run for _, run in finishing.values() if run)]:
                for process in list(run.processes()):
                    group.start_soon(process.stop)
        log.info("stopped the processes of %d pod(s)", len(runs))
        await self.jobs.stop_all()
        if self.settings.delete_pods_on_exit:
            for uid, (namespace, name) in keys.items():
                try:
                    await self._force_delete(namespace, name, uid)
                except Exception as err:  # best effort on the way out
                    log.warning("could not delete pod %s/%s: %s", namespace, name, err)
        await self._http.aclose()


def _key(meta: Mapping[str, Any]) -> tuple[str, str]:
    return (meta["namespace"], meta["name"])


def _mirrored(statuses: list[Object]) -> list[Object]:
    """Only a pod's first container is played: any other reports the same state as it."""
    if len(statuses) < 2:
        return statuses
    first = statuses[0]
    return [first, *({**first, "name": s["name"], "image": s.get("image", "")}
                     for s in statuses[1:])]  # fmt: skip


async def _stop_server(run: PodContainers, grace: float) -> int | None:
    """SIGTERM the server first (the rest of the pod follows), SIGKILL after ``grace``; its exit
    code."""
    server = run.containers[0] if run.containers else None
    if server is None or server.process is None:
        return None
    return await server.process.stop(grace)


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
