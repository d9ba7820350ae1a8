"""One contract, two servers: the simulator and the real llama.cpp ``llama-server``.

The pool's safety rests on what a member's ``/slots`` and ``/health`` say (the drain gate, the
readiness the node reports), and the router-proxy forwards chat completions, streams included, to
members. Every test here runs against both servers, started alike (two slots of 2,048 tokens,
served under an alias), so the simulator every other test uses is held to what the real server
does, and the idle probe is tested on the real thing, busy and idle.

The router mode the pool's slot runtime runs (``--models-dir`` with two tiny models, at most one
loaded, none unless asked) is held to the same: which models it lists and in which state, what a
load and an unload answer, at the limit too, and what a request for a model not loaded gets.

No Kubernetes here. Assertions are about states and their order, never about durations: a
"busy" slot is looked at after the stream's first content chunk and before its last, which both
servers guarantee is while the slot is processing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from controlplane.envtest.tinymodel import TinyModelSpec
from controlplane.probes.idle import IdleOutcome
from controlplane.probes.llamacpp import SlotsProbe
from controlplane.sim.metrics import COUNTERS, GAUGES, parse_text
from tests.e2e.httpclients import http_client
from tests.e2e.llamaservers import ROUTER_MODELS, RunningServer, ServerKind, serve, serve_router
from tests.e2e.waiting import eventually

# Marked here, not only by conftest after collection: anyio must see the mark while pytest
# parametrizes, or the server parameters are lost.
pytestmark = pytest.mark.anyio

KINDS = pytest.mark.parametrize("server_kind", list(ServerKind), ids=lambda kind: kind.value)
LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
NO_SLOT = {"error": {"code": 503, "message": "no slot available", "type": "unavailable_error"}}
NEVER_USED_KEYS = {"id", "n_ctx", "speculative", "is_processing"}
#: Long enough that a slot is still busy when the test looks (seconds on either server).
LONG_STREAM_TOKENS = 1500
#: A model the real server takes a few hundred milliseconds to load (75 MB), so its loading
#: phase is long enough to be seen; the simulator is told to load for a second instead.
SLOW_LOADING_MODEL = TinyModelSpec(n_embd=512, n_layer=8, n_head=8, n_ff=1024)


@pytest.fixture(params=list(ServerKind), ids=lambda kind: kind.value)
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with serve(request.param, tmp_path) as running:
        await running.wait_ready()
        yield running


def chat(*, stream: bool, max_tokens: int) -> dict[str, Any]:
    return {
        "model": "whatever-the-client-says",
        "messages": [{"role": "user", "content": "hello there, tell me a story"}],
        "stream": stream,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


async def get_slots(server: RunningServer, query: str = "") -> httpx.Response:
    async with http_client(timeout=10.0) as client:
        return await client.get(f"{server.url}/slots{query}")


async def slots(server: RunningServer) -> list[dict[str, Any]]:
    response = await get_slots(server)
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body, list)
    return body


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The stream's lines as server-sent events end them (LF, CRLF or CR), and nothing else:
    ``aiter_lines`` also splits at U+2028, U+0085 and the like, which a random-weights model's
    tokens contain and JSON leaves unescaped inside a chunk."""
    pending = b""
    async for data in response.aiter_bytes():
        pending += data
        *complete, pending = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        for line in complete:
            yield line.decode()
    if pending:
        yield pending.decode()


class StreamedChat:
    """A streamed completion read up to its first content chunk, the rest on :meth:`finish`."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = sse_lines(response)
        self.payloads: list[str] = []

    async def _next(self) -> str | None:
        async for line in self.lines:
            if line:
                assert line.startswith("data: "), line
                payload = line.removeprefix("data: ")
                self.payloads.append(payload)
                return payload
        return None

    async def first_content(self) -> None:
        while (payload := await self._next()) is not None:
            if payload != "[DONE]" and msgspec.json.decode(payload)["choices"][0]["delta"].get(
                "content"
            ):
                return
        raise AssertionError(f"the stream ended without content: {self.payloads}")

    async def finish(self) -> list[str]:
        while await self._next() is not None:
            pass
        return self.payloads


@asynccontextmanager
async def streaming(server: RunningServer) -> AsyncIterator[StreamedChat]:
    """A long streamed completion, yielded once its first content chunk has arrived."""
    async with (
        http_client(base_url=server.url, timeout=120.0) as client,
        client.stream(
            "POST", "/v1/chat/completions", json=chat(stream=True, max_tokens=LONG_STREAM_TOKENS)
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        streamed = StreamedChat(response)
        await streamed.first_content()
        yield streamed


# -- /health ---------------------------------------------------------------------------------------


@KINDS
async def test_health_is_503_loading_while_the_model_loads_then_200(
    server_kind: ServerKind, tmp_path: Path
) -> None:
    seen: list[tuple[int, Any]] = []
    while_loading: dict[str, httpx.Response] = {}
    async with (
        serve(server_kind, tmp_path, model=SLOW_LOADING_MODEL, load_seconds=1.0) as server,
        http_client(base_url=server.url, timeout=10.0) as client,
    ):
        with anyio.fail_after(60):
            while not seen or seen[-1][0] != 200:
                try:
                    response = await client.get("/health")
                except httpx.TransportError:
                    assert server.process.returncode is None, server.log_text()
                    await anyio.sleep(0.001)  # not listening yet
                    continue
                outcome = (response.status_code, response.json())
                if not seen or seen[-1] != outcome:
                    seen.append(outcome)
                if response.status_code == 503 and not while_loading:
                    slots_answer = await client.get("/slots")
                    models_answer = await client.get("/v1/models")
                    if (await client.get("/health")).status_code == 503:  # still loading
                        while_loading = {"/slots": slots_answer, "/v1/models": models_answer}
    assert seen == [(503, LOADING), (200, {"status": "ok"})]
    # Loading only ends: a server that was loading when asked after these answered loading too.
    if while_loading:
        for path, answer in while_loading.items():
            assert (answer.status_code, answer.json()) == (503, LOADING), path


# -- /slots ----------------------------------------------------------------------------------------


async def test_never_used_slots_show_only_their_id_context_and_idleness(
    server: RunningServer,
) -> None:
    body = await slots(server)
    assert [slot["id"] for slot in body] == list(range(server.slots))
    assert all(set(slot) == NEVER_USED_KEYS for slot in body), body
    assert all(slot["is_processing"] is False for slot in body)
    assert all(slot["n_ctx"] == server.slot_context for slot in body)


async def test_a_streamed_completion_shows_one_slot_processing_until_its_last_chunk(
    server: RunningServer,
) -> None:
    async with streaming(server) as streamed:
        busy = await slots(server)
        payloads = await streamed.finish()
    after = await slots(server)

    [serving] = [slot for slot in busy if slot["is_processing"]]
    assert isinstance(serving["id_task"], int)
    assert isinstance(serving["params"], dict)
    [next_token] = serving["next_token"]  # a list on both servers
    assert next_token["has_next_token"] is True
    assert next_token["n_decoded"] >= 1
    assert all(set(slot) == NEVER_USED_KEYS for slot in busy if slot is not serving)

    assert [slot["is_processing"] for slot in after] == [False] * server.slots
    [finished] = [slot for slot in after if slot["id"] == serving["id"]]
    assert finished["id_task"] == serving["id_task"]  # a finished slot keeps its task
    assert isinstance(finished["params"], dict)
    assert finished["next_token"][0]["has_next_token"] is False

    assert payloads[-1] == "[DONE]"
    chunks = [msgspec.json.decode(payload) for payload in payloads[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert {chunk["model"] for chunk in chunks} == {server.alias}  # the served name
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["timings"]["predicted_n"] == LONG_STREAM_TOKENS
    contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    # One chunk per token, except that the real server holds back a token that ends inside a
    # UTF-8 sequence and sends it with the next one.
    assert 0 < len(contents) <= LONG_STREAM_TOKENS
    assert all(isinstance(content, str) and content for content in contents)


async def test_fail_on_no_slot_is_503_only_while_every_slot_is_busy(
    server: RunningServer,
) -> None:
    assert (await get_slots(server, "?fail_on_no_slot=1")).status_code == 200
    async with AsyncExitStack() as streams:
        first = await streams.enter_async_context(streaming(server))
        one_busy = await get_slots(server, "?fail_on_no_slot=1")
        second = await streams.enter_async_context(streaming(server))
        all_busy = await get_slots(server, "?fail_on_no_slot=1")
        plain = await get_slots(server)
        await first.finish()
        await second.finish()
    assert one_busy.status_code == 200
    assert (all_busy.status_code, all_busy.json()) == (503, NO_SLOT)
    assert plain.status_code == 200  # without the parameter, a busy server still lists its slots
    assert [slot["is_processing"] for slot in plain.json()] == [True, True]
    assert (await get_slots(server, "?fail_on_no_slot=1")).status_code == 200


async def test_the_idle_probe_reads_the_server_idle_busy_then_idle_again(
    server: RunningServer,
) -> None:
    probe = SlotsProbe()
    try:
        idle = await probe.probe(server.url, member="contract")
        async with streaming(server) as streamed:
            busy = await probe.probe(server.url, member="contract")
            await streamed.finish()
        idle_again = await probe.probe(server.url, member="contract")
    finally:
        await probe.aclose()
    assert (idle.outcome, idle.slots, idle.processing) == (IdleOutcome.IDLE, 2, 0)
    assert (busy.outcome, busy.slots, busy.processing) == (IdleOutcome.BUSY, 2, 1)
    assert (idle_again.outcome, idle_again.processing) == (IdleOutcome.IDLE, 0)


# -- /v1/models and chat completions -------------------------------------------------------------


async def test_models_lists_the_served_alias(server: RunningServer) -> None:
    async with http_client(timeout=10.0) as client:
        response = await client.get(f"{server.url}/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    [model] = body["data"]
    assert (model["id"], model["object"], model["owned_by"]) == (server.alias, "model", "llamacpp")
    assert model["meta"]["n_ctx"] == server.slot_context
    assert isinstance(model["meta"]["n_ctx_train"], int)
    assert [entry["name"] for entry in body["models"]] == [server.alias]


async def test_a_chat_completion_answers_with_the_alias_usage_and_timings(
    server: RunningServer,
) -> None:
    async with http_client(timeout=60.0) as client:
        response = await client.post(
            f"{server.url}/v1/chat/completions", json=chat(stream=False, max_tokens=5)
        )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == server.alias  # whatever the request said
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    usage = body["usage"]
    assert usage["completion_tokens"] == 5
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5
    assert body["timings"]["predicted_n"] == 5
    assert [slot["is_processing"] for slot in await slots(server)] == [False, False]


@pytest.mark.parametrize(
    ("body", "status", "error_type", "message"),
    [
        (b"{not json", 500, "server_error", None),
        (b'{"model": "m"}', 400, "invalid_request_error", "'messages' is required"),
        (b'{"messages": "hi"}', 400, "invalid_request_error", None),
    ],
    ids=["not-json", "no-messages", "messages-not-an-array"],
)
async def test_a_bad_chat_body_is_answered_in_the_error_envelope(
    server: RunningServer, body: bytes, status: int, error_type: str, message: str | None
) -> None:
    async with http_client(timeout=10.0) as client:
        response = await client.post(f"{server.url}/v1/chat/completions", content=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message", "type"}
    assert (error["code"], error["type"]) == (status, error_type)
    if message is not None:
        assert error["message"] == message
    assert "messages" in error["message"] or status == 500
    assert [slot["is_processing"] for slot in await slots(server)] == [False, False]


async def test_an_unknown_path_is_a_404_in_the_error_envelope(server: RunningServer) -> None:
    async with http_client(timeout=10.0) as client:
        response = await client.get(f"{server.url}/no-such-endpoint")
    assert (response.status_code, response.json()) == (
        404,
        {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}},
    )


async def test_metrics_without_the_flag_is_a_501_in_the_error_envelope(
    server: RunningServer,
) -> None:
    async with http_client(timeout=10.0) as client:
        response = await client.get(f"{server.url}/metrics")
    message = "This server does not support metrics endpoint. Start it with `--metrics`"
    assert (response.status_code, response.json()) == (
        501,
        {"error": {"code": 501, "message": message, "type": "not_supported_error"}},
    )


@KINDS
async def test_metrics_with_the_flag_are_the_same_families_counting_the_same_tokens(
    server_kind: ServerKind, tmp_path: Path
) -> None:
    """What the members' PodMonitor scrapes (the operator starts members with --metrics): the
    simulator's families, types and order are the real server's, and both count a completion's
    generated tokens."""
    async with serve(server_kind, tmp_path, metrics=True) as running:
        await running.wait_ready()
        async with http_client(timeout=60.0) as client:
            answer = await client.post(
                f"{running.url}/v1/chat/completions", json=chat(stream=False, max_tokens=5)
            )
            assert answer.status_code == 200, answer.text
            response = await client.get(f"{running.url}/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4"
    assert int(response.headers["process-start-time-unix"]) > 0
    families = parse_text(response.text)
    expected = [(f"llamacpp:{name}", "counter") for name, _ in COUNTERS] + [
        (f"llamacpp:{name}", "gauge") for name, _ in GAUGES
    ]
    assert [(name, kind) for name, (kind, _) in families.items()] == expected
    assert families["llamacpp:tokens_predicted_total"][1] == 5
    assert families["llamacpp:prompt_tokens_total"][1] > 0
    assert families["llamacpp:requests_processing"][1] == 0


# -- router mode -----------------------------------------------------------------------------------


def invalid(message: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}


async def model_states(client: httpx.AsyncClient) -> dict[str, str]:
    answer = await client.get("/models")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "list"
    return {model["id"]: model["status"]["value"] for model in body["data"]}


async def settle(client: httpx.AsyncClient, expected: dict[str, str]) -> None:
    async def reached() -> bool:
        return await model_states(client) == expected

    await eventually(reached, timeout=60, interval=0.02, what=f"/models to say {expected}")


@KINDS
async def test_router_mode_loads_one_model_at_a_time_and_refuses_what_is_not_loaded(
    server_kind: ServerKind, tmp_path: Path
) -> None:
    """What the pool controller reads and does with a slot server: ``data[].id`` and
    ``data[].status.value`` of ``/models``, ``POST /models/load|unload`` and their errors'
    ``error.message`` and ``error.type``, ``/slots`` of a loaded model through the router."""
    a, b = ROUTER_MODELS
    async with (
        serve_router(server_kind, tmp_path) as server,
        http_client(base_url=server.url, timeout=60.0) as client,
    ):
        assert (await client.get("/health")).status_code == 200
        assert await model_states(client) == {a: "unloaded", b: "unloaded"}
        assert (await client.get("/v1/models")).json()["data"][0]["id"] == a

        load_a = await client.post("/models/load", json={"model": a})
        assert (load_a.status_code, load_a.json()) == (200, {"success": True})
        await settle(client, {a: "loaded", b: "unloaded"})

        slots_a = await client.get("/slots", params={"model": a, "autoload": "false"})
        assert slots_a.status_code == 200, slots_a.text
        assert [slot["id"] for slot in slots_a.json()] == list(range(server.slots))
        slots_b = await client.get("/slots", params={"model": b, "autoload": "false"})
        assert (slots_b.status_code, slots_b.json()) == (400, invalid("model is not loaded"))
        chat_b = await client.post(
            "/v1/chat/completions", json={**chat(stream=False, max_tokens=2), "model": b}
        )
        assert (chat_b.status_code, chat_b.json()) == (400, invalid("model is not loaded"))

        again = await client.post("/models/load", json={"model": a})
        assert (again.status_code, again.json()) == (400, invalid("model is already running"))

        # At --models-max 1 with the loaded model idle, it is unloaded (and waited for) first.
        load_b = await client.post("/models/load", json={"model": b})
        assert (load_b.status_code, load_b.json()) == (200, {"success": True})
        assert (await model_states(client))[a] == "unloaded"
        await settle(client, {a: "unloaded", b: "loaded"})

        unload_b = await client.post("/models/unload", json={"model": b})
        assert (unload_b.status_code, unload_b.json()) == (200, {"success": True})
        await settle(client, {a: "unloaded", b: "unloaded"})
        twice = await client.post("/models/unload", json={"model": b})
        assert (twice.status_code, twice.json()) == (400, invalid("model is not running"))

        unknown = await client.post("/models/load", json={"model": "no-such-model"})
        assert (unknown.status_code, unknown.json()) == (
            404,
            {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}},
        )
        unknown_unload = await client.post("/models/unload", json={"model": "no-such-model"})
        assert (unknown_unload.status_code, unknown_unload.json()) == (
            400,
            invalid("model is not found"),
        )


@KINDS
async def test_router_mode_at_the_limit_with_a_model_still_loading_refuses_the_load(
    server_kind: ServerKind, tmp_path: Path
) -> None:
    """A loading model cannot give way: the second load is the limit's 500, the first goes on."""
    a, b = ROUTER_MODELS
    async with (
        serve_router(server_kind, tmp_path) as server,
        http_client(base_url=server.url, timeout=60.0) as client,
    ):
        assert (await client.post("/models/load", json={"model": a})).status_code == 200
        refused = await client.post("/models/load", json={"model": b})
        assert (refused.status_code, refused.json()["error"]) == (
            500,
            {
                "code": 500,
                "message": "model limit reached, try again later",
                "type": "server_error",
            },
        )
        await settle(client, {a: "loaded", b: "unloaded"})
