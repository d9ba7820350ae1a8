"""A Service's one local address: a round-robin TCP forwarder to its ready endpoints.

Nothing implements Services on the local control plane (there is no kube-proxy), and every
router-proxy pod the stand-in plays listens on a free loopback port of its own, which changes
when the pod is replaced. So a client needs one address that outlives pods: the stand-in keeps
one :class:`ServiceForwarder` per router Service, listening on a loopback port chosen once (the
Service's "ClusterIP" for this machine). Each accepted connection goes to the next ready endpoint
in turn (the endpoints the stand-in writes into the Service's EndpointSlices); bytes are copied
both ways until either side closes, so HTTP, keep-alive and streaming pass unchanged.

A connection arriving while no endpoint is ready waits up to
:data:`NO_ENDPOINT_WAIT_SECONDS` for one, then is closed (a refused connection, as a Service
without endpoints gives).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
from collections.abc import Sequence
from typing import Final

import anyio
from anyio.abc import ByteStream, SocketListener

log = logging.getLogger(__name__)

#: How long a new connection waits for a ready endpoint before it is closed.
NO_ENDPOINT_WAIT_SECONDS: Final = 30.0
CHUNK_BYTES: Final = 65536


class ServiceForwarder:
    """Listens on ``host`` (port chosen by the kernel at construction, see :attr:`url`) and
    forwards each connection to the next of the targets given to :meth:`set_targets`."""

    def __init__(self, name: str, host: str = "127.0.0.1") -> None:
        self.name = name
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, 0))
        self._socket.listen(256)
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        self._targets: tuple[tuple[str, int], ...] = ()
        self._turn = itertools.count()
        self._changed = anyio.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def set_targets(self, targets: Sequence[tuple[str, int]]) -> None:
        """The ready endpoints, as ``(host, port)``; in-flight connections keep theirs."""
        wanted = tuple(targets)
        if wanted != self._targets:
            self._targets = wanted
            self._changed.set()
            self._changed = anyio.Event()

    async def _next_target(self) -> tuple[str, int] | None:
        with anyio.move_on_after(NO_ENDPOINT_WAIT_SECONDS):
            while not self._targets:
                await self._changed.wait()
        if not self._targets:
            return None
        return self._targets[next(self._turn) % len(self._targets)]

    async def serve(self) -> None:
        """Accept and forward until cancelled; the listening socket is closed on the way out."""
        self._socket.setblocking(False)
        async with await SocketListener.from_socket(self._socket) as server:
            await server.serve(self._forward)

    async def _forward(self, client: ByteStream) -> None:
        async with client:
            target = await self._next_target()
            if target is None:
                log.warning("%s: no ready endpoint; connection closed", self.name)
                return
            try:
                upstream = await anyio.connect_tcp(*target)
            except OSError as err:
                log.warning("%s: endpoint %s:%d refused: %s", self.name, *target, err)
                return
            async with upstream, anyio.create_task_group() as group:
                group.start_soon(_copy, client, upstream, group.cancel_scope)
                group.start_soon(_copy, upstream, client, group.cancel_scope)


async def _copy(source: ByteStream, sink: ByteStream, scope: anyio.CancelScope) -> None:
    """Copy until ``source`` ends; then half-close ``sink`` (or end both on an error)."""
    try:
        async for chunk in source:
            await sink.send(chunk)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await sink.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        scope.cancel()
