"""A fake member: a raw asyncio TCP server that plays a script for each request it reads.

Raw, not an HTTP framework, so that it can answer what no framework would send: garbage instead
of a status line, a head cut off, a body shorter than its ``content-length``, a stall, a close in
the middle of a chunk. A :data:`Script` is plain data (what hypothesis draws and prints when an
example fails): bytes to send, pauses, and how the connection ends. The server counts the
connections it has open and what each is doing, so a test can tell a connection the proxy's
pool keeps idle (after a complete answer) from one it leaked.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

#: How a scripted answer ends: the connection kept for the next request (the answer is
#: complete), closed by the member, or left open with nothing more sent until the proxy closes it.
KEEP, CLOSE, STALL = "keep", "close", "stall"
#: The longest a stalled member waits for the proxy to close (far beyond any timeout the
#: fuzzers configure: a connection still open then is a leak, and shows as one).
STALL_LIMIT_SECONDS = 30.0


@dataclass(frozen=True)
class Script:
    """One answer: ``steps`` are bytes to send or seconds to pause, then ``end``."""

    steps: tuple[bytes | float, ...]
    end: str = KEEP

    def sent(self) -> bytes:
        """Every byte the member sends."""
        return b"".join(step for step in self.steps if isinstance(step, bytes))


def healthy_answer(body: bytes = b'{"object":"fuzz","ok":true}') -> Script:
    """A complete, sized JSON 200 on a kept-alive connection."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return Script((head % len(body) + body,))


@dataclass
class MemberState:
    """What the member has seen: requests, and its connections' states by id."""

    requests: list[bytes] = field(default_factory=list)
    #: "reading" (waiting for a request), "answering", "idle" (after a complete answer, kept),
    #: "stalled"; a closed connection is removed.
    connections: dict[int, str] = field(default_factory=dict)


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request (head and a sized body), or None at the connection's end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    try:
        return head + await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class FakeMember:
    """Serves the current :attr:`script` (set by the test before each request) on every request."""

    def __init__(self) -> None:
        self.script: Script = healthy_answer()
        self.state = MemberState()
        self._server: asyncio.Server | None = None
        self._next_id = 0

    async def start(self) -> int:
        """Listen on a free loopback port; the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._next_id += 1
        connection = self._next_id
        states = self.state.connections
        states[connection] = "reading"
        try:
            while (request := await _read_request(reader)) is not None:
                self.state.requests.append(request)
                script = self.script
                states[connection] = "answering"
                for step in script.steps:
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                    elif writer.is_closing():  # the proxy gave up on the answer: so does the member
                        return
                    else:
                        writer.write(step)
                        await writer.drain()
                if script.end == CLOSE:
                    break
                if script.end == STALL:
                    states[connection] = "stalled"
                    with contextlib.suppress(TimeoutError, ConnectionError):
                        await asyncio.wait_for(reader.read(), STALL_LIMIT_SECONDS)
                    break
                states[connection] = "idle"
        except (ConnectionError, RuntimeError):  # uvloop: "the handler is closed"
            pass
        finally:
            states.pop(connection, None)
            writer.close()
