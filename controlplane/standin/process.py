"""The node stand-in's pod processes: started, located, stopped, never left behind.

A member pod's container is a simulator (:class:`SimulatorProcess`), or the real llama.cpp
``llama-server`` (:class:`LlamaServerProcess`) when the stand-in was given one and the member's
model is a GGUF file here; a router-proxy pod's is a ``controlplane router-proxy``
(:class:`ProxyProcess`). The last two are told their loopback port on the command line. An init
container or a Job's container that the stand-in can run is a :class:`CommandProcess` (it runs to
its end); a server whose model is missing is an :class:`ExitedProcess` (it "exits 1" at once).

A simulator is ``python -m controlplane.cli sim --port 0 ...``; it binds before loading and prints
``listening on http://HOST:PORT`` on stdout, which is read here to learn the port. Its log
(stderr) goes to a file. The kernel is asked to kill each child when the process that started it
dies (``PR_SET_PDEATHSIG``, as :mod:`controlplane.envtest.process` does for the control plane),
so even a stand-in killed with SIGKILL leaves no simulator listening. A normal stop is SIGTERM
(the simulator finishes in-flight responses and exits 0), escalated to SIGKILL after a grace.

Each member server the node stand-in starts, simulator or real, carries its identity in its
environment:
``MODELPOOL_POD=<namespace>/<pod>`` and ``MODELPOOL_MEMBER=<namespace>/<inferenceservice>``
(:func:`identity_env`). The e2e invariant monitor reads them from ``/proc/<pid>/environ``, so it
can tell which member's server is alive at any instant without asking the stand-in, whose own
view is exactly what is under test.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Final

import anyio

from controlplane.sim.server import LISTENING_PREFIX

#: How long a simulator may take to print where it listens (a Python start-up, imports included).
START_TIMEOUT_SECONDS: Final = 60.0
#: Between SIGTERM and SIGKILL (the simulator's own graceful stop takes at most 5 s).
STOP_GRACE_SECONDS: Final = 10.0
_PR_SET_PDEATHSIG: Final = 1
#: The environment variables naming the pod a simulator plays, and its member (InferenceService).
POD_ENV: Final = "MODELPOOL_POD"
MEMBER_ENV: Final = "MODELPOOL_MEMBER"


def identity_env(namespace: str, pod: str, member: str) -> dict[str, str]:
    """The identity a simulator process carries: ``namespace/pod`` and ``namespace/member``."""
    return {POD_ENV: f"{namespace}/{pod}", MEMBER_ENV: f"{namespace}/{member}"}


#: The first bytes of every GGUF file.
GGUF_MAGIC: Final = b"GGUF"


def is_gguf(path: str) -> bool:
    """Whether ``path`` is a GGUF file on this machine (its first bytes say so)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(GGUF_MAGIC)) == GGUF_MAGIC
    except OSError:
        return False


def die_with_parent() -> None:
    """Runs in the child between fork and exec: exit when the parent does; own process group."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()


class SimulatorStartError(Exception):
    """The simulator exited, or said nothing, before announcing its address."""


def simulator_argv(
    model_name: str,
    *,
    host: str,
    load_seconds: float,
    token_seconds: float,
    slots: int = 1,
    ctx_size: int | None = None,
    slot_save_path: Path | None = None,
    slot_restore_delay: float | None = None,
    metrics: bool = False,
) -> list[str]:
    argv = [
        sys.executable, "-m", "controlplane.cli", "sim", "--host", host, "--port", "0",
        "--model-name", model_name, "--load-seconds", str(load_seconds),
        "--token-seconds", str(token_seconds), "--slots", str(slots),
    ]  # fmt: skip
    if ctx_size is not None:
        argv += ["--ctx-size", str(ctx_size)]
    if slot_save_path is not None:
        argv += ["--slot-save-path", str(slot_save_path)]
    if slot_restore_delay is not None:
        argv += ["--slot-restore-delay", str(slot_restore_delay)]
    if metrics:
        argv.append("--metrics")
    return argv


class PodProcess:
    """A pod's process: started by :meth:`start`, which returns its URL; its readiness is
    ``GET url + health_path`` answering 200."""

    #: What the stand-in polls for readiness (a kubelet's readiness probe).
    health_path = "/health"

    def __init__(
        self, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        #: Added to the parent's environment (the identity of :func:`identity_env`).
        self.env = dict(env or {})
        self.url = ""
        self.port = 0
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    async def start(self, timeout: float = START_TIMEOUT_SECONDS) -> str:
        raise NotImplementedError

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """SIGTERM, wait up to ``grace``, then SIGKILL; returns the exit code. Idempotent."""
        popen = self._popen
        if popen is None:
            return None
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGTERM)
            try:
                await anyio.to_thread.run_sync(popen.wait, grace, abandon_on_cancel=True)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                await anyio.to_thread.run_sync(popen.wait)
        if popen.stdout is not None:
            popen.stdout.close()
        return popen.returncode


class SimulatorProcess(PodProcess):
    """One running simulator; :attr:`url` is known once :meth:`start` returns."""

    async def start(self, timeout: float = START_TIMEOUT_SECONDS) -> str:
        """Start the process and return its URL once it has announced it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # Forked from the event loop's thread on purpose: PR_SET_PDEATHSIG fires when the forking
        # *thread* ends, and a worker thread of a pool may end long before the stand-in does.
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(  # noqa: ASYNC220
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, **self.env} if self.env else None,
                preexec_fn=die_with_parent,
            )
        stdout = self._popen.stdout
        assert stdout is not None
        try:
            with anyio.fail_after(timeout):
                line = await anyio.to_thread.run_sync(_read_line, stdout, abandon_on_cancel=True)
        except TimeoutError:
            await self.stop()
            raise SimulatorStartError(f"no address announced in {timeout:.0f} s") from None
        if not line.startswith(LISTENING_PREFIX):
            await self.stop()
            raise SimulatorStartError(
                f"exited with {self.returncode} before announcing its address (log {self.log_path})"
            )
        self.url = line[len(LISTENING_PREFIX) :].strip()
        self.port = int(self.url.rpartition(":")[2])
        return self.url


class PortProcess(PodProcess):
    """A process told to listen on ``port`` (in its ``argv``): it binds at once and becomes ready
    later; its output (stdout and stderr) goes to the log."""

    #: Added to the environment before the pod's own variables.
    base_env: Mapping[str, str] = {}

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        port: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(argv, log_path, env)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    async def start(self, timeout: float = START_TIMEOUT_SECONDS) -> str:
        """Start the process and return its URL at once (readiness is polled by the caller)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:  # forked from the loop's thread, as above
            self._popen = subprocess.Popen(  # noqa: ASYNC220
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.base_env, **self.env},
                preexec_fn=die_with_parent,
            )
        return self.url


class LlamaServerProcess(PortProcess):
    """The real ``llama-server``. It does not print the port it got, as the simulator does, so
    the stand-in chooses one; it is ready when ``/health`` answers 200 (503 while the model
    loads), and SIGTERM makes it finish and exit, as the simulator does."""


class ProxyProcess(PortProcess):
    """A ``controlplane router-proxy``; it is ready when ``/readyz`` answers 200."""

    health_path = "/readyz"
    base_env: Mapping[str, str] = {"PYTHONUNBUFFERED": "1"}


class CommandProcess(PodProcess):
    """A container that runs to its end (an init container, a Job's): no port, no readiness;
    its output (stdout and stderr) goes to its log, unbuffered so the log is live."""

    async def start(self, timeout: float = START_TIMEOUT_SECONDS) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:  # forked from the loop's thread, as above
            self._popen = subprocess.Popen(  # noqa: ASYNC220
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                preexec_fn=die_with_parent,
            )
        return ""


class ExitedProcess(PodProcess):
    """A server that exits at once with ``code`` after printing ``output`` to its log, as
    llama-server does when its model file is missing: the stand-in plays the crash without
    starting anything."""

    def __init__(self, log_path: Path, output: str, code: int = 1) -> None:
        super().__init__([], log_path)
        self.output = output
        self.code = code

    @property
    def pid(self) -> int | None:
        return None

    def running(self) -> bool:
        return False

    @property
    def returncode(self) -> int | None:
        return self.code

    async def start(self, timeout: float = START_TIMEOUT_SECONDS) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as log:
            log.write(self.output)
        return ""

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        return self.code


def _read_line(stream: IO[bytes]) -> str:
    return stream.readline().decode(errors="replace")
