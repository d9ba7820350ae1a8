"""One control-plane process: started with its log kept, stopped without leaving anything behind.

Each child is asked by the kernel to die with its parent (``PR_SET_PDEATHSIG``), so even a test run
killed with SIGKILL leaves no etcd or kube-apiserver listening. A normal stop sends SIGTERM to the
child's process group and escalates to SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from controlplane.envtest.errors import EnvtestError, PortInUseError, ProcessFailedError

#: How long a process gets between SIGTERM and SIGKILL.
STOP_GRACE_SECONDS = 10.0
#: How much of a log is quoted in an error.
LOG_TAIL_LINES = 40

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: exit when the parent does."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()


def ensure_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Raise :class:`PortInUseError` naming ``port`` when something already listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as err:
            raise PortInUseError(f"port {host}:{port} is already in use ({err.strerror})") from err


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, or a note that there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess:
    """A named child process whose stdout and stderr go to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        #: Added to the parent's environment.
        self.env = dict(env or {})
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env} if self.env else None,
                preexec_fn=_die_with_parent,
            )

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def failure(self, what: str) -> EnvtestError:
        """An error for this process that quotes the end of its log."""
        log = tail(self.log_path)
        if "address already in use" in log:
            return PortInUseError(f"{self.name}: {what}: a port is already in use\n{log}")
        return ProcessFailedError(f"{self.name}: {what}; log {self.log_path}:\n{log}")

    def wait_until(self, healthy: Callable[[], bool], timeout: float) -> float:
        """Poll ``healthy`` until it holds and return the seconds it took; fail fast on exit."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if not self.running():
                code = self._popen.returncode if self._popen else None
                raise self.failure(f"exited with code {code} before becoming healthy")
            if healthy():
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise self.failure(f"not healthy after {timeout:.0f} s")
            time.sleep(0.05)

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the process (used by chaos tests: SIGSTOP and SIGCONT)."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.send_signal(signum)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM the process group, then SIGKILL it after ``grace`` seconds. Idempotent."""
        popen = self._popen
        if popen is None or popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
