"""How a request arrives, bounded by the proxy's server protocol, over real sockets
(docs/router.md, "Limits"): too many header lines or too many head bytes are 431 in the proxy's
error shape, a head that trickles in (or a connection that sends nothing) is cut at
``--head-timeout``, a body that stops at ``--body-read-timeout``, and none of it touches a request
that keeps arriving or whose answer takes long.

Each case failed on uvicorn's protocol as it came (every head accepted, none ever timed out).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.router.errors import request_refusal
from controlplane.runtime.coalescing import http_protocol
from controlplane.runtime.httpserver import bind, serve
from controlplane.runtime.requestlimits import RequestLimits, guarded_protocol
from tests.e2e.test_coalescing_server import read_answer

LIMITS = RequestLimits(
    max_header_count=20,
    max_head_bytes=4096,
    head_timeout=0.5,
    body_read_timeout=0.5,
    max_connections=3,
)


@asynccontextmanager
async def server() -> AsyncIterator[int]:
    async def slow(_: Request) -> Response:
        await anyio.sleep(1.0)  # twice the head timeout: the answer, not the head, takes long
        return Response(b"{}", media_type="application/json")

    async def fast(_: Request) -> Response:
        return Response(b"{}", media_type="application/json")

    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    app = Starlette(
        routes=[Route("/slow", slow), Route("/fast", fast), Route("/echo", echo, methods=["POST"])]
    )
    base = http_protocol()
    assert not isinstance(base, str), "httptools is a dependency: the protocol must be ours"
    protocol = guarded_protocol(base, LIMITS, request_refusal)
    sock = bind("127.0.0.1", 0)
    async with anyio.create_task_group() as group:
        await group.start(functools.partial(serve, app, [sock], http=protocol))
        yield sock.getsockname()[1]
        group.cancel_scope.cancel()


def request(path: str = "/fast", headers: int = 0, value: bytes = b"v") -> bytes:
    lines = [b"GET %s HTTP/1.1" % path.encode(), b"host: proxy"]
    lines += [b"x-h%d: %s" % (i, value) for i in range(headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def exchange(port: int, data: bytes) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(read_answer(reader), 10)
    finally:
        writer.close()


def status(head: bytes) -> int:
    return int(head.split(b" ", 2)[1])


async def test_too_many_header_lines_or_bytes_are_431_in_the_proxy_error_shape() -> None:
    async with server() as port:
        ok, _ = await exchange(port, request(headers=18))  # 19 lines with host: within 20
        many, many_body = await exchange(port, request(headers=20))
        big, big_body = await exchange(port, request(headers=1, value=b"v" * 5000))
    assert status(ok) == 200
    for head, body, named in ((many, many_body, "20 header lines"), (big, big_body, "4096")):
        assert status(head) == 431, head
        assert b"connection: close" in head.lower()
        error = json.loads(body)["error"]
        assert error["code"] == "request_header_fields_too_large"
        assert named in error["message"]
        assert set(error) == {"message", "type", "code"}


async def test_a_trickling_head_is_408_at_the_head_timeout_and_closed() -> None:
    async with server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        writer.write(b"GET /fast HTTP/1.1\r\nhost: proxy\r\n")

        async def trickle() -> None:  # one header line every 0.1 s, as a slowloris does
            with contextlib.suppress(OSError):
                while True:
                    writer.write(b"x-slow: 1\r\n")
                    await writer.drain()
                    await anyio.sleep(0.1)

        async with anyio.create_task_group() as group:
            group.start_soon(trickle)
            head, body = await asyncio.wait_for(read_answer(reader), 5)
            group.cancel_scope.cancel()
        took = time.monotonic() - started
        assert await asyncio.wait_for(reader.read(), 5) == b"", "the connection stayed open"
        writer.close()
    assert status(head) == 408
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert LIMITS.head_timeout <= took < LIMITS.head_timeout + 1.5, f"cut after {took:.2f} s"


async def test_a_connection_that_sends_nothing_is_closed_at_the_head_timeout() -> None:
    async with server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 5) == b"", "no answer to nothing"
        took = time.monotonic() - started
        writer.close()
    assert LIMITS.head_timeout <= took < LIMITS.head_timeout + 1.5, f"closed after {took:.2f} s"


async def test_a_complete_head_is_never_timed_out_however_long_the_answer_takes() -> None:
    async with server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request("/slow"))
        first, _ = await asyncio.wait_for(read_answer(reader), 10)
        writer.write(request("/slow"))  # the same connection, kept alive, a second time
        second, _ = await asyncio.wait_for(read_answer(reader), 10)
        writer.close()
    assert (status(first), status(second)) == (200, 200)


def post_head(length: int) -> bytes:
    return b"POST /echo HTTP/1.1\r\nhost: proxy\r\ncontent-length: %d\r\n\r\n" % length


async def test_a_body_that_stops_is_408_at_the_body_read_timeout() -> None:
    async with server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        writer.write(post_head(100) + b'{"model": ')  # 10 of 100 bytes, then nothing
        head, body = await asyncio.wait_for(read_answer(reader), 5)
        took = time.monotonic() - started
        assert await asyncio.wait_for(reader.read(), 5) == b"", "the connection stayed open"
        writer.close()
    assert status(head) == 408
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert "request body" in error["message"]
    assert LIMITS.body_read_timeout <= took < LIMITS.body_read_timeout + 1.5, f"{took:.2f} s"


async def test_a_body_that_keeps_arriving_is_read_to_its_end() -> None:
    """One byte every 0.2 s: 1.6 s in all, three times the timeout, but never 0.5 s without one."""
    payload = b'{"a": 1}'
    async with server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post_head(len(payload)))
        for byte in payload:
            await anyio.sleep(0.2)
            writer.write(bytes([byte]))
            await writer.drain()
        head, body = await asyncio.wait_for(read_answer(reader), 5)
        writer.close()
    assert (status(head), body) == (200, payload)


async def test_a_connection_beyond_the_limit_is_503_with_retry_after_and_the_others_serve() -> None:
    async with server() as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await anyio.sleep(0.05)  # all three accepted before the fourth comes
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head, body = await asyncio.wait_for(read_answer(reader), 5)
        assert await asyncio.wait_for(reader.read(), 5) == b"", "the fourth stayed open"
        writer.close()
        first_reader, first_writer = held[0]
        first_writer.write(request())  # one of the three still serves
        served, _ = await asyncio.wait_for(read_answer(first_reader), 5)
        for _, other in held:
            other.close()
    assert status(head) == 503
    assert b"retry-after: 1" in head.lower()
    assert json.loads(body)["error"]["code"] == "proxy_connections_full"
    assert status(served) == 200
