"""uvicorn's httptools protocol with a response's writes coalesced into one socket write.

uvicorn writes a response's status line and headers, then its body, as two ``transport.write``
calls, and uvloop sends each at once when its buffer is empty: two ``send`` system calls and two
TCP segments for every small answer, on loopback each a pass through the peer's receive path.
On the router-proxy's fast path those writes were the largest single item of its CPU per request
(bench/README.md, "Data path"). :class:`CoalescingTransport` keeps what is written during one
turn of the event loop and sends it with one write at the end of that turn (``call_soon``):
headers and body written back to back leave as one segment, and nothing waits longer than the
turn it was written in (a streamed chunk still leaves as soon as it is written and the writing
task yields).

Everything else goes straight to the real transport. Pending bytes are sent before a close or a
half-close, so nothing written before either is lost or reordered; they are dropped when the
peer has gone (the transport is closing), as the transport itself would drop them. The protocol
class needs httptools (uvicorn's fast parser); :func:`http_protocol` falls back to uvicorn's own
choice without it. Its flow control, pipeline queue and per-request body event are
:mod:`controlplane.runtime.leanconnection`'s, made on first use: a held request kept uvicorn's
for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from controlplane.runtime.leanconnection import LazyEvent, LazyFlowControl, Pipeline

#: uvicorn's name for "pick the protocol yourself" (used when httptools is missing).
UVICORN_AUTO = "auto"


class CoalescingTransport(asyncio.Transport):
    """A transport whose writes within one event-loop turn leave as one write."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if self._transport.is_closing():  # the peer left (or it was aborted): nobody to send to
            return
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._flush()
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()


def http_protocol() -> type[asyncio.Protocol] | str:
    """uvicorn's httptools protocol on a :class:`CoalescingTransport`, for ``uvicorn.Config``'s
    ``http``; :data:`UVICORN_AUTO` when httptools is not installed."""
    try:  # as uvicorn's own "auto" decides: httptools when it imports
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return UVICORN_AUTO

    class CoalescingHttpToolsProtocol(HttpToolsProtocol):
        """httptools' protocol whose responses are written through a coalescing transport, and
        whose per-connection and per-request state is made on first use
        (:mod:`controlplane.runtime.leanconnection`)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(CoalescingTransport(transport))
            self.flow = LazyFlowControl(self.transport)
            self.pipeline = Pipeline()  # type: ignore[assignment]

        def on_headers_complete(self) -> None:
            before = self.cycle
            super().on_headers_complete()
            if self.cycle is not before:  # a new request's cycle: nothing waits on it yet
                self.cycle.message_event = LazyEvent()  # type: ignore[assignment]

    return CoalescingHttpToolsProtocol
