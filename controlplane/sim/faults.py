"""A broken member's answers to a chat completion, one per :class:`AnswerMode`.

What a proxy in front of a member must survive: bytes that are not HTTP, a connection closed
mid-answer, a body of 10 GiB, a stall between chunks, an error page that is not JSON. Each is an
ASGI answer (:class:`FaultyAnswer`) the chat endpoint returns in place of the completion.

Two of them cannot be said in ASGI at all, which only sends well-formed answers: ``garbage``
(bytes that are no status line) and ``cut`` (a connection closed before the body's end without
the server logging an application error). They write to, and close, the connection's transport,
which uvicorn keeps on the object whose method ``receive`` is; on any other server those two
modes fail loudly rather than simulate something else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import msgspec
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from controlplane.sim.settings import HUGE_ANSWER_BYTES, AnswerMode

#: What ``garbage`` sends instead of an answer: another protocol's greeting, then binary.
GARBAGE = b"SSH-2.0-not-http\r\n\x00\xff\xfe\x00\x01garbage"
#: The page ``error-text`` answers with.
ERROR_PAGE = b"<html><body><h1>500 Internal Server Error</h1><p>upstream crashed</p></body></html>"
#: Bytes per write of a ``huge`` answer.
HUGE_CHUNK_BYTES = 64 * 1024

Play = Callable[[Receive, Send], Awaitable[None]]


class FaultyAnswer(Response):
    """An endpoint's answer that plays a fault on the connection itself."""

    def __init__(self, play: Play) -> None:
        super().__init__()
        self._play = play

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._play(receive, send)


def connection_transport(receive: Receive) -> asyncio.Transport:
    """uvicorn's transport for this connection (see the module's docstring for why)."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    if not isinstance(transport, asyncio.Transport):
        raise RuntimeError("the garbage and cut answer modes need uvicorn's HTTP server")
    return transport


async def _gone(receive: Receive) -> None:
    """Return once the server has seen the client's connection go."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _closed(receive: Receive, transport: asyncio.Transport) -> None:
    """Close the connection and wait until the server has seen it go, so it reports no
    unfinished answer."""
    transport.close()
    await _gone(receive)


def _head(status: int, content_type: bytes, length: int | None = None) -> dict[str, Any]:
    headers = [(b"content-type", content_type)]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http.response.start", "status": status, "headers": headers}


def _body(data: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


def garbage() -> Play:
    async def play(receive: Receive, _: Send) -> None:
        transport = connection_transport(receive)
        transport.write(GARBAGE)
        await _closed(receive, transport)

    return play


def cut(first: bytes, stream: bool) -> Play:
    """The head and ``first`` (an event, or the start of an unsized JSON body), then the
    connection closes before the body's end."""

    async def play(receive: Receive, send: Send) -> None:
        transport = connection_transport(receive)
        await send(_head(200, b"text/event-stream" if stream else b"application/json"))
        await send(_body(first))
        await _closed(receive, transport)

    return play


def huge(stream: bool, event: bytes) -> Play:
    """:data:`HUGE_ANSWER_BYTES` of body, written for as long as the client reads: declared up
    front when not streamed, as events without a size when streamed."""

    async def play(receive: Receive, send: Send) -> None:
        unit = event if stream else b" "
        chunk = unit * max(1, HUGE_CHUNK_BYTES // len(unit))
        if stream:
            await send(_head(200, b"text/event-stream"))
        else:
            await send(_head(200, b"application/json", HUGE_ANSWER_BYTES))
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_when_gone, receive, group.cancel_scope)
            sent = 0
            while sent + len(chunk) <= HUGE_ANSWER_BYTES:
                await send(_body(chunk))
                sent += len(chunk)
            rest = b"" if stream else unit * (HUGE_ANSWER_BYTES - sent)  # a sized body is whole
            await send(_body(rest, more=False))
            group.cancel_scope.cancel()

    return play


async def _cancel_when_gone(receive: Receive, scope: anyio.CancelScope) -> None:
    await _gone(receive)
    scope.cancel()


def stall(chunks: AsyncIterator[bytes], stream: bool, hang: Callable[[], Awaitable[None]]) -> Play:
    """The answer as it would be, but after its first part nothing comes until ``hang`` returns
    (``stall_seconds``, or the server's shutdown)."""

    async def play(receive: Receive, send: Send) -> None:
        if stream:
            await send(_head(200, b"text/event-stream"))
            first = True
            async for chunk in chunks:
                await send(_body(chunk))
                if first:
                    first = False
                    await hang()
            await send(_body(b"", more=False))
            return
        body = b"".join([chunk async for chunk in chunks])
        half = len(body) // 2
        await send(_head(200, b"application/json; charset=utf-8", len(body)))
        await send(_body(body[:half]))
        await hang()
        await send(_body(body[half:], more=False))

    return play


def error_text() -> Response:
    return Response(ERROR_PAGE, status_code=500, media_type="text/html")


def sample_event(model: str) -> bytes:
    """One completion chunk event, as the streams of every mode carry."""
    chunk = {
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
    }
    return b"data: " + msgspec.json.encode(chunk) + b"\n\n"


def faulty_answer(
    mode: AnswerMode,
    *,
    stream: bool,
    model: str,
    chunks: Callable[[], AsyncIterator[bytes]],
    hang: Callable[[], Awaitable[None]],
) -> Response:
    """The answer of ``mode`` (never :attr:`AnswerMode.NORMAL`) to one chat completion;
    ``chunks`` gives the normal answer's bytes (events, or the whole body), for ``stall``."""
    event = sample_event(model)
    if mode is AnswerMode.GARBAGE:
        return FaultyAnswer(garbage())
    if mode is AnswerMode.CUT:
        return FaultyAnswer(
            cut(event if stream else b'{"id": "chatcmpl-cut", "choices": [', stream)
        )
    if mode is AnswerMode.HUGE:
        return FaultyAnswer(huge(stream, event))
    if mode is AnswerMode.STALL:
        return FaultyAnswer(stall(chunks(), stream, hang))
    if mode is AnswerMode.ERROR_TEXT:
        return error_text()
    raise ValueError(f"not a fault: {mode}")
