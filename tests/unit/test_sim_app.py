"""The simulator's HTTP surface in-process: what a pool controller and a proxy see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from controlplane.sim.app import build_app
from controlplane.sim.model import SimulatedModel
from controlplane.sim.settings import AnswerMode, SimSettings, SlotsMode
from controlplane.sim.testing import GatedClock, ManualClock, wait_until
from controlplane.sim.text import reply_tokens

pytestmark = pytest.mark.anyio

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


@asynccontextmanager
async def serving(model: SimulatedModel) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(model))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        yield client


def loaded(clock: ManualClock | None = None, **settings: Any) -> SimulatedModel:
    model = SimulatedModel(SimSettings(**settings), clock or ManualClock())
    model.mark_loaded()
    return model


async def post_chat(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200


def events(body: str) -> list[str]:
    """The ``data:`` payloads of a server-sent event stream, in order."""
    blocks = [block for block in body.split("\n\n") if block]
    assert all(block.startswith("data: ") for block in blocks), blocks
    return [block.removeprefix("data: ") for block in blocks]


# -- /health and /v1/models -----------------------------------------------------------------------


async def test_health_is_503_loading_until_the_model_has_loaded_then_200_ok() -> None:
    model = SimulatedModel(SimSettings(load_seconds=3), ManualClock())
    async with serving(model) as client:
        response = await client.get("/health")
        assert (response.status_code, response.json()) == (503, LOADING)
        assert response.headers["content-type"] == "application/json; charset=utf-8"
        await model.load()
        response = await client.get("/health")
        assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_models_is_503_while_loading_then_lists_the_served_name_twice() -> None:
    model = SimulatedModel(SimSettings(model_name="llama-a", n_ctx=1024), ManualClock())
    async with serving(model) as client:
        response = await client.get("/v1/models")
        assert (response.status_code, response.json()) == (503, LOADING)
        model.mark_loaded()
        body = (await client.get("/v1/models")).json()
    assert body["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in body["data"]] == [
        ("llama-a", "model", "llamacpp")
    ]
    assert body["data"][0]["meta"]["n_ctx"] == 1024
    assert [m["name"] for m in body["models"]] == ["llama-a"]


# -- /slots -----------------------------------------------------------------------------------


async def test_slots_is_an_array_with_one_idle_entry_per_slot() -> None:
    async with serving(loaded(slots=3, n_ctx=2048)) as client:
        response = await client.get("/slots")
    assert response.status_code == 200
    slots = response.json()
    assert [s["id"] for s in slots] == [0, 1, 2]
    assert all(s["is_processing"] is False and s["n_ctx"] == 2048 for s in slots)
    # Never used: only these four keys, as llama-server writes such a slot.
    assert all(set(s) == {"id", "n_ctx", "speculative", "is_processing"} for s in slots)


async def test_slots_shows_is_processing_for_the_slot_a_completion_holds() -> None:
    clock = GatedClock()
    model = loaded(clock, slots=2)
    async with serving(model) as client, anyio.create_task_group() as group:
        group.start_soon(post_chat, client)
        await wait_until(lambda: clock.blocked == 1)  # generating its first token
        busy = (await client.get("/slots")).json()
        assert [s["is_processing"] for s in busy] == [True, False]
        assert busy[0]["id_task"] == 0
        assert busy[0]["n_prompt_tokens"] == 6
        [next_token] = busy[0]["next_token"]  # a list, as llama-server has it
        assert next_token["has_next_token"] is True
        assert "id_task" not in busy[1]
        clock.open()
    async with serving(model) as client:
        idle = (await client.get("/slots")).json()
    assert [s["is_processing"] for s in idle] == [False, False]
    # The finished slot keeps its task and parameters; its counters are reset.
    assert idle[0]["id_task"] == 0
    assert isinstance(idle[0]["params"], dict)
    assert idle[0]["next_token"] == [
        {"has_next_token": False, "has_new_line": False, "n_remain": -1, "n_decoded": 0}
    ]


async def test_legacy_slots_report_state_one_while_processing_and_zero_when_idle() -> None:
    clock = GatedClock()
    model = loaded(clock, slots=2, legacy_slots=True)
    async with serving(model) as client, anyio.create_task_group() as group:
        group.start_soon(post_chat, client)
        await wait_until(lambda: clock.blocked == 1)
        busy = (await client.get("/slots")).json()
        clock.open()
    assert [s["state"] for s in busy] == [1, 0]
    assert all("is_processing" not in s for s in busy)
    assert all(set(s) >= {"id", "n_ctx", "task_id"} for s in busy)


async def test_slots_is_501_not_supported_when_the_endpoint_is_disabled() -> None:
    async with serving(loaded(slots_endpoint=False)) as client:
        response = await client.get("/slots")
    assert response.status_code == 501
    assert response.json() == {
        "error": {
            "code": 501,
            "message": "This server does not support slots endpoint. Start it with `--slots`",
            "type": "not_supported_error",
        }
    }


async def test_slots_is_503_while_the_model_loads() -> None:
    async with serving(SimulatedModel(SimSettings(), ManualClock())) as client:
        response = await client.get("/slots")
    assert (response.status_code, response.json()) == (503, LOADING)


async def test_slots_mode_error500_answers_a_server_error() -> None:
    async with serving(loaded(slots_mode=SlotsMode.ERROR500)) as client:
        response = await client.get("/slots")
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"


async def test_slots_mode_malformed_answers_200_with_a_body_that_is_not_an_array() -> None:
    async with serving(loaded(slots_mode=SlotsMode.MALFORMED)) as client:
        response = await client.get("/slots")
    assert response.status_code == 200
    assert not isinstance(response.json(), list)


async def test_slots_mode_slow_hangs_past_a_probe_timeout_until_shutdown() -> None:
    model = loaded(slots_mode=SlotsMode.SLOW, slow_slots_seconds=3600)
    answers: list[httpx.Response] = []
    async with serving(model) as client:
        with anyio.move_on_after(0.2) as probe:
            await client.get("/slots")
        assert probe.cancelled_caught  # a probe with a timeout gives up

        async def late_probe() -> None:
            answers.append(await client.get("/slots"))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(late_probe)
                await anyio.sleep(0.05)
                assert answers == []
                model.begin_shutdown()
    assert answers[0].status_code == 200
    assert isinstance(answers[0].json(), list)


async def test_slots_mode_switches_at_run_time_through_the_admin_endpoint() -> None:
    async with serving(loaded()) as client:
        assert (await client.get("/sim/slots-mode")).json() == {"mode": "normal"}
        switched = await client.post("/sim/slots-mode", json={"mode": "error500"})
        assert switched.json() == {"mode": "error500"}
        assert (await client.get("/slots")).status_code == 500
        await client.post("/sim/slots-mode", json={"mode": "malformed"})
        assert isinstance((await client.get("/slots")).json(), dict)
        await client.post("/sim/slots-mode", json={"mode": "normal"})
        assert isinstance((await client.get("/slots")).json(), list)
        bad = await client.post("/sim/slots-mode", json={"mode": "sideways"})
        assert bad.status_code == 400
        assert "'mode' must be one of" in bad.json()["error"]["message"]


async def test_fail_on_no_slot_is_503_only_while_every_slot_is_busy() -> None:
    clock = GatedClock()
    model = loaded(clock, slots=1)
    async with serving(model) as client:
        assert (await client.get("/slots?fail_on_no_slot=1")).status_code == 200
        async with anyio.create_task_group() as group:
            group.start_soon(post_chat, client)
            await wait_until(lambda: clock.blocked == 1)
            full = await client.get("/slots?fail_on_no_slot=1")
            empty_value = await client.get("/slots?fail_on_no_slot=")
            clock.open()
    assert full.status_code == 503
    assert full.json()["error"] == {
        "code": 503,
        "message": "no slot available",
        "type": "unavailable_error",
    }
    assert empty_value.status_code == 200  # llama-server checks for a non-empty value


# -- chat completions ---------------------------------------------------------------------------


async def test_a_completion_returns_a_chat_completion_with_deterministic_text_and_usage() -> None:
    clock = ManualClock()
    model = loaded(clock, model_name="served", reply_tokens=5, token_seconds=0.5)
    async with serving(model) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "served"  # the served name, whatever the request said
    [choice] = body["choices"]
    assert choice["message"] == {
        "role": "assistant",
        "content": "hello there hello there hello",
    }
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["prompt_tokens"] == 2 + 4
    assert body["usage"]["total_tokens"] == 11
    assert body["timings"]["predicted_n"] == 5
    assert body["timings"]["predicted_ms"] == pytest.approx(2500.0)
    assert clock.sleeps == [0.5] * 5


async def test_max_tokens_cuts_the_reply_and_says_length() -> None:
    async with serving(loaded()) as client:
        body = (await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})).json()
    assert body["choices"][0]["message"]["content"] == "hello there hello"
    assert body["choices"][0]["finish_reason"] == "length"


async def test_a_stream_is_role_then_one_chunk_per_token_then_finish_then_done() -> None:
    async with serving(loaded()) as client:
        request = {**CHAT, "stream": True, "max_tokens": 4}
        response = await client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = events(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = [msgspec.json.decode(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    assert deltas == list(reply_tokens("hello there", 4))
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["timings"]["predicted_n"] == 4


async def test_a_stream_with_include_usage_ends_with_a_usage_chunk_before_done() -> None:
    async with serving(loaded(reply_tokens=2)) as client:
        request = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        response = await client.post("/v1/chat/completions", json=request)
    payloads = events(response.text)
    assert payloads[-1] == "[DONE]"
    usage_chunk = msgspec.json.decode(payloads[-2])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "completion_tokens": 2,
        "prompt_tokens": 6,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


async def test_a_completion_waits_for_a_slot_when_all_are_busy() -> None:
    clock = GatedClock()
    model = loaded(clock, slots=1, reply_tokens=1)
    done: list[int] = []

    async def complete(index: int) -> None:
        response = await client.post("/v1/chat/completions", json=CHAT)
        assert response.status_code == 200
        done.append(index)

    async with serving(model) as client, anyio.create_task_group() as group:
        group.start_soon(complete, 1)
        await wait_until(lambda: clock.blocked == 1)
        group.start_soon(complete, 2)
        await wait_until(lambda: model.waiting == 1)
        assert clock.blocked == 1  # the second is queued, not generating
        clock.open()
    assert done == [1, 2]


async def test_completions_are_503_while_the_model_loads() -> None:
    async with serving(SimulatedModel(SimSettings(), ManualClock())) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert (response.status_code, response.json()) == (503, LOADING)


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"[1, 2]", "must be a JSON object, got array"),
        (b'"text"', "must be a JSON object, got string"),
        (b'{"model": "m"}', "'messages' is required"),
        (b'{"messages": "hi"}', "'messages' must be an array"),
        (b'{"messages": []}', "'messages' must not be empty"),
        (b'{"messages": [1]}', "'messages[0]' must be an object"),
        (b'{"messages": [{"content": "x"}]}', "'messages[0].role'"),
        (b'{"messages": [{"role": "user", "content": 5}]}', "'messages[0].content'"),
        (b'{"messages": [{"role": "user", "content": [{"text": "x"}]}]}', "content[0]"),
        (b'{"model": 7, "messages": [{"role": "user", "content": "x"}]}', "'model' must be"),
        (b'{"max_tokens": "3", "messages": [{"role": "user", "content": "x"}]}', "'max_tokens'"),
        (b'{"max_tokens": -2, "messages": [{"role": "user", "content": "x"}]}', "'max_tokens'"),
        (b'{"stream": "yes", "messages": [{"role": "user", "content": "x"}]}', "'stream'"),
        (b'{"stream_options": 1, "messages": [{"role": "u", "content": "x"}]}', "stream_options"),
    ],
)
async def test_malformed_requests_are_400_invalid_request_naming_the_problem(
    body: bytes, names: str
) -> None:
    model = loaded()
    async with serving(model) as client:
        response = await client.post("/v1/chat/completions", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error", 400)
    assert names in error["message"]
    assert [s.processing for s in model.slots()] == [False]


@pytest.mark.parametrize("body", [b"{not json", b""])
async def test_a_body_that_is_not_json_is_a_500_server_error_as_llama_server_answers_it(
    body: bytes,
) -> None:
    model = loaded()
    async with serving(model) as client:
        response = await client.post("/v1/chat/completions", content=body)
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", 500)
    assert "not valid JSON" in error["message"]
    assert [s.processing for s in model.slots()] == [False]


async def test_content_parts_and_null_content_are_accepted() -> None:
    request = {
        "messages": [
            {"role": "assistant", "content": None},
            {"role": "user", "content": [{"type": "text", "text": "parts work"}]},
        ],
        "max_tokens": 2,
    }
    async with serving(loaded()) as client:
        response = await client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "parts work"


# -- everything else ----------------------------------------------------------------------------


async def test_an_unknown_path_is_a_json_404() -> None:
    async with serving(loaded()) as client:
        response = await client.get("/v2/nothing")
    assert response.status_code == 404
    assert response.json() == {
        "error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}
    }


async def test_a_wrong_method_is_a_json_error_not_a_completion() -> None:
    async with serving(loaded()) as client:
        response = await client.get("/v1/chat/completions")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == 405


async def test_answer_mode_switches_for_a_while_through_the_admin_endpoint() -> None:
    clock = ManualClock()
    async with serving(loaded(clock)) as client:
        assert (await client.get("/sim/answer-mode")).json() == {"mode": "normal"}
        switched = await client.post("/sim/answer-mode", json={"mode": "error-text", "seconds": 5})
        assert switched.json() == {"mode": "error-text", "seconds_left": 5.0}
        page = await client.post("/v1/chat/completions", json=CHAT)
        assert page.status_code == 500
        assert page.headers["content-type"].startswith("text/html")
        clock.time += 5
        await post_chat(client)  # the switch ran out: answered as llama-server does
        bad = await client.post("/sim/answer-mode", json={"mode": "slow"})
        assert bad.status_code == 400
        assert "garbage, cut, huge, stall, error-text" in bad.json()["error"]["message"]


async def test_a_stalled_answer_sends_half_its_body_then_the_rest_once_the_stall_ends() -> None:
    model = loaded(stall_seconds=3600, answer_mode=AnswerMode.STALL)
    async with serving(model) as client, anyio.create_task_group() as group:
        answers: list[httpx.Response] = []

        async def ask() -> None:
            answers.append(await client.post("/v1/chat/completions", json=CHAT))

        group.start_soon(ask)
        await anyio.sleep(0.2)
        assert answers == []  # stalled mid-body
        model.begin_shutdown()  # the stall ends with the server's shutdown
    assert answers[0].status_code == 200
    assert answers[0].json()["object"] == "chat.completion"
