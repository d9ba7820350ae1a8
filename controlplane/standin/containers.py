"""One container of a pod on this node across its restarts, and the status a kubelet reports.

A :class:`ContainerRun` is the kubelet's record of a container: the instance running now (its
process), how the last one ended (``lastState.terminated``), how many restarts there were, and
when the next start may happen. A container that ended is restarted according to the pod's
``restartPolicy`` (:func:`restarts_after`; init containers never restart after success), with
a kubelet's crash-loop back-off (:func:`backoff_seconds`): the first restart at once, then
``base``, ``2 base``, ``4 base`` ... up to ``cap``, reset once the container has been ready (a
server) or has succeeded (an init container). While it waits, its state is ``waiting`` with
reason ``CrashLoopBackOff``. No I/O here: the processes are started and polled by
:mod:`controlplane.standin.runner` and :mod:`controlplane.standin.controller`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from controlplane.runtime.objects import Object
from controlplane.standin.podstatus import now
from controlplane.standin.process import PodProcess
from controlplane.standin.termination import exit_reason

ALWAYS: Final = "Always"
ON_FAILURE: Final = "OnFailure"
NEVER: Final = "Never"
#: Why a container that never started is waiting, until the stand-in says otherwise.
CREATING: Final = "ContainerCreating"
#: The waiting reason of an init container whose turn has not come (a kubelet's).
INITIALIZING: Final = "PodInitializing"
CRASH_LOOP: Final = "CrashLoopBackOff"


def restarts_after(policy: str | None, code: int, *, init: bool = False) -> bool:
    """Whether a container that exited with ``code`` is started again under ``policy``."""
    policy = policy or ALWAYS
    if init:
        return policy != NEVER and code != 0
    if policy == NEVER:
        return False
    return policy == ALWAYS or code != 0


def backoff_seconds(failures: int, base: float, cap: float) -> float:
    """The wait before the restart that follows the ``failures``-th end in a row."""
    if failures <= 1:
        return 0.0
    return float(min(base * 2 ** (failures - 2), cap))


@dataclass
class ContainerRun:
    """One container's record; its :meth:`status` is its entry in the pod's status."""

    name: str
    image: str = ""
    process: PodProcess | None = None
    #: ``restartCount``.
    restarts: int = 0
    #: When the current (or last) instance started.
    started_at: str = ""
    #: How the last instance ended, while no other has started.
    ended: Object | None = None
    #: How the instance before the current one ended (``lastState.terminated``).
    last_ended: Object | None = None
    #: Why it is not running, while it has not started (reason, message).
    waiting: tuple[str, str] = (CREATING, "")
    #: Whether the instance that ended is to be restarted.
    will_restart: bool = False
    #: Ends in a row since it last was ready or succeeded (the back-off's count).
    failures: int = 0
    #: The monotonic time before which it is not restarted.
    not_before: float = 0.0
    backoff: float = 0.0
    ready: bool = False
    container_id: str = ""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running()

    @property
    def done(self) -> bool:
        """Ended, not to be restarted."""
        return self.ended is not None and not self.will_restart

    @property
    def succeeded(self) -> bool:
        return self.done and (self.ended or {}).get("exitCode") == 0

    def may_start(self, clock: float) -> bool:
        """Not running, not done, and past its back-off."""
        return self.process is None and not self.done and clock >= self.not_before

    def begin(self, process: PodProcess) -> None:
        """A new instance runs ``process`` (already started)."""
        if self.ended is not None:  # a restart
            self.last_ended = self.ended
            self.ended = None
            self.restarts += 1
        self.process = process
        self.started_at = now()
        self.waiting = (CREATING, "")
        self.will_restart = False
        self.ready = False
        self.container_id = f"sim://{process.pid}" if process.pid else f"sim://{self.name}"

    def wait(self, reason: str, message: str = "") -> None:
        """It cannot start now (its back-off is not over, a Secret is missing, ...)."""
        self.waiting = (reason, message)

    def end(
        self, code: int, message: str, *, restart: bool, clock: float, base: float, cap: float
    ) -> None:
        """The running instance ended with ``code``; restart it (after its back-off) or not."""
        ended: Object = {"exitCode": code, "reason": exit_reason(code), "finishedAt": now()}
        if self.started_at:
            ended["startedAt"] = self.started_at
        if self.container_id:
            ended["containerID"] = self.container_id
        if message:
            ended["message"] = message
        self.ended = ended
        self.process = None
        self.ready = False
        self.will_restart = restart
        if restart:
            self.failures += 1
            self.backoff = backoff_seconds(self.failures, base, cap)
            self.not_before = clock + self.backoff
        elif code == 0:
            self.failures = 0

    def mark_ready(self, ready: bool) -> None:
        self.ready = ready
        if ready:
            self.failures = 0

    def state(self, pod_name: str) -> tuple[Object, Object]:
        """``state`` and ``lastState``."""
        if self.process is not None:
            last = {"terminated": self.last_ended} if self.last_ended else {}
            return {"running": {"startedAt": self.started_at}}, last
        if self.ended is not None and self.will_restart and self.backoff > 0:
            message = (
                f"back-off {self.backoff:g}s restarting failed container={self.name} pod={pod_name}"
            )
            return {"waiting": {"reason": CRASH_LOOP, "message": message}}, {
                "terminated": self.ended
            }
        if self.ended is not None:
            last = {"terminated": self.last_ended} if self.last_ended else {}
            return {"terminated": self.ended}, last
        reason, message = self.waiting
        waiting: Object = {"reason": reason}
        if message:
            waiting["message"] = message
        last = {"terminated": self.last_ended} if self.last_ended else {}
        return {"waiting": waiting}, last

    def status(self, pod_name: str) -> Object:
        state, last = self.state(pod_name)
        status: Object = {
            "name": self.name,
            "image": self.image,
            "imageID": f"sim://{self.image}",
            "ready": self.ready and self.process is not None,
            "started": self.process is not None,
            "restartCount": self.restarts,
            "state": state,
            "lastState": last,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status
