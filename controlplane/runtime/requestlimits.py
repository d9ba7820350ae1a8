"""Limits on how an HTTP request arrives, enforced in the server's protocol (uvicorn has none).

uvicorn's httptools protocol accepts a request head of any size, with any number of header lines,
taking any time to arrive: a single 1 MiB header, 10,000 headers, or a client that sends part of
a head and then one line every few seconds are all kept (its keep-alive timer only runs between
requests, and any byte disarms it). So a few thousand sockets from one misbehaving pod would hold
file descriptors and memory for as long as they like. Envoy refuses beyond 60 KiB or 100 headers
with 431; nginx closes a head not received within 60 s (``client_header_timeout``) with 408.

:func:`guarded_protocol` wraps a protocol class (the coalescing one) so that each request's head
is bounded by :class:`RequestLimits`:

* more than ``max_header_count`` header lines, or more than ``max_head_bytes`` of request target
  plus header names and values: answered **431** and the connection closed;
* a head not complete within ``head_timeout`` seconds of its first byte, or of the connection (a
  connection that never sends a byte counts too): answered **408** when part of a head arrived,
  closed silently when nothing did; and closed either way;
* more than ``max_connections`` open at once: the newest is answered **503** with
  ``Retry-After: 1`` and closed, before it sends anything (the server holds the others);
* a body that stops: no byte of it for ``body_read_timeout`` seconds before it is complete is
  answered **408** and closed (the app waiting for it sees the client gone). The timer is armed
  only while a body is incomplete after a read, so a request whose body came with its head (the
  fast path's) never touches one.

What the answer's body says is the caller's (:data:`Refusal`: the router-proxy gives its
OpenAI-style error), so this module knows nothing of who serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

#: Defaults of the router-proxy's flags (docs/router.md, "Limits").
DEFAULT_MAX_HEADER_COUNT: Final = 100
DEFAULT_MAX_HEAD_BYTES: Final = 64 * 1024
DEFAULT_HEAD_TIMEOUT_SECONDS: Final = 10.0
DEFAULT_BODY_READ_TIMEOUT_SECONDS: Final = 30.0
#: Above the held requests a replica may keep (10,000) with room for the fast path's clients.
DEFAULT_MAX_CONNECTIONS: Final = 16_384

#: ``(status, what was exceeded)`` to the answer's content type and body.
Refusal = Callable[[int, str], tuple[bytes, bytes]]

_REASONS: Final = {
    400: b"Bad Request",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """How large and how slow a request head may be."""

    max_header_count: int = DEFAULT_MAX_HEADER_COUNT
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    head_timeout: float = DEFAULT_HEAD_TIMEOUT_SECONDS
    body_read_timeout: float = DEFAULT_BODY_READ_TIMEOUT_SECONDS
    max_connections: int = DEFAULT_MAX_CONNECTIONS


def plain_refusal(status: int, what: str) -> tuple[bytes, bytes]:
    """A text answer, for callers without an error format of their own."""
    return b"text/plain; charset=utf-8", what.encode()


def refusal_bytes(status: int, content_type: bytes, body: bytes) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection."""
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: " + content_type + b"\r\n",
            b"content-length: %d\r\n" % len(body),
            b"retry-after: 1\r\n" if status == 503 else b"",
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class _Deadline:
    """One timer that is armed again from now, cancelled, or fired (then no longer armed).

    Slotted: every open connection has one (bench/README.md, "Slow clients and held capacity").
    """

    __slots__ = ("_fire", "_handle", "seconds")

    def __init__(self, seconds: float, fire: Callable[[], None]) -> None:
        self.seconds, self._fire = seconds, fire
        self._handle: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def arm(self) -> None:
        self.cancel()
        self._handle = asyncio.get_running_loop().call_later(self.seconds, self._fired)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fired(self) -> None:
        self._handle = None
        self._fire()


def guarded_protocol(
    base: type[Any], limits: RequestLimits, refusal: Refusal = plain_refusal
) -> type[asyncio.Protocol]:
    """``base`` (an httptools protocol of uvicorn's) with each request head bounded."""

    class LimitedProtocol(base):  # type: ignore[misc]
        """Counts a head's lines and bytes as the parser reports them; times it.

        Its own state is in slots, not the instance dict: uvicorn's protocol already keeps 28
        attributes there, and six more pushed every connection's dict past CPython's shared-keys
        size into a dict of its own (1.6 KB per connection, the largest item this layer added
        to a held request; bench/README.md, "Slow clients and held capacity (issue 20)"). The
        body timer is made only for a body that arrives in pieces (the fast path's never does).
        """

        __slots__ = (
            "_body_timer",
            "_head_bytes",
            "_head_lines",
            "_head_started",
            "_head_timer",
            "_in_body",
        )

        def connection_made(self, transport: asyncio.Transport) -> None:
            self._head_lines = 0
            self._head_bytes = 0
            self._head_started = False
            self._head_timer = _Deadline(limits.head_timeout, self._head_timed_out)
            self._in_body = False
            self._body_timer: _Deadline | None = None
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refuse(503, f"more than {limits.max_connections} connections are open")
                return
            self._head_timer.arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_timer.cancel()
            self._cancel_body_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            between = self.cycle is None or self.cycle.response_complete
            if not self._head_timer.armed and not self._head_started and between:
                self._head_timer.arm()  # the next request's first bytes, after keep-alive
            super().data_received(data)
            if self._in_body and not self.transport.is_closing():
                self._arm_body_timer()  # a body still incomplete after this read

        def on_message_begin(self) -> None:
            self._head_lines = 0
            self._head_bytes = 0
            self._head_started = True
            if not self._head_timer.armed:
                self._head_timer.arm()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count(len(url), lines=0)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if self._count(len(name) + len(value), lines=1):
                super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._head_timer.cancel()
            self._head_started = False
            self._in_body = True
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_body = False
            self._cancel_body_timer()
            super().on_message_complete()

        def _arm_body_timer(self) -> None:
            if self._body_timer is None:
                self._body_timer = _Deadline(limits.body_read_timeout, self._body_timed_out)
            self._body_timer.arm()

        def _cancel_body_timer(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()

        def _count(self, size: int, *, lines: int) -> bool:
            """Add to the head; False (and 431 sent) once it is over a limit."""
            if self.transport.is_closing():
                return False
            self._head_bytes += size
            self._head_lines += lines
            if self._head_lines > limits.max_header_count:
                self._refuse(431, f"more than {limits.max_header_count} header lines")
                return False
            if self._head_bytes > limits.max_head_bytes:
                self._refuse(431, f"a request head larger than {limits.max_head_bytes} bytes")
                return False
            return True

        def _body_timed_out(self) -> None:
            if not self._in_body or self.transport.is_closing():
                return
            if self.cycle is not None and self.cycle.response_started:
                self.transport.close()  # an answer began: nothing else can be said
                return
            self._refuse(408, f"no byte of the request body for {limits.body_read_timeout:g} s")

        def _head_timed_out(self) -> None:
            if self.transport.is_closing():
                return
            if self._head_started:
                self._refuse(408, f"no complete request head within {limits.head_timeout:g} s")
            elif self.cycle is None or self.cycle.response_complete:
                self.transport.close()  # nothing sent at all (or idle after an answer)

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to a head its parser refuses (plain text of its own), in the
            refusal's shape like every other limit's: a client gets one error shape."""
            self._refuse(400, f"the request is not valid HTTP/1.1 ({msg.rstrip('.')})")

        def _refuse(self, status: int, what: str) -> None:
            self._head_timer.cancel()
            self._cancel_body_timer()
            self._in_body = False
            content_type, body = refusal(status, what)
            self.transport.write(refusal_bytes(status, content_type, body))
            self.transport.close()

    return LimitedProtocol
