"""A broken member, and what the proxy's client gets for it (docs/router.md, "Broken members").

The member is a real ``controlplane sim`` process switched between its answer modes
(``/sim/answer-mode``: garbage, cut, huge, stall, error-text); the proxy is the real app on the
real server protocol and upstream client, on loopback, routing one non-pooled backend to it (no
Kubernetes: what is under test is the data path). Each case asserts the client's whole answer,
the reason the proxy counted, and that no connection to the member is left open afterwards.

Before the change, garbage was taken for a request never sent (and sent twice more), a stream
the member cut or stalled ended with no word of it (uvicorn closed the connection and logged an
application error), and a member streaming without end held the client for as long as it liked.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from controlplane.router.errors import request_refusal
from controlplane.router.upstream import UpstreamTimeouts
from controlplane.runtime.coalescing import http_protocol
from controlplane.runtime.httpserver import bind, serve
from controlplane.runtime.metrics import REGISTRY
from controlplane.runtime.requestlimits import RequestLimits, guarded_protocol
from tests.e2e.httpclients import http_client
from tests.e2e.test_sim_process import Simulator, simulator
from tests.fuzz.proxy import ProxyOptions, proxy_app

# Marked here, not only by conftest after collection: anyio must see the mark while pytest
# parametrizes, or the table's parameters are lost.
pytestmark = pytest.mark.anyio

#: The proxy's read timeout in these tests: the stalled member stalls for far longer.
READ_TIMEOUT = 1.0
#: The most of an answer the proxy passes on here (the member's ``huge`` answer is 10 GiB).
MAX_ANSWER_BYTES = 2 * 1024 * 1024
#: TCP state ESTABLISHED in /proc/net/tcp.
ESTABLISHED = "01"


@asynccontextmanager
async def proxy_to(member: str, max_answer_bytes: int = MAX_ANSWER_BYTES) -> AsyncIterator[str]:
    """The proxy app (the fuzzers' build of it) on its server protocol with the default limits,
    backend ``solo`` served by ``member``."""
    options = ProxyOptions(
        max_answer_bytes=max_answer_bytes,
        timeouts=UpstreamTimeouts(connect=5.0, read=READ_TIMEOUT),
        tracing=False,
    )
    app, upstream = proxy_app(member, options)
    base = http_protocol()
    assert not isinstance(base, str), "httptools is a dependency: the protocol must be ours"
    protocol = guarded_protocol(base, RequestLimits(), request_refusal)
    sock = bind("127.0.0.1", 0)
    try:
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(serve, app, [sock], http=protocol))
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            group.cancel_scope.cancel()
    finally:
        await upstream.aclose()


@pytest.fixture
async def member(tmp_path: Path) -> AsyncIterator[Simulator]:
    async with simulator(tmp_path, "--token-seconds", "0", "--stall-seconds", "600") as sim:
        await sim.wait_ready()
        yield sim


async def answer_mode(sim: Simulator, mode: str) -> None:
    async with http_client(base_url=sim.url, timeout=10.0) as client:
        response = await client.post("/sim/answer-mode", json={"mode": mode})
    assert response.status_code == 200, response.text


def chat(stream: bool) -> dict[str, Any]:
    return {"model": "solo", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


def counted(reason: str, code: int) -> float:
    value = REGISTRY.get_sample_value(
        "modelpool_proxy_requests_total", {"model": "solo", "code": str(code), "reason": reason}
    )
    return value or 0.0


def open_connections_to(url: str) -> int:
    """Connections to ``url``'s port still established on this host's loopback (both ends
    show in /proc/net/tcp; only the proxy's end has the member's port as its remote one)."""
    port = int(url.rsplit(":", 1)[1])
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if int(remote.split(":")[1], 16) == port and state == ESTABLISHED:
            count += 1
    return count


async def no_connection_left(member: Simulator, kept: int = 0) -> None:
    """The proxy dropped every connection to the member but the ``kept`` ones its pool may keep
    (an answer read to its end leaves its connection reusable; a broken one never)."""
    with anyio.fail_after(5):
        while open_connections_to(member.url) > kept:  # noqa: ASYNC110 (the kernel's table is polled)
            await anyio.sleep(0.05)


def assert_error_shape(body: dict[str, Any], code: str) -> None:
    error = body["error"]
    assert set(error) >= {"message", "type", "code"}, body
    assert error["code"] == code, body
    assert isinstance(error["message"], str), body
    assert error["message"], body


def events_of(text: str) -> list[str]:
    return [part.removeprefix("data: ") for part in text.split("\n\n") if part.strip()]


@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [
        ("garbage", 502, "upstream_bad_answer"),
        ("huge", 502, "upstream_answer_too_large"),  # 10 GiB declared up front
        ("stall", 504, "upstream_timeout"),  # half a sized body, then nothing
        ("error-text", 500, "member_error"),  # an HTML page, not JSON
    ],
)
async def test_a_broken_answer_before_any_byte_reached_the_client_is_one_error(
    member: Simulator, mode: str, status: int, code: str
) -> None:
    await answer_mode(member, mode)
    reason = "upstream" if mode == "error-text" else code
    before = counted(reason, status)
    async with (
        proxy_to(member.url) as proxy,
        http_client(timeout=30) as client,
    ):
        response = await client.post(f"{proxy}/v1/chat/completions", json=chat(stream=False))
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/json"
        assert_error_shape(response.json(), code)
        assert counted(reason, status) == before + 1
        await no_connection_left(member, kept=1 if mode == "error-text" else 0)


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("cut", "upstream_disconnected"),
        ("stall", "upstream_timeout"),
        ("huge", "upstream_answer_too_large"),  # events without end, past --max-answer-bytes
    ],
)
async def test_an_event_stream_that_breaks_ends_with_one_error_event(
    member: Simulator, mode: str, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    await answer_mode(member, mode)
    before = counted(code, 200)
    async with (
        proxy_to(member.url) as proxy,
        http_client(timeout=30) as client,
    ):
        response = await client.post(f"{proxy}/v1/chat/completions", json=chat(stream=True))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = events_of(response.text)  # read to a proper end: no protocol error raised
        assert len(events) >= 2, events  # the member's first event(s) came through
        assert json.loads(events[0])["object"] == "chat.completion.chunk"
        assert_error_shape(json.loads(events[-1]), code)
        assert all("error" not in json.loads(event) for event in events[:-1])
        assert counted(code, 200) == before + 1
        await no_connection_left(member)
    assert "Exception in ASGI application" not in caplog.text


async def test_a_body_that_is_not_an_event_stream_cut_mid_way_is_an_incomplete_answer(
    member: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    """Once a 2xx head is out, closing without the body's end is the one honest signal left:
    the client sees an incomplete answer, never a short one that looks whole."""
    await answer_mode(member, "cut")
    before = counted("upstream_disconnected", 200)
    caplog.set_level(logging.INFO)
    async with (
        proxy_to(member.url) as proxy,
        http_client(timeout=30) as client,
    ):
        with pytest.raises(httpx.RemoteProtocolError, match=r"incomplete|without sending complete"):
            await client.post(f"{proxy}/v1/chat/completions", json=chat(stream=False))
        assert counted("upstream_disconnected", 200) == before + 1
        await no_connection_left(member)
        await answer_mode(member, "normal")  # the proxy serves on, on a new connection
        response = await client.post(f"{proxy}/v1/chat/completions", json=chat(stream=False))
        assert response.status_code == 200
    assert "answer cut" in caplog.text
    assert "Exception in ASGI application" not in caplog.text


async def test_a_client_that_leaves_a_huge_body_drops_the_members_connection_too(
    member: Simulator,
) -> None:
    await answer_mode(member, "huge")
    async with proxy_to(member.url, max_answer_bytes=20 * 1024**3) as proxy:
        async with (
            http_client(timeout=30) as client,
            client.stream(
                "POST", f"{proxy}/v1/chat/completions", json=chat(stream=False)
            ) as response,
        ):
            assert response.status_code == 200
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read > 4 * 1024 * 1024:
                    break
        await no_connection_left(member)


async def test_an_error_answer_longer_than_the_answer_limit_is_refused_by_its_declared_length(
    member: Simulator,
) -> None:
    """Found by the member-side fuzzer: an error body is read for rewriting (up to 64 KiB), and
    was read even when it declared more than ``--max-answer-bytes``."""
    await answer_mode(member, "error-text")  # an HTML page of about 90 bytes
    async with (
        proxy_to(member.url, max_answer_bytes=16) as proxy,
        http_client() as client,
    ):
        response = await client.post(f"{proxy}/v1/chat/completions", json=chat(stream=False))
    assert response.status_code == 502
    assert_error_shape(response.json(), "upstream_answer_too_large")
