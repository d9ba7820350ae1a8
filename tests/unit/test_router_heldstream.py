"""A held streamed request kept open (docs/router.md, "Held streams"): 200 at once, a comment
saying when its member is expected while it waits, then the member's stream, or one error event
in the proxy's error shape; a client that leaves cancels the hold."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

from controlplane.router.errors import ActivationTimeout
from controlplane.router.heldstream import Dispatched, keepalive_comment, serve_held_stream
from controlplane.router.upstream import UpstreamFailure

pytestmark = pytest.mark.anyio

Message = dict[str, Any]


class Answer:
    """A member's answer, as the upstream client hands it over."""

    def __init__(
        self, status: int, content_type: str, chunks: list[bytes], fail_after: int | None = None
    ) -> None:
        self.status = status
        self.headers: Mapping[str, str] = {"content-type": content_type}
        self._chunks = chunks
        self.fail_after = fail_after
        self.closed = False

    async def read(self, limit: int | None = None) -> bytes:
        return b"".join(self._chunks)[:limit]

    async def chunks(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self._chunks):
            if self.fail_after is not None and index >= self.fail_after:
                raise UpstreamFailure("the member closed the connection mid-stream")
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


class Client:
    """ASGI's ``send``, recording; ``gone_after`` messages in, it raises as a closed socket."""

    def __init__(self, gone_after: int | None = None) -> None:
        self.sent: list[Message] = []
        self.gone_after = gone_after

    async def send(self, message: Message) -> None:
        if self.gone_after is not None and len(self.sent) >= self.gone_after:
            raise OSError("the client went away")
        self.sent.append(message)

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]

    def events(self) -> list[Any]:
        """The ``data:`` events of the stream, decoded."""
        text = b"".join(self.bodies()).decode()
        return [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: ")]


def dispatching(
    answer: Answer | Exception, after: float, released: list[bool] | None = None
) -> Any:
    async def dispatch() -> Dispatched:
        await anyio.sleep(after)
        if isinstance(answer, Exception):
            raise answer
        return answer, "http://b", lambda: (released if released is not None else []).append(True)

    return dispatch


async def test_comments_keep_it_open_until_the_member_streams() -> None:
    stream = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]
    answer, client = Answer(200, "text/event-stream", stream), Client()
    released: list[bool] = []
    status, reason = await serve_held_stream(
        client.send,
        dispatching(answer, 0.35, released),
        member="b",
        interval=0.1,
        expected_in=lambda: 7,
    )
    start = client.sent[0]
    assert (start["type"], start["status"]) == ("http.response.start", 200)
    assert (b"content-type", b"text/event-stream") in start["headers"]
    bodies = client.bodies()
    comments = [b for b in bodies if b.startswith(b":")]
    assert len(comments) >= 2, "nothing kept the held stream alive"
    assert comments[0] == b": held for b; expected in about 7 s\n\n"
    assert bodies[len(comments) :] == [*stream, b""], "the member's stream was not relayed"
    assert client.sent[-1]["more_body"] is False
    assert (status, reason) == (200, "upstream")
    assert answer.closed, "the member's answer leaked"
    assert released == [True], "the in-flight count leaked"


async def test_a_hold_that_ends_in_an_error_closes_with_one_error_event() -> None:
    client = Client()
    status, reason = await serve_held_stream(
        client.send,
        dispatching(ActivationTimeout("b did not come up within 0.2 s"), 0.25),
        member="b",
        interval=0.1,
        expected_in=lambda: None,
    )
    assert client.sent[0]["status"] == 200
    assert b": held for b\n\n" in client.bodies(), "no estimate: the comment says so"
    (event,) = client.events()
    assert event["error"]["code"] == "pool_activation_timeout"
    assert set(event["error"]) == {"message", "type", "code"}
    assert (status, reason) == (503, "pool_activation_timeout")
    assert client.sent[-1]["more_body"] is False


async def test_a_member_error_answer_becomes_an_error_event_in_the_proxy_shape() -> None:
    member_says = json.dumps(
        {"error": {"message": "n_ctx exceeded", "type": "invalid", "code": 400}}
    )
    answer, client = Answer(400, "application/json", [member_says.encode()]), Client()
    status, _ = await serve_held_stream(
        client.send, dispatching(answer, 0.0), member="b", interval=0.1, expected_in=lambda: 3
    )
    (event,) = client.events()
    assert event["error"]["message"] == "n_ctx exceeded"
    assert isinstance(event["error"]["code"], str)
    assert status == 400
    assert answer.closed


async def test_a_member_that_fails_mid_stream_ends_it_with_an_error_event() -> None:
    chunks = [b'data: {"choices":[]}\n\n', b"never sent"]
    answer, client = Answer(200, "text/event-stream", chunks, fail_after=1), Client()
    status, reason = await serve_held_stream(
        client.send, dispatching(answer, 0.0), member="b", interval=0.1, expected_in=lambda: 3
    )
    events = client.events()
    assert events[0] == {"choices": []}
    assert events[-1]["error"]["code"] == reason
    assert status == 502
    assert answer.closed


async def test_a_client_that_leaves_cancels_the_hold() -> None:
    cancelled = anyio.Event()

    async def dispatch() -> Dispatched:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        raise AssertionError("the hold outlived its client")

    client = Client(gone_after=2)  # the start and one comment, then the socket is closed
    with pytest.raises(OSError, match="went away"):
        await serve_held_stream(
            client.send, dispatch, member="b", interval=0.05, expected_in=lambda: 3
        )
    assert cancelled.is_set()


def test_the_comment_is_an_sse_comment_that_clients_skip() -> None:
    comment = keepalive_comment("llama-3-8b", 12).decode()
    assert comment.startswith(":")
    assert comment.endswith("\n\n")
    assert "\n" not in comment[:-2], "one line: a second one would not start with ':'"
