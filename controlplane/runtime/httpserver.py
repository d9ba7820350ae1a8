"""An embedded ASGI server (uvicorn) that lives inside a task group and stops when cancelled.

uvicorn normally owns the process: it installs signal handlers and runs its own loop. Embedded
in the manager (health, readiness, metrics) or the router-proxy, the process owns the signals, so
this wrapper disables uvicorn's and turns cancellation into uvicorn's graceful shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus

#: How long in-flight requests get to finish when the server is stopped.
GRACEFUL_SHUTDOWN_SECONDS = 5
#: How often uvicorn's once-a-second housekeeping (the ``date`` header) runs: its own tick.
TICK_SECONDS = 0.1
#: How often a stopping server looks for its last connections and tasks to be gone.
DRAIN_POLL_SECONDS = 0.005


class _EmbeddedServer(uvicorn.Server):
    """uvicorn's server, stopped by :meth:`request_exit` at once rather than on its next tick.

    uvicorn notices ``should_exit`` on a 0.1 s tick, then sleeps 0.1 s after asking connections to
    close and polls for them every 0.1 s: 0.15 to 0.3 s between a stop and the return, even with
    nothing in flight. A node stopping a member waits that long before the pod is gone and the
    next member may start (bench/README.md, "Swaps"). Here the stop wakes the main loop, and the
    drain looks every :data:`DRAIN_POLL_SECONDS`; in-flight responses still get
    :data:`GRACEFUL_SHUTDOWN_SECONDS` to finish, after which their tasks are cancelled.
    """

    _exit_requested: asyncio.Event | None = None
    #: Set by a :class:`StopRequest`: how long the requests in flight get, instead of the config's.
    drain_timeout: float | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the process, not the server, handles SIGTERM and SIGINT

    def request_exit(self) -> None:
        self.should_exit = True
        if self._exit_requested is not None:
            self._exit_requested.set()

    async def main_loop(self) -> None:
        self._exit_requested = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_requested.wait(), TICK_SECONDS)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # idle keep-alive connections close now, busy ones after
        try:
            timeout = self.drain_timeout
            if timeout is None:
                timeout = self.config.timeout_graceful_shutdown
            await asyncio.wait_for(self._drained(), timeout=timeout)
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="graceful shutdown timed out")
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _drained(self) -> None:
        # uvicorn's connection and task sets signal nothing when they empty: polled, finely.
        while self.server_state.connections or self.server_state.tasks:  # noqa: ASYNC110
            await asyncio.sleep(DRAIN_POLL_SECONDS)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; port 0 picks a free one (read it back with ``getsockname``).

    The protocol is named (``IPPROTO_TCP``), not left 0: accepted sockets inherit it, and asyncio
    sets ``TCP_NODELAY`` on a transport only when its socket says TCP. Without it every response
    on a kept-alive connection after the first waited about 40 ms (Nagle's algorithm meeting the
    client's delayed ACK): bench/README.md, "Data path".
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class StopRequest:
    """A graceful stop asked of a running :func:`serve` from outside, with its own bound.

    Cancelling :func:`serve` stops it too, bounded by :data:`GRACEFUL_SHUTDOWN_SECONDS`; a process
    that drains itself (the router-proxy, :mod:`controlplane.router.drain`) knows a longer budget
    only when the stop comes (what is left of its pod's grace period), so it asks through this.
    """

    def __init__(self) -> None:
        self._asked = anyio.Event()
        #: How long the requests in flight get once the stop is asked.
        self.timeout: float = GRACEFUL_SHUTDOWN_SECONDS

    def request(self, timeout: float) -> None:
        """Stop listening now; the requests in flight get ``timeout`` seconds to finish."""
        self.timeout = max(0.0, timeout)
        self._asked.set()

    @property
    def requested(self) -> bool:
        return self._asked.is_set()

    async def wait(self) -> None:
        await self._asked.wait()


async def serve(
    app: Callable[..., Awaitable[None]],
    sockets: list[socket.socket],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    stop: StopRequest | None = None,
    **options: Any,
) -> None:
    """Serve ``app`` on every socket until cancelled, or until ``stop`` is asked (then it returns
    once the requests in flight have finished or had ``stop.timeout``), shutting down gracefully:
    the sockets stop listening at once, idle kept-alive connections close, busy ones after their
    answer."""
    config = uvicorn.Config(
        app,
        lifespan="off",
        interface="asgi3",  # detection misreads bound methods as ASGI2
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        **options,
    )
    server = _EmbeddedServer(config)

    async def run() -> None:
        with anyio.CancelScope(shield=True):  # stopped through should_exit, never mid-request
            await server.serve(sockets=sockets)

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        while True:  # uvicorn offers no event for "listening"; it flips a flag
            if server.started:
                break
            await anyio.sleep(0.01)
        task_status.started()
        try:
            if stop is None:
                await anyio.sleep_forever()
            else:
                await stop.wait()
                server.drain_timeout = stop.timeout
        finally:
            server.request_exit()
