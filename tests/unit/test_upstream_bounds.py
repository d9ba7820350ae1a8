"""The bounds the proxy puts on a member's answer, and how a broken one is named (pure logic).

:func:`whole_events` must hand on whole SSE events only, so that an error event after a broken
stream is read as one; :func:`bounded_chunks` must stop a body past its limit; aiohttp's refusal
of what is not HTTP must be a failure of an answer that was sent, never one that may be sent
again.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from controlplane.router.errors import (
    UpstreamAnswerTooLarge,
    UpstreamBadAnswer,
    UpstreamError,
    UpstreamTimeout,
    upstream_error,
)
from controlplane.router.upstream import (
    AnswerTooLarge,
    BadAnswer,
    _failure,
    bounded_chunks,
    whole_events,
)

pytestmark = pytest.mark.anyio


async def _from(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


class _Answer:
    """As much of an upstream answer as :func:`bounded_chunks` uses."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self.headers: dict[str, str] = {}

    def chunks(self) -> AsyncIterator[bytes]:
        return _from(self._chunks)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


EVENTS = st.lists(
    st.binary(max_size=40).map(lambda b: b"data: " + b.replace(b"\n", b"").replace(b"\r", b"")),
    min_size=1,
    max_size=8,
)


@given(events=EVENTS, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=10))
async def test_whole_events_hands_on_only_whole_events_and_everything_in_the_end(
    events: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(event + b"\n\n" for event in events)
    got = [chunk async for chunk in whole_events(_from(_split(stream, cuts)))]
    assert b"".join(got) == stream
    assert all(chunk.endswith(b"\n\n") for chunk in got)


async def test_whole_events_holds_back_an_unfinished_event_when_the_stream_breaks() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"data: one\n\ndata: tw"
        raise BadAnswer("cut")

    got: list[bytes] = []

    async def relay() -> None:
        async for chunk in whole_events(broken()):
            got.append(chunk)

    with pytest.raises(BadAnswer):
        await relay()
    assert got == [b"data: one\n\n"]


async def test_whole_events_knows_crlf_boundaries_too() -> None:
    got = [chunk async for chunk in whole_events(_from([b"data: a\r\n\r\ndata: b"]))]
    assert got == [b"data: a\r\n\r\n", b"data: b"]


async def test_bounded_chunks_stop_past_the_limit_and_not_before() -> None:
    exactly = [chunk async for chunk in bounded_chunks(_Answer([b"ab", b"cd"]), 4)]  # type: ignore[arg-type]
    assert exactly == [b"ab", b"cd"]
    with pytest.raises(AnswerTooLarge):
        async for _ in bounded_chunks(_Answer([b"ab", b"cd", b"e"]), 4):  # type: ignore[arg-type]
            pass


def test_an_answer_that_is_not_http_was_sent_and_is_named_so() -> None:
    refusal = aiohttp.ClientResponseError(
        aiohttp.RequestInfo(URL("http://m"), "POST", CIMultiDictProxy(CIMultiDict())),
        (),
        status=400,
        message="Bad status line:\n  Expected HTTP/",
    )
    failure = _failure(refusal, connected=False)
    assert isinstance(failure, BadAnswer)
    assert not failure.unsent  # the member may have taken it: never sent again
    assert "Bad status line" in str(failure)


@pytest.mark.parametrize(
    ("kind", "error", "status"),
    [
        ("bad_answer", UpstreamBadAnswer, 502),
        ("too_large", UpstreamAnswerTooLarge, 502),
        ("timeout", UpstreamTimeout, 504),
        ("unreachable", UpstreamError, 502),
    ],
)
def test_each_kind_of_member_failure_is_its_own_error(
    kind: str, error: type[UpstreamError], status: int
) -> None:
    failed = upstream_error("b", "http://10.0.0.1:8080", kind, "what happened")
    assert type(failed) is error
    assert failed.status == status
    assert failed.message == "b at http://10.0.0.1:8080: what happened"
