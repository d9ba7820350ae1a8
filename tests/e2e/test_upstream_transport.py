"""The proxy's upstream transport (httpx's interface over aiohttp) against a real server.

No Kubernetes: a small starlette app served by the framework's embedded server on loopback. What
is checked is what the proxy's app relies on: bodies and headers pass unchanged and undecoded, a
stream is handed over chunk by chunk as it arrives (the server waits for the client to have the
first chunk before it sends the second, so a buffering transport would hang), closing a response
returns its connection, and failures are httpx's exceptions.
"""

from __future__ import annotations

import gzip
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from controlplane.router.upstream import AiohttpTransport
from controlplane.runtime.httpserver import bind, serve


@asynccontextmanager
async def server() -> AsyncIterator[tuple[str, anyio.Event]]:
    first_chunk_read = anyio.Event()

    async def echo(request: Request) -> Response:
        body = await request.body()
        return Response(
            body,
            status_code=201,
            headers={"x-seen-trace": request.headers.get("traceparent", ""),
                     "content-type": request.headers.get("content-type", "")},
        )  # fmt: skip

    async def compressed(_: Request) -> Response:
        return Response(gzip.compress(b"hello"), headers={"content-encoding": "gzip"})

    async def stream(_: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            yield b"data: one\n\n"
            with anyio.fail_after(30):
                await first_chunk_read.wait()
            yield b"data: two\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def hang(_: Request) -> Response:
        await anyio.sleep(30)
        return Response(b"late")

    app = Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/gzip", compressed),
            Route("/stream", stream, methods=["POST"]),
            Route("/hang", hang),
        ]
    )
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with anyio.create_task_group() as group:
        await group.start(serve, app, [sock])
        yield url, first_chunk_read
        group.cancel_scope.cancel()


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=AiohttpTransport(), timeout=10, trust_env=False)


async def test_body_status_and_headers_pass_unchanged() -> None:
    async with server() as (url, _), client() as http:
        request = http.build_request(
            "POST", url + "/echo", content=b'{"a": 1}',
            headers={"content-type": "application/json", "traceparent": "00-abc-def-01"},
        )  # fmt: skip
        response = await http.send(request, stream=True)
        assert response.status_code == 201
        assert b"".join([c async for c in response.aiter_raw()]) == b'{"a": 1}'
        assert response.headers["x-seen-trace"] == "00-abc-def-01"
        assert response.headers["content-type"] == "application/json"
        await response.aclose()
        # Undecoded: a proxy forwards the member's bytes and its content-encoding as they are.
        response = await http.send(http.build_request("GET", url + "/gzip"), stream=True)
        assert response.headers["content-encoding"] == "gzip"
        assert gzip.decompress(b"".join([c async for c in response.aiter_raw()])) == b"hello"
        await response.aclose()


async def test_a_stream_is_handed_over_as_it_arrives() -> None:
    async with server() as (url, first_chunk_read), client() as http:
        response = await http.send(http.build_request("POST", url + "/stream"), stream=True)
        assert response.headers["content-type"].startswith("text/event-stream")
        received = b""
        async for chunk in response.aiter_raw():
            received += chunk
            if b"one" in received:
                first_chunk_read.set()  # only now does the server send the second event
        await response.aclose()
        assert received == b"data: one\n\ndata: two\n\n"


async def test_failures_are_httpx_errors() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.send(http.build_request("GET", closed + "/x"), stream=True)
    async with (
        server() as (url, _),
        httpx.AsyncClient(
            transport=AiohttpTransport(), timeout=httpx.Timeout(10, read=0.2), trust_env=False
        ) as http,
    ):
        with pytest.raises(httpx.ReadTimeout):
            await http.send(http.build_request("GET", url + "/hang"), stream=True)
