"""The coalescing transport: writes of one event-loop turn leave as one, in order, never lost
before a close.

The transport below it is a recorder with the real transport's rules that matter here: a write
after ``close`` is an error (uvloop raises), and ``is_closing`` turns true at ``close`` or when
the peer has gone.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from controlplane.runtime.coalescing import UVICORN_AUTO, CoalescingTransport, http_protocol


class Recorder(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False
        self.eof = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing:
            raise RuntimeError("write after close")
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def write_eof(self) -> None:
        self.eof = True

    def get_write_buffer_size(self) -> int:
        return 0  # everything written is sent at once here


async def turn() -> None:
    """Let the loop finish the current turn (and run what it scheduled)."""
    await asyncio.sleep(0)


@pytest.mark.anyio
async def test_writes_of_one_turn_leave_as_one_write_in_order() -> None:
    real = Recorder()
    coalescing = CoalescingTransport(real)
    coalescing.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    coalescing.writelines([b"o", b"k"])
    assert real.writes == []
    await turn()
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    coalescing.write(b"next")  # a later turn's write is its own
    await turn()
    assert real.writes[1:] == [b"next"]
    assert coalescing.get_write_buffer_size() == 0


@pytest.mark.anyio
async def test_close_and_half_close_send_what_is_pending_first() -> None:
    real = Recorder()
    coalescing = CoalescingTransport(real)
    coalescing.write(b"head")
    coalescing.write(b"body")
    coalescing.close()
    assert real.writes == [b"headbody"]
    assert coalescing.is_closing()
    await turn()  # the scheduled flush finds nothing left
    assert real.writes == [b"headbody"]
    other = Recorder()
    coalescing = CoalescingTransport(other)
    coalescing.write(b"last")
    coalescing.write_eof()
    assert (other.writes, other.eof) == ([b"last"], True)


@pytest.mark.anyio
async def test_bytes_for_a_peer_that_has_gone_are_dropped_not_raised() -> None:
    real = Recorder()
    coalescing = CoalescingTransport(real)
    coalescing.write(b"late")
    real.closing = True  # the peer went away before the turn ended
    await turn()
    assert real.writes == []
    coalescing.write(b"")  # empty writes schedule nothing
    assert coalescing.get_write_buffer_size() == 0


def test_without_httptools_uvicorn_picks_its_own_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not isinstance(http_protocol(), str)
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)  # unimportable
    assert http_protocol() == UVICORN_AUTO
