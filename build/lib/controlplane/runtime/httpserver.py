"""An embedded ASGI server (uvicorn) that lives inside a task group and stops when cancelled.

uvicorn normally owns the process: it installs signal handlers and runs its own loop. Embedded
in the manager (health, readiness, metrics) or the router-proxy, the process owns the signals, so
this wrapper disables uvicorn's and turns cancellation into uvicorn's graceful shutdown.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus

#: How long in-flight requests get to finish when the server is stopped.
GRACEFUL_SHUTDOWN_SECONDS = 5


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the process, not the server, handles SIGTERM and SIGINT


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


async def serve(
    app: Callable[..., Awaitable[None]],
    sockets: list[socket.socket],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    **options: Any,
) -> None:
    """Serve ``app`` on every socket until cancelled, then shut down gracefully."""
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
            await anyio.sleep_forever()
        finally:
            server.should_exit = True
