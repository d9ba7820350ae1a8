"""A pod's containers on this node: volumes first, init containers in order, then the rest.

What a kubelet's pod worker does, step by step: each :meth:`PodContainers.step_init` /
:meth:`PodContainers.step_containers` looks at the processes, records the ones that ended
(exit code, termination message), restarts what the pod's ``restartPolicy`` restarts once its
back-off is over, and starts what is next. It never waits for a container: the caller steps the
pod again (every :attr:`~controlplane.standin.settings.NodeSettings.starting_poll_seconds`) and
writes the status :meth:`PodContainers.status` gives.

* **Volumes** (:func:`~controlplane.standin.volumes.prepare_volumes`) before any container: a
  ``type: File`` hostPath that is missing keeps every container waiting in ``ContainerCreating``
  with the kubelet's ``FailedMount`` message, tried again on each step; so does a ``secret``
  volume whose Secret is missing (:mod:`~controlplane.standin.secretvolumes`), whose files are
  then rewritten on every step the Secret has changed.
* **Init containers** (``spec.initContainers``) one at a time, in order; the next starts only
  once the one before exited 0. A failing one is restarted with back-off unless the pod's
  ``restartPolicy`` is ``Never``, in which case the pod fails. The regular containers wait in
  ``PodInitializing``.
* **Regular containers** of a pod that runs to completion (a Job's): all at once, each restarted
  or not by ``restartPolicy``. A member's server is not started here: the controller starts it
  (a simulator or llama-server) once :meth:`~PodContainers.step_init` says the pod is
  initialized, and records it in the same :class:`~controlplane.standin.containers.ContainerRun`.

Each container other than a server is a project subcommand
(:func:`~controlplane.standin.entrypoints.subcommand_argv`) with its environment
(:func:`~controlplane.standin.containerenv.read_env`) and its arguments rewritten to the pod's
volumes; a container that cannot be played waits with ``CreateContainerError``, one whose Secret
is missing with ``CreateContainerConfigError``, and both are tried again on each step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from controlplane.runtime.client import KubeClient
from controlplane.runtime.objects import Object
from controlplane.standin.containerenv import EnvError, expand_args, read_env
from controlplane.standin.containers import (
    CREATING,
    INITIALIZING,
    NEVER,
    ContainerRun,
    restarts_after,
)
from controlplane.standin.entrypoints import NotRunnable, subcommand_argv
from controlplane.standin.logfiles import container_log_path
from controlplane.standin.podstatus import assemble_status, now
from controlplane.standin.process import STOP_GRACE_SECONDS, CommandProcess, PodProcess
from controlplane.standin.secretvolumes import MountFailed, sync_secret_volumes
from controlplane.standin.settings import NodeSettings
from controlplane.standin.termination import exit_code, termination_file, termination_message
from controlplane.standin.volumes import (
    Mount,
    Roots,
    container_mounts,
    prepare_volumes,
    rewrite_args,
)

log = logging.getLogger(__name__)

CONFIG_ERROR: Final = "CreateContainerConfigError"
CREATE_ERROR: Final = "CreateContainerError"
#: How a kubelet reports a container it cannot find any more.
LOST_EXIT_CODE: Final = 137
LOST_REASON: Final = "ContainerStatusUnknown"
LOST_MESSAGE: Final = "The container could not be located when the pod was terminated"


class PodContainers:
    """The containers of one pod (by uid) on this node, and what its status says of them."""

    def __init__(self, pod: Mapping[str, Any], settings: NodeSettings, client: KubeClient):
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        self.settings = settings
        self.client = client
        self.namespace = str(meta["namespace"])
        self.name = str(meta["name"])
        self.restart_policy = str(spec.get("restartPolicy") or "Always")
        self.scratch = settings.scratch(self.namespace, self.name)
        self.roots = Roots(settings.host_root, settings.pvc_root, self.scratch)
        self.started_at = now()
        self.volumes_ready = False
        #: Stopped for good (deleted, or the node left): a pod that had not finished has failed.
        self.stopped = False
        self._said: set[str] = set()  # warnings logged once each
        init = spec.get("initContainers") or ()
        self.init = [ContainerRun(str(c["name"]), str(c.get("image", ""))) for c in init]
        self.containers = [
            ContainerRun(str(c["name"]), str(c.get("image", "")))
            for c in spec.get("containers") or ()
        ]
        self._initial_waiting()

    def _initial_waiting(self) -> None:
        """Nothing started: the first init container (or every container) is being created,
        the rest wait for the pod to be initialized."""
        first = self.init[:1] if self.init else self.containers
        for run in first:
            run.wait(CREATING)
        for run in [*self.init[1:], *(self.containers if self.init else ())]:
            run.wait(INITIALIZING)

    def adopt(self, pod: Mapping[str, Any]) -> list[str]:
        """Take over from the status an earlier stand-in wrote: restart counts, init containers
        that succeeded (not run again), and containers it reported running, whose processes died
        with it: they end with exit code 137, reason ``ContainerStatusUnknown``, as a kubelet
        reports containers that vanished, and ``restartPolicy`` decides. Returns those."""
        status = pod.get("status") or {}
        reported = {
            str(s.get("name")): s
            for s in [*(status.get("initContainerStatuses") or ()),
                      *(status.get("containerStatuses") or ())]
        }  # fmt: skip
        lost: list[str] = []
        for run in [*self.init, *self.containers]:
            found = reported.get(run.name)
            if found is None:
                continue
            init = run in self.init
            run.restarts = int(found.get("restartCount") or 0)
            state = found.get("state") or {}
            if init and (state.get("terminated") or {}).get("exitCode") == 0:
                run.ended = dict(state["terminated"])
            elif "running" in state:
                lost.append(run.name)
                run.started_at = str((state["running"] or {}).get("startedAt") or "")
                run.container_id = str(found.get("containerID") or "")
                restart = restarts_after(self.restart_policy, LOST_EXIT_CODE, init=init)
                run.end(LOST_EXIT_CODE, LOST_MESSAGE, restart=restart, clock=0.0, base=0, cap=0)
                if run.ended is not None:
                    run.ended["reason"] = LOST_REASON
        return lost

    # -- what a container sees -----------------------------------------------------------------

    def mounts(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[Mount]:
        return container_mounts(pod, container, self.roots)

    def log_path(self, pod: Mapping[str, Any], container: str) -> Path:
        return container_log_path(self.settings.log_dir, pod, container)

    async def env(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
        """The container's variables; raises :class:`EnvError` (the run waits, see above)."""
        return await read_env(self.client, pod, container)

    # -- steps ---------------------------------------------------------------------------------

    async def prepare(self, pod: Mapping[str, Any]) -> bool:
        """The pod's volumes, made or checked; False (every container waiting) until they are.
        Once they are, its Secret volumes are brought up to date (a Secret that cannot be read
        then leaves them as they were)."""
        if self.volumes_ready:
            try:
                await sync_secret_volumes(self.client, pod, self.roots)
            except MountFailed as err:
                self._say(f"{err} (the files stay as they were)")
            return True
        problem = prepare_volumes(pod, self.roots)
        if problem is None:
            try:
                await sync_secret_volumes(self.client, pod, self.roots)
            except MountFailed as err:
                problem = str(err)
        if problem is not None:
            self._say(problem)
            for run in [*self.init, *self.containers]:
                if run.process is None and run.ended is None:
                    run.wait(CREATING, problem)
            return False
        self.volumes_ready = True
        self._initial_waiting()
        return True

    async def step_init(self, pod: Mapping[str, Any]) -> bool:
        """Advance the init containers; True once all have succeeded."""
        if not await self.prepare(pod):
            return False
        specs = (pod.get("spec") or {}).get("initContainers") or ()
        for spec, run in zip(specs, self.init, strict=True):
            if run.succeeded:
                continue
            if run.done:  # failed under restartPolicy Never: the pod has failed
                return False
            await self._step(pod, spec, run, init=True)
            if not run.succeeded:
                return False
        return True

    async def step_containers(self, pod: Mapping[str, Any]) -> None:
        """Advance the regular containers of a pod that runs them all here (a Job's)."""
        if not await self.step_init(pod):
            return
        specs = (pod.get("spec") or {}).get("containers") or ()
        for spec, run in zip(specs, self.containers, strict=True):
            await self._step(pod, spec, run, init=False)

    def reap(
        self, pod: Mapping[str, Any], spec: Mapping[str, Any], run: ContainerRun, *, init: bool
    ) -> bool:
        """Record the end of ``run``'s process if it has ended; True if it did."""
        process = run.process
        if process is None or process.running():
            return False
        code = exit_code(process.returncode or 0)
        message = termination_message(
            spec, code, termination_file(self.scratch, run.name), self.log_path(pod, run.name)
        )
        restart = restarts_after(self.restart_policy, code, init=init)
        run.end(
            code,
            message,
            restart=restart,
            clock=time.monotonic(),
            base=self.settings.backoff_seconds,
            cap=self.settings.max_backoff_seconds,
        )
        what = "restarting" if restart else "not restarted"
        log.info("pod %s/%s: container %s exited with %d (%s)", self.namespace, self.name,
                 run.name, code, what)  # fmt: skip
        return True

    async def _step(
        self, pod: Mapping[str, Any], spec: Mapping[str, Any], run: ContainerRun, *, init: bool
    ) -> None:
        self.reap(pod, spec, run, init=init)
        if run.may_start(time.monotonic()):
            await self._start(pod, spec, run)

    async def _start(
        self, pod: Mapping[str, Any], spec: Mapping[str, Any], run: ContainerRun
    ) -> None:
        try:
            env = await self.env(pod, spec)
        except EnvError as err:
            run.wait(CONFIG_ERROR, str(err))
            self._say(f"container {run.name}: {err}")
            return
        args = rewrite_args(expand_args(spec.get("args") or (), env), self.mounts(pod, spec))
        message_file = termination_file(self.scratch, run.name)
        try:
            argv = subcommand_argv(spec, args, message_file)
        except NotRunnable as err:
            run.wait(CREATE_ERROR, str(err))
            self._say(str(err))
            return
        message_file.parent.mkdir(parents=True, exist_ok=True)
        message_file.write_bytes(b"")  # each instance starts with an empty message
        process = CommandProcess(argv, self.log_path(pod, run.name), env=env)
        await process.start()
        run.begin(process)
        log.info("pod %s/%s: container %s started: %s", self.namespace, self.name, run.name,
                 " ".join(argv[3:]))  # fmt: skip

    def _say(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            log.warning("pod %s/%s: %s", self.namespace, self.name, text)

    # -- what it reports -----------------------------------------------------------------------

    def phase(self) -> str:
        """The pod's phase, as a kubelet computes it from its containers."""
        phase = self._phase()
        return "Failed" if self.stopped and phase not in ("Succeeded", "Failed") else phase

    def _phase(self) -> str:
        if any(run.done and not run.succeeded for run in self.init):
            return "Failed"
        if not all(run.succeeded for run in self.init):
            return "Pending"
        if self.containers and all(run.done for run in self.containers):
            return "Succeeded" if all(run.succeeded for run in self.containers) else "Failed"
        if any(run.process is not None or run.ended is not None for run in self.containers):
            return "Running"
        return "Pending"

    @property
    def finished(self) -> bool:
        return self.phase() in ("Succeeded", "Failed")

    def status(self, pod: Mapping[str, Any], ip: str) -> Object:
        return assemble_status(
            pod,
            phase=self.phase(),
            ip=ip,
            started_at=self.started_at,
            init_statuses=[run.status(self.name) for run in self.init],
            container_statuses=[run.status(self.name) for run in self.containers],
        )

    def container(self, name: str) -> ContainerRun | None:
        return next((run for run in [*self.init, *self.containers] if run.name == name), None)

    def processes(self) -> Iterator[PodProcess]:
        """The processes still running."""
        for run in [*self.init, *self.containers]:
            if run.process is not None:
                yield run.process

    async def stop(self, pod: Mapping[str, Any], grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM every process and wait, all within ``grace`` seconds, then SIGKILL what is
        left (a deletion: the pod's grace period, :mod:`~controlplane.standin.stopgrace`; or the
        node leaving); record their ends, none restarted."""
        self.stopped = True
        deadline = time.monotonic() + grace
        spec = pod.get("spec") or {}
        pairs = [
            *zip(spec.get("initContainers") or (), self.init, strict=False),
            *zip(spec.get("containers") or (), self.containers, strict=False),
        ]
        for container, run in pairs:
            if run.process is None:
                continue
            await run.process.stop(max(0.0, deadline - time.monotonic()))
            code = exit_code(run.process.returncode or 0)
            message = termination_message(
                container, code, termination_file(self.scratch, run.name),
                self.log_path(pod, run.name),
            )  # fmt: skip
            run.end(code, message, restart=False, clock=time.monotonic(), base=0, cap=0)

    @property
    def never_restarts(self) -> bool:
        return self.restart_policy == NEVER
