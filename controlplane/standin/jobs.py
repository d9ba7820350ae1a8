"""The scheduler and kubelet for the operator's pods the stand-in does not create: a Job's.

kube-controller-manager's ``job-controller`` creates a Job's pods with no ``nodeName`` (and its
``batch.kubernetes.io/job-tracking`` finalizer, which it removes itself once it has counted the
pod). The stand-in plays the rest, for pods labelled
``app.kubernetes.io/managed-by=modelpool-operator`` that no Deployment owns (one reconcile per
pod):

* **scheduler.** A pending pod whose ``schedulerName`` is the default one is bound to
  :data:`~controlplane.standin.builders.NODE_NAME` through the ``pods/binding`` subresource if
  its ``nodeSelector`` and required node affinity fit the node's labels
  (:func:`~controlplane.standin.node.node_fits`); otherwise it stays Pending with
  ``PodScheduled`` False, reason ``Unschedulable``, as the scheduler reports it.
* **kubelet.** A pod bound to the node runs its init containers, then its containers, each as a
  local process to its end (:class:`~controlplane.standin.runner.PodContainers`), restarted or
  not by ``restartPolicy``; the pod turns ``Succeeded`` (every container exited 0) or ``Failed``,
  with each container's ``state.terminated`` (``exitCode``, ``reason`` ``Completed`` or
  ``Error``, ``message``: its termination message, see :mod:`controlplane.standin.termination`).
  A pod a previous stand-in had started (its processes died with it) is found with containers it
  cannot locate: they end with exit code 137, reason ``ContainerStatusUnknown``, as a kubelet
  reports containers that vanished, and ``restartPolicy`` decides.
* **deletion.** A Terminating pod's processes get SIGTERM (and are waited for); its status is
  written terminal, as a kubelet does before the pod goes; then it is deleted with
  ``gracePeriodSeconds: 0`` (the job-controller's finalizer, still there, lets it go when it has
  counted the pod).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import LOOPBACK
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import PODS
from controlplane.standin.builders import NODE_NAME, controller_of, is_terminating
from controlplane.standin.node import UNSCHEDULABLE, node_fits
from controlplane.standin.podstatus import is_terminal, pod_status_summary, unschedulable_status
from controlplane.standin.runner import PodContainers
from controlplane.standin.settings import NodeSettings
from controlplane.standin.stopgrace import grace_seconds

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sim-node-pods"
DEFAULT_SCHEDULER: Final = "default-scheduler"


def played_here(pod: Mapping[str, Any]) -> bool:
    """The pods this module plays: not owned by a Deployment (the stand-in's own pods)."""
    return (controller_of(pod) or {}).get("kind") != "Deployment"


class _NotADeploymentsPod:
    """Passes the events of :func:`played_here` pods only."""

    def create(self, obj: Object) -> bool:
        return played_here(obj)

    def update(self, old: Object, new: Object) -> bool:
        return played_here(new)

    def delete(self, obj: Object) -> bool:
        return played_here(obj)


class JobPods:
    """The reconciler of the stand-in's second controller: one request per pod."""

    def __init__(self, manager: Manager, settings: NodeSettings, pods: Informer) -> None:
        self.settings = settings
        self.client: KubeClient = manager.client
        self.pods = pods
        controller = manager.new_controller(CONTROLLER_NAME, self, max_concurrent_reconciles=4)
        controller.needs_leader_election = False
        controller.for_(pods, _NotADeploymentsPod())
        self._runs: dict[str, PodContainers] = {}  # by pod uid
        self._keys: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self._deleted: set[str] = set()  # uids deleted with grace 0 already

    def run_of(self, uid: str) -> PodContainers | None:
        return self._runs.get(uid)

    async def reconcile(self, request: Request) -> Result:
        pod = self.pods.store.get(str(request))
        if pod is None:
            for uid, key in list(self._keys.items()):  # gone without a Terminating stage
                if key == (request.namespace, request.name):
                    await self._forget(uid, None)
            return Result()
        if not played_here(pod):
            return Result()
        if is_terminating(pod):
            await self._finish(pod)
            return Result()
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            await self._schedule(pod)
            return Result()
        if node != NODE_NAME:
            return Result()
        return await self._run(pod)

    # -- scheduler -----------------------------------------------------------------------------

    async def _schedule(self, pod: Object) -> None:
        meta = pod["metadata"]
        if (pod.get("spec") or {}).get("schedulerName", DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
            return
        if not node_fits(pod):
            current = {
                c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or ()
            }.get("PodScheduled") or {}
            if (current.get("status"), current.get("reason")) != ("False", "Unschedulable"):
                log.info("pod %s/%s: unschedulable on %s", meta["namespace"], meta["name"],
                         NODE_NAME)  # fmt: skip
                status = unschedulable_status(pod, UNSCHEDULABLE)
                await self._write_status(pod, status)
            return  # the node's labels never change while it runs: nothing to retry
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
        }
        try:
            await self.client.create(PODS, binding, meta["namespace"], subresource="binding")
        except (Conflict, NotFound):
            return  # bound already, or gone: the watch brings what happened
        log.info("pod %s/%s: bound to %s", meta["namespace"], meta["name"], NODE_NAME)

    # -- kubelet -------------------------------------------------------------------------------

    async def _run(self, pod: Object) -> Result:
        meta = pod["metadata"]
        uid = meta["uid"]
        run = self._runs.get(uid)
        if run is None:
            if is_terminal(pod):
                return Result()  # finished (under this stand-in or an earlier one)
            run = self._runs[uid] = PodContainers(pod, self.settings, self.client)
            self._keys[uid] = (meta["namespace"], meta["name"])
            if lost := run.adopt(pod):
                log.warning("pod %s/%s: containers %s of an earlier node stand-in are gone",
                            meta["namespace"], meta["name"], lost)  # fmt: skip
        if not run.finished:
            await run.step_containers(pod)
        await self._write_status(pod, run.status(pod, LOOPBACK))
        if run.finished:
            return Result()
        return Result(requeue_after=self.settings.starting_poll_seconds)

    async def _write_status(self, pod: Object, status: Object, *, last: bool = False) -> None:
        """Write ``status`` if it changes anything; the ``last`` one (the pod goes next, its
        record with it) as a merge patch, which no newer version of the pod can refuse."""
        if pod_status_summary(status) == pod_status_summary(pod.get("status") or {}):
            return
        meta = pod["metadata"]
        try:
            if last:
                await self.client.patch(
                    PODS, meta["name"], {"status": status}, meta["namespace"], subresource="status"
                )
            else:
                await self.client.update_status(PODS, {**pod, "status": status})
        except (Conflict, NotFound):
            return  # a newer pod is in the cache; its watch event brings it back here

    # -- deletion ------------------------------------------------------------------------------

    async def _finish(self, pod: Object) -> None:
        """A Terminating pod: stop its processes, report it terminal, remove it."""
        if (pod.get("spec") or {}).get("nodeName") != NODE_NAME:
            return
        await self._forget(pod["metadata"]["uid"], pod)
        await self._delete(pod)

    async def _delete(self, pod: Mapping[str, Any]) -> None:
        """Delete with ``gracePeriodSeconds: 0``, once per pod."""
        meta = pod["metadata"]
        if meta["uid"] in self._deleted:
            return
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        path = PODS.path(meta["namespace"], meta["name"])
        try:
            await self.client.request("DELETE", path, body=options)
        except (NotFound, Conflict):
            self._deleted.add(meta["uid"])
            return
        self._deleted.add(meta["uid"])  # a finalizer may keep it a while: asked once is enough
        log.info("pod %s/%s deleted", meta["namespace"], meta["name"])

    async def _forget(self, uid: str, pod: Object | None) -> None:
        """Stop the pod's processes; with ``pod``, write its terminal status."""
        run = self._runs.pop(uid, None)
        self._keys.pop(uid, None)
        if run is None:
            return
        if pod is None:
            for process in list(run.processes()):
                await process.stop()
            return
        await run.stop(pod, grace_seconds(pod))  # a kubelet's bound on a Terminating pod
        if not is_terminal(pod):
            await self._write_status(pod, run.status(pod, LOOPBACK), last=True)

    async def stop_all(self) -> None:
        """The node leaves: stop every process, report the pods terminal, delete them if the
        settings say so (as for the stand-in's own pods)."""
        for uid in list(self._runs):
            namespace, name = self._keys.get(uid, ("", ""))
            pod = self.pods.store.get(f"{namespace}/{name}")
            running = any(True for _ in self._runs[uid].processes())
            try:
                await self._forget(uid, pod)
                if pod is not None and running and self.settings.delete_pods_on_exit:
                    await self._delete(pod)
            except Exception as err:  # best effort on the way out
                log.warning("could not stop pod %s/%s: %s", namespace, name, err)
