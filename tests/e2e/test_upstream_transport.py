"""The proxy's upstream client (aiohttp's pool, no client objects) against real servers.

No Kubernetes: a small starlette app served by the framework's embedded server on loopback, and a
raw asyncio server for what a well-behaved server never does (closing mid-answer). What is
checked is what the proxy's app relies on: bodies and headers pass unchanged and undecoded,
sized and chunked bodies are read whole, a read can stop at a limit, a stream is handed over
chunk by chunk as it arrives (the server waits for the client to have the first chunk before it
sends the second, so a buffering client would hang), a connection read to the end is reused,
one the member closes is not, and failures are the upstream module's kinds.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from controlplane.router.upstream import (
    AiohttpUpstream,
    ConnectFailed,
    ConnectTimedOut,
    Disconnected,
    ReadTimedOut,
    UpstreamTimeouts,
)
from controlplane.runtime.httpserver import bind, serve


def held_second_event(
    first_chunk_read: anyio.Event,
) -> Callable[[Request], Awaitable[StreamingResponse]]:
    """An event-stream endpoint that sends its second event only once the client has set
    ``first_chunk_read``: a client (or server) that holds a chunk back hangs on it."""

    async def stream(_: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            yield b"data: one\n\n"
            with anyio.fail_after(30):
                await first_chunk_read.wait()
            yield b"data: two\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return stream


@asynccontextmanager
async def server() -> AsyncIterator[tuple[str, anyio.Event]]:
    first_chunk_read = anyio.Event()

    async def echo(request: Request) -> Response:
        body = await request.body()
        client = request.client
        return Response(
            body,
            status_code=201,
            headers={"x-seen-trace": request.headers.get("traceparent", ""),
                     "content-type": request.headers.get("content-type", ""),
                     "x-client-port": str(client.port if client else 0),
                     "x-seen-user-agent": request.headers.get("user-agent", "")},
        )  # fmt: skip

    async def compressed(_: Request) -> Response:
        return Response(gzip.compress(b"hello"), headers={"content-encoding": "gzip"})

    async def chunked(_: Request) -> StreamingResponse:
        async def parts() -> AsyncIterator[bytes]:
            for part in (b"ab", b"cd", b"ef"):
                yield part

        return StreamingResponse(parts(), media_type="application/json")  # no content-length

    async def closing(request: Request) -> Response:
        client = request.client
        port = str(client.port if client else 0)
        return Response(b"bye", headers={"connection": "close", "x-client-port": port})

    async def hang(_: Request) -> Response:
        await anyio.sleep(30)
        return Response(b"late")

    app = Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/gzip", compressed),
            Route("/stream", held_second_event(first_chunk_read), methods=["POST"]),
            Route("/chunked", chunked),
            Route("/closing", closing),
            Route("/hang", hang),
        ]
    )
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with anyio.create_task_group() as group:
        await group.start(serve, app, [sock])
        yield url, first_chunk_read
        group.cancel_scope.cancel()


@asynccontextmanager
async def upstream(timeouts: UpstreamTimeouts | None = None) -> AsyncIterator[AiohttpUpstream]:
    client = AiohttpUpstream(timeouts or UpstreamTimeouts(connect=10, read=10))
    try:
        yield client
    finally:
        await client.aclose()


async def test_body_status_and_headers_pass_unchanged() -> None:
    async with server() as (url, _), upstream() as client:
        headers = {"content-type": "application/json", "traceparent": "00-abc-def-01"}
        answer = await client.request("POST", url + "/echo", headers, b'{"a": 1}')
        assert answer.status == 201
        assert await answer.read() == b'{"a": 1}'
        assert answer.headers["x-seen-trace"] == "00-abc-def-01"
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["x-seen-user-agent"] == ""  # the client adds no headers of its own
        await answer.aclose()
        # Undecoded: a proxy forwards the member's bytes and its content-encoding as they are.
        answer = await client.request("GET", url + "/gzip", {}, b"")
        assert answer.headers["content-encoding"] == "gzip"
        assert gzip.decompress(await answer.read()) == b"hello"
        await answer.aclose()


async def test_a_chunked_body_is_read_whole_or_up_to_a_limit() -> None:
    async with server() as (url, _), upstream() as client:
        answer = await client.request("GET", url + "/chunked", {}, b"")
        assert "content-length" not in answer.headers
        assert answer.headers["transfer-encoding"] == "chunked"
        assert await answer.read() == b"abcdef"  # the framing is gone, the bytes are all there
        await answer.aclose()
        answer = await client.request("GET", url + "/chunked", {}, b"")
        assert await answer.read(3) == b"abc"
        await answer.aclose()  # not read to the end: the connection is dropped, not reused


async def test_a_stream_is_handed_over_as_it_arrives() -> None:
    async with server() as (url, first_chunk_read), upstream() as client:
        answer = await client.request("POST", url + "/stream", {}, b"")
        assert answer.headers["content-type"].startswith("text/event-stream")
        received = b""
        async for chunk in answer.chunks():
            received += chunk
            if b"one" in received:
                first_chunk_read.set()  # only now does the server send the second event
        await answer.aclose()
        assert received == b"data: one\n\ndata: two\n\n"


async def test_a_connection_read_to_the_end_is_reused_and_one_the_member_closes_is_not() -> None:
    async with server() as (url, _), upstream() as client:
        ports = []
        for _ in range(3):
            answer = await client.request("POST", url + "/echo", {}, b"x")
            assert await answer.read() == b"x"
            ports.append(answer.headers["x-client-port"])
            await answer.aclose()
        assert len(set(ports)) == 1, ports  # kept alive: one connection for all three
        closing = []
        for _ in range(2):
            answer = await client.request("GET", url + "/closing", {}, b"")
            assert await answer.read() == b"bye"
            closing.append(answer.headers["x-client-port"])
            await answer.aclose()
        # The first went on the kept-alive connection, which the member then closed: the second
        # needed a new one.
        assert closing[0] == ports[0], (ports, closing)
        assert closing[1] != closing[0], closing


@asynccontextmanager
async def raw_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await handle(reader, writer)
        finally:
            writer.close()

    sock = bind("127.0.0.1", 0)
    listener = await asyncio.start_server(serve_one, sock=sock)
    async with listener:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_member_closing_mid_answer_is_a_disconnect() -> None:
    async def short(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
        await writer.drain()

    async with raw_server(short) as url, upstream() as client:
        answer = await client.request("GET", url + "/", {}, b"")
        assert answer.headers["content-length"] == "100"
        with pytest.raises(Disconnected):
            await answer.read()
        await answer.aclose()
        answer = await client.request("GET", url + "/", {}, b"")
        with pytest.raises(Disconnected):
            async for _ in answer.chunks():
                pass
        await answer.aclose()


async def test_a_member_closing_before_any_answer_is_a_disconnect() -> None:
    async def nothing(_: asyncio.StreamReader, __: asyncio.StreamWriter) -> None:
        return None  # read the head, then close: the member may have taken the request

    async with raw_server(nothing) as url, upstream() as client:
        with pytest.raises(Disconnected) as caught:
            await client.request("POST", url + "/", {}, b"{}")
        assert not caught.value.unsent


async def test_refused_and_timed_out_are_told_apart() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    async with upstream() as client:
        with pytest.raises(ConnectFailed) as refused:
            await client.request("GET", closed + "/x", {}, b"")
        assert refused.value.unsent
    async with server() as (url, _), upstream(UpstreamTimeouts(connect=10, read=0.2)) as client:
        with pytest.raises(ReadTimedOut) as timed_out:
            await client.request("GET", url + "/hang", {}, b"")
        assert not timed_out.value.unsent


async def test_a_connect_that_times_out_is_known_unsent() -> None:
    """A listener whose accept queue is full (never accepted, backlog 0 and one connection in it)
    drops the next SYN: the connect times out, nothing was written, and the app may send again."""
    with socket.socket() as listener, socket.socket() as queued:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        queued.connect(listener.getsockname())  # fills the queue; nothing ever accepts it
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        async with upstream(UpstreamTimeouts(connect=0.5, read=5)) as client:
            with pytest.raises(ConnectTimedOut) as timed_out:
                await client.request("POST", url + "/v1/chat/completions", {}, b"{}")
        assert timed_out.value.unsent
