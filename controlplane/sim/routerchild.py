"""One model of the simulator's router mode: a child simulator process, started and stopped.

Why a real process: llama-server's router runs each loaded model as a child ``llama-server`` on a
loopback port of its own, and what the pool controller and the e2e tier's invariant monitor see
(a process per loaded model that appears on load and is gone after unload) must be the same with
the simulator. The child is ``controlplane llama-sim`` in its single-model mode with ``--port 0``:
it prints ``listening on URL`` on stdout once bound (read here), then answers ``/health`` 503
until its model has "loaded", then 200.

The child stays in the router's process group (a ``killpg`` of the router, as the node stand-in
stops a pod, reaches it too) and is killed by the kernel if the router dies without stopping it
(``PR_SET_PDEATHSIG``, set in the child between fork and exec). Its log goes to the router's
stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

import anyio
import httpx

from controlplane.sim.server import LISTENING_PREFIX

_PR_SET_PDEATHSIG: Final = 1
#: How often a loading child's ``/health`` is asked.
HEALTH_POLL_SECONDS: Final = 0.02
#: How long a child may take to stop after SIGTERM before it is killed.
STOP_GRACE_SECONDS: Final = 10.0


def child_argv(name: str, model: Path, passed: Sequence[str]) -> list[str]:
    """The child simulator for model ``name`` (file ``model``), with the router's flags that a
    child takes (``passed``: ``--parallel``, ``--ctx-size``, the ``--sim-*`` timings...), on a
    loopback port of the kernel's choice; it names the model ``--alias NAME``, as llama-server's
    router names its children."""
    return [
        sys.executable, "-m", "controlplane.cli", "llama-sim",
        "--model", str(model), "--alias", name,
        *passed,
        "--host", "127.0.0.1", "--port", "0",
    ]  # fmt: skip


def _die_with_router() -> None:
    """Runs in the child between fork and exec: the kernel kills it when the router dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _read_line(stream: IO[bytes]) -> str:
    return stream.readline().decode(errors="replace")


class ChildServer:
    """A child simulator: spawned at construction (so an unload at once finds it), announced by
    :meth:`announced`, healthy per :meth:`healthy`, stopped by :meth:`stop`."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.url = ""
        # Forked from the event loop's thread: PR_SET_PDEATHSIG fires when the forking *thread*
        # ends, and a pool's worker thread may end long before the router does.
        self._popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=None,
            preexec_fn=_die_with_router,
        )

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def announced(self) -> bool:
        """Wait for the child's ``listening on URL`` line; False if it exited first."""
        stdout = self._popen.stdout
        assert stdout is not None
        line = await anyio.to_thread.run_sync(_read_line, stdout, abandon_on_cancel=True)
        if not line.startswith(LISTENING_PREFIX):
            return False
        self.url = line[len(LISTENING_PREFIX) :].strip()
        return True

    async def healthy(self, client: httpx.AsyncClient) -> bool:
        """Wait until ``/health`` answers 200 (True) or the child exits (False)."""
        while self.returncode is None:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{self.url}/health")).status_code == 200:
                    return True
            await anyio.sleep(HEALTH_POLL_SECONDS)
        return False

    async def wait(self) -> int:
        """The child's exit code, once it has exited."""
        return await anyio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)

    def signal(self, *, kill: bool = False) -> None:
        """SIGTERM (it finishes and exits), or SIGKILL (``kill``: a child still loading, which
        llama-server's router kills outright)."""
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signal.SIGKILL if kill else signal.SIGTERM)

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> int:
        """SIGTERM, up to ``grace`` to exit, then SIGKILL; the exit code."""
        self.signal()
        with anyio.move_on_after(grace):
            return await self.wait()
        self.signal(kill=True)
        return await self.wait()

    def close(self) -> None:
        if self._popen.stdout is not None:
            self._popen.stdout.close()
