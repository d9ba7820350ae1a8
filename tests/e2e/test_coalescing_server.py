"""The embedded server on the coalescing httptools protocol, over real sockets.

What coalescing must not change: answers arrive whole and in order on a kept-alive connection,
a streamed answer's first chunk arrives before the app writes the next (the app waits for the
client to have it, so holding a chunk past its turn would hang), and a ``connection: close``
answer is sent in full before the close.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.runtime.coalescing import http_protocol
from controlplane.runtime.httpserver import bind, serve
from tests.e2e.test_upstream_transport import held_second_event


@asynccontextmanager
async def server() -> AsyncIterator[tuple[int, anyio.Event]]:
    first_chunk_read = anyio.Event()

    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    async def closing(_: Request) -> Response:
        return Response(b"x" * 100_000, headers={"connection": "close"})

    app = Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/stream", held_second_event(first_chunk_read)),
            Route("/closing", closing),
        ]
    )
    protocol = http_protocol()
    assert not isinstance(protocol, str), "httptools is a dependency: the protocol must be ours"
    sock = bind("127.0.0.1", 0)
    async with anyio.create_task_group() as group:
        await group.start(functools.partial(serve, app, [sock], http=protocol))
        yield sock.getsockname()[1], first_chunk_read
        group.cancel_scope.cancel()


async def read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


async def test_answers_on_a_kept_alive_connection_arrive_whole_and_in_order() -> None:
    async with server() as (port, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for body in (b'{"n": 1}', b'{"n": 22}', b'{"n": 333}'):
            head = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body)
            writer.write(head + body)
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert answer == body
        writer.close()


async def test_a_streamed_chunk_leaves_before_the_next_is_written() -> None:
    async with server() as (port, first_chunk_read):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head
        received = b""
        while b"data: one" not in received:
            received += await reader.read(65536)
        first_chunk_read.set()
        while not received.endswith(b"0\r\n\r\n"):
            received += await reader.read(65536)
        assert b"data: two" in received
        writer.close()


async def test_a_closing_answer_is_sent_in_full_before_the_close() -> None:
    async with server() as (port, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /closing HTTP/1.1\r\nhost: x\r\n\r\n")
        head, answer = await read_answer(reader)
        assert b"connection: close" in head
        assert answer == b"x" * 100_000
        assert await reader.read() == b""  # then the server closed the connection
        writer.close()
