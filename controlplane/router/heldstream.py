"""Keep-alive for a held streamed request: answered at once, kept open with comments (opt-in).

docs/router.md ("Held streams"). A request is held for minutes by design (its member's turn, then
its swap), and a client, a load balancer or an ingress in between that closes a connection idle
for 60 s (nginx's ``proxy_read_timeout``, AWS ALB's idle timeout) cuts it before its answer
comes. With ``--held-stream-keepalive SECONDS`` above 0, a request with ``"stream": true`` for a
pool member that is not ready is answered ``200 text/event-stream`` at once, and while it is held
every ``SECONDS`` the proxy sends an SSE comment that says for whom it waits and, from the queue
ahead and the swap times measured (the same estimate as ``Retry-After``), when the member is
expected: ``: held for b; expected in about 12 s``. SSE clients (openai-python included) ignore
comment lines. Once the member answers, its event stream follows as it comes.

**The price, and why it is off by default:** the status is sent before the outcome is known. A
hold that ends in an error (the budget spent, ``pool_busy``, a failed swap) can no longer be a
503 with ``Retry-After``; it is one last ``data:`` event carrying the same OpenAI-style error body
(``{"error": {"message", "type", "code"}}``, which openai-python raises as an ``APIError``), and a
member's own error answer becomes such an event too. Clients that retry on 503 lose that retry,
so it is for paths whose idle timeout is shorter than the pool's bound.

The parts are pure of the app's routing: :func:`serve_held_stream` takes the dispatch to wait for
and ASGI's ``send``; the app decides when a request qualifies.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from controlplane.router.errors import (
    MEMBER_ERROR_MAX_BYTES,
    ProxyError,
    member_error_body,
    upstream_error,
)
from controlplane.router.upstream import (
    CLOSE_TIMEOUT_SECONDS,
    DEFAULT_MAX_ANSWER_BYTES,
    UpstreamAnswer,
    UpstreamFailure,
    bounded_chunks,
    whole_events,
)

#: Off: held streams wait silently and errors keep their status (``--held-stream-keepalive``).
DEFAULT_HELD_STREAM_KEEPALIVE_SECONDS: Final = 0.0

HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    # nginx buffers a proxied answer unless told not to: the comments must reach the client.
    (b"x-accel-buffering", b"no"),
]

Dispatched = tuple[UpstreamAnswer, str, Callable[[], None]]


def keepalive_comment(member: str, expected_in: int | None) -> bytes:
    """One SSE comment: for whom the request waits and, when known, in how many seconds."""
    expected = f"; expected in about {expected_in} s" if expected_in else ""
    return f": held for {member}{expected}\n\n".encode()


def error_event(body: dict[str, Any]) -> bytes:
    """The closing ``data:`` event of a stream whose hold or member failed."""
    return (
        b"data: " + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    )


async def serve_held_stream(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    dispatch: Callable[[], Awaitable[Dispatched]],
    *,
    member: str,
    interval: float,
    expected_in: Callable[[], int | None],
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
) -> tuple[int, str]:
    """Answer 200 now, send a comment every ``interval`` while ``dispatch`` holds, then the
    member's stream or one error event. Returns the status and reason the request is audited
    with (the member's, or the hold's error's). A client that leaves cancels it: under uvicorn
    through the app's listener on ``receive()`` (:mod:`controlplane.router.clientgone`), under a
    server whose ``send`` raises for a gone client, at the next comment."""
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    outcome: list[Dispatched | ProxyError] = []
    done = anyio.Event()

    async def hold() -> None:
        try:
            outcome.append(await dispatch())
        except ProxyError as err:
            outcome.append(err)
        finally:
            done.set()

    gone: BaseException | None = None
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            while not done.is_set():
                with anyio.move_on_after(interval):
                    await done.wait()
                if done.is_set():
                    break
                try:
                    await _body(send, keepalive_comment(member, expected_in()))
                except Exception as err:  # the client left: the hold is cancelled, the error kept
                    gone = err
                    group.cancel_scope.cancel()
                    break
    except BaseException:  # cancelled (the client left) as the member answered: nobody reads it
        await _close_all(outcome)
        raise
    if gone is not None:
        await _close_all(outcome)
        raise gone
    (result,) = outcome
    if isinstance(result, ProxyError):
        await _body(send, error_event(result.body()), more=False)
        return result.status, result.code
    upstream, url, _ = result
    try:
        return await _relay(send, upstream, member, url, max_answer_bytes)
    finally:
        await close_dispatched(result)


async def _close_all(outcome: list[Dispatched | ProxyError]) -> None:
    for result in outcome:
        if not isinstance(result, ProxyError):
            await close_dispatched(result)


async def close_dispatched(dispatched: Dispatched) -> None:
    """Close a member's answer and release its in-flight count, also in a task being cancelled
    (its client left): the close is shielded, with a bound of its own, and the count goes
    whatever happens. A count never released kept its member "active" in this replica's demand
    report for good, and the pool swapped back to it for nobody (issue 40)."""
    upstream, _, release = dispatched
    try:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT_SECONDS):
            await upstream.aclose()
    finally:
        release()


async def _relay(
    send: Callable[[dict[str, Any]], Awaitable[None]],
    upstream: UpstreamAnswer,
    member: str,
    url: str,
    max_answer_bytes: int,
) -> tuple[int, str]:
    """The member's event stream as it comes (at most ``max_answer_bytes``); any other answer
    as one error event."""
    streams = upstream.headers.get("content-type", "").startswith("text/event-stream")
    try:
        if upstream.status == 200 and streams:
            async for chunk in whole_events(bounded_chunks(upstream, max_answer_bytes)):
                await _body(send, chunk)
            await _body(send, b"", more=False)
            return 200, "upstream"
        raw = await upstream.read(MEMBER_ERROR_MAX_BYTES)
    except UpstreamFailure as err:  # the member failed mid-answer: say so in the stream
        failed = upstream_error(member, url, err.kind, str(err))
        await _body(send, error_event(failed.body()), more=False)
        return failed.status, failed.code
    status = upstream.status if upstream.status >= 400 else 502
    await _body(send, error_event(member_error_body(raw, status)), more=False)
    return status, "upstream"


async def _body(
    send: Callable[[dict[str, Any]], Awaitable[None]], data: bytes, *, more: bool = True
) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": more})
