"""Slot save and restore: the answers judged (shapes seen from llama-server), the simulator's
actions, and the bounded client against the simulator in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from controlplane.probes.slotcache import (
    CacheOutcome,
    SlotCacheClient,
    read_restore,
    read_save,
    used_slots,
)
from controlplane.sim.app import build_app
from controlplane.sim.model import SimulatedModel
from controlplane.sim.settings import SimSettings
from controlplane.sim.testing import ManualClock

pytestmark = pytest.mark.anyio

#: What llama-server answered (docs: the notes on a real server here).
REAL_SAVE = {"id_slot": 0, "filename": "s0.bin", "n_saved": 317, "n_written": 167472,
             "timings": {"save_ms": 0.256}}  # fmt: skip
REAL_RESTORE_MISSING = {"error": {"code": 400, "type": "invalid_request_error", "message":
                        "Unable to restore slot: No available space in KV cache or invalid slot "
                        "save file"}}  # fmt: skip
NEVER_USED = {"id": 1, "n_ctx": 512, "speculative": False, "is_processing": False}
USED = {"id": 0, "n_ctx": 512, "speculative": False, "is_processing": False, "id_task": 7,
        "n_prompt_tokens": 310, "n_prompt_tokens_processed": 310, "n_prompt_tokens_cache": 0,
        "params": {}, "next_token": [{"has_next_token": False}]}  # fmt: skip
PROMPT = "the quick brown fox jumps over the lazy dog " * 4


def enc(data: Any) -> bytes:
    return msgspec.json.encode(data)


# -- judging answers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slots", "expected"),
    [
        ([USED, NEVER_USED], [0]),
        ([NEVER_USED], []),
        ([{**USED, "is_processing": True}, NEVER_USED], []),
        # An older server: id_task -1 on an idle, never-used slot, a task id once used.
        (
            [
                {"id": 0, "id_task": -1, "is_processing": False},
                {"id": 1, "id_task": 3, "is_processing": False},
            ],
            [1],
        ),
        ([{**USED, "id": 3}, USED], [0, 3]),
    ],
)
def test_used_slots_are_the_idle_ones_that_served(slots: list[Any], expected: list[int]) -> None:
    assert used_slots(200, enc(slots)) == expected


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (503, enc({"error": {"code": 503, "message": "Loading model"}}), "503 Loading model"),
        (200, b"<html>", "not JSON"),
        (200, enc({"slots": []}), "not an array"),
        (200, enc([{"n_ctx": 1}]), "integer id"),
    ],
)
def test_a_slots_answer_that_proves_nothing_is_named(status: int, body: bytes, words: str) -> None:
    found = used_slots(status, body)
    assert isinstance(found, str), found
    assert words in found


def test_a_save_answer_counts_tokens_and_bytes() -> None:
    assert read_save(0, 200, enc(REAL_SAVE)) == read_save(0, 200, enc(REAL_SAVE))
    answer = read_save(0, 200, enc(REAL_SAVE))
    assert (answer.error, answer.tokens, answer.bytes_written) == (None, 317, 167472)
    assert "n_written" in (read_save(0, 200, enc({"n_saved": 3})).error or "")
    assert "n_saved" in (read_save(0, 200, enc({"n_saved": -1, "n_written": 1})).error or "")


def test_a_restore_error_carries_the_servers_words() -> None:
    answer = read_restore(2, 400, enc(REAL_RESTORE_MISSING))
    assert answer.error == (
        "slot 2: 400 Unable to restore slot: No available space in KV cache or invalid slot save "
        "file"
    )
    assert read_restore(0, 200, enc({"id_slot": 0, "n_restored": 317})).tokens == 317
    assert read_restore(0, 500, b"").error == "slot 0: answered 500"


# -- the simulator's slot actions ---------------------------------------------------------------


def model(save_path: Path | None, **settings: Any) -> SimulatedModel:
    found = SimulatedModel(
        SimSettings(slot_save_path=save_path, slots=2, **settings), ManualClock()
    )
    found.mark_loaded()
    return found


@asynccontextmanager
async def serving(sim: SimulatedModel) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(sim))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        yield client


async def chat_timings(client: httpx.AsyncClient) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}]}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    timings: dict[str, Any] = response.json()["timings"]
    return timings


async def test_a_saved_slot_restored_into_a_new_server_serves_its_prompt_from_the_cache(
    tmp_path: Path,
) -> None:
    async with serving(model(tmp_path)) as first:
        cold = await chat_timings(first)
        assert (cold["cache_n"], cold["prompt_n"]) == (0, 40)  # 36 words + 4 markers
        again = await chat_timings(first)  # the same slot: its cache is reused
        assert (again["cache_n"], again["prompt_n"]) == (39, 1)
        slots = (await first.get("/slots")).json()
        assert slots[0]["n_prompt_tokens"] == 40
        assert "n_prompt_tokens" not in slots[1]
        saved = await first.post("/slots/0?action=save", json={"filename": "slot-0.bin"})
        assert saved.status_code == 200, saved.text
        assert saved.json()["n_saved"] == 48
        assert saved.json()["filename"] == "slot-0.bin"
        assert saved.json()["n_written"] == (tmp_path / "slot-0.bin").stat().st_size

    async with serving(model(tmp_path)) as control:  # a restart without restore
        assert (await chat_timings(control))["prompt_n"] == 40
    async with serving(model(tmp_path)) as second:
        restored = await second.post("/slots/0?action=restore", json={"filename": "slot-0.bin"})
        assert (restored.status_code, restored.json()["n_restored"]) == (200, 48)
        warm = await chat_timings(second)
        assert (warm["cache_n"], warm["prompt_n"]) == (39, 1)
        erased = await second.post("/slots/0?action=erase")
        assert erased.json() == {"id_slot": 0, "n_erased": 48}
        assert (await chat_timings(second))["prompt_n"] == 40


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        # What llama-server 0.3.36 answered to each of these.
        (
            "/slots/0?action=restore",
            {"filename": "absent.bin"},
            400,
            "Unable to restore slot: No available space in KV cache or invalid slot save file",
        ),
        ("/slots/0?action=save", {"filename": "../x"}, 400, "Invalid filename"),
        ("/slots/0?action=save", {}, 500, "key 'filename' not found"),
        ("/slots/0?action=fly", {"filename": "a"}, 400, "Invalid action"),
        ("/slots/0", {"filename": "a"}, 400, "Invalid action"),
        ("/slots/x?action=erase", {}, 400, "Invalid slot ID"),
    ],
)
async def test_slot_actions_refuse_what_llama_server_refuses(
    tmp_path: Path, path: str, body: dict[str, Any], status: int, message: str
) -> None:
    async with serving(model(tmp_path)) as client:
        response = await client.post(path, json=body)
    assert response.status_code == status
    assert response.json()["error"]["message"].endswith(message), response.text


async def test_without_a_save_path_slot_actions_are_not_supported() -> None:
    async with serving(model(None)) as client:
        response = await client.post("/slots/0?action=save", json={"filename": "a"})
    assert response.status_code == 501
    assert response.json()["error"]["type"] == "not_supported_error"


async def test_a_save_that_cannot_write_is_a_server_error(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the folder should be")
    async with serving(model(blocked)) as client:
        await chat_timings(client)
        response = await client.post("/slots/0?action=save", json={"filename": "slot-0.bin"})
    assert response.status_code == 500
    assert response.json()["error"] == {
        "code": 500, "message": "Unable to save slot", "type": "server_error"
    }  # fmt: skip


async def test_a_slot_past_the_last_is_served_as_an_empty_one(tmp_path: Path) -> None:
    async with serving(model(tmp_path)) as client:
        saved = await client.post("/slots/9?action=save", json={"filename": "a"})
        assert (saved.status_code, saved.json()["n_saved"]) == (200, 0)
        erased = await client.post("/slots/9?action=erase")
        assert erased.json() == {"id_slot": 9, "n_erased": 0}


# -- the bounded client, against the simulator ---------------------------------------------------


def client_for(sim: SimulatedModel) -> tuple[SlotCacheClient, httpx.AsyncClient]:
    """The bounded client and a plain one, both on one server (one app: one set of caches)."""
    transport = httpx.ASGITransport(app=build_app(sim))
    return (
        SlotCacheClient(httpx.AsyncClient(transport=transport)),
        httpx.AsyncClient(transport=transport, base_url="http://sim"),
    )


async def test_the_client_saves_used_slots_and_restores_them(tmp_path: Path) -> None:
    saver, http = client_for(model(tmp_path))
    await chat_timings(http)
    report = await saver.save("http://sim", timeout=5, member="a")
    assert (report.outcome, report.slots, report.tokens) == (CacheOutcome.SUCCEEDED, (0,), 48)
    assert report.bytes_written > 0

    restorer, http = client_for(model(tmp_path))
    report = await restorer.restore("http://sim", [0], timeout=5)
    assert (report.outcome, report.slots, report.tokens) == (CacheOutcome.SUCCEEDED, (0,), 48)
    assert (await chat_timings(http))["prompt_n"] == 1
    missing = await restorer.restore("http://sim", [0, 1], timeout=5)
    assert (missing.outcome, missing.slots) == (CacheOutcome.PARTIAL, (0,))
    assert "slot 1: 400 Unable to restore slot" in missing.detail


async def test_nothing_to_save_and_failures_are_reports_never_exceptions(tmp_path: Path) -> None:
    fresh, _ = client_for(model(tmp_path))
    assert (await fresh.save("http://sim", timeout=5)).outcome is CacheOutcome.NOTHING
    blocked = tmp_path / "file"
    blocked.write_text("")
    saver, http = client_for(model(blocked))
    await chat_timings(http)
    failed = await saver.save("http://sim", timeout=5)
    assert failed.outcome is CacheOutcome.FAILED
    assert failed.detail == "save failed: slot 0: 500 Unable to save slot"
    refused = await SlotCacheClient().save("http://127.0.0.1:9", timeout=5)
    assert refused.outcome is CacheOutcome.FAILED
    assert "ConnectError" in refused.detail


async def test_a_restore_that_hangs_is_cut_off_at_its_bound(tmp_path: Path) -> None:
    async with serving(model(tmp_path)) as http:
        await chat_timings(http)
        await http.post("/slots/0?action=save", json={"filename": "slot-0.bin"})
    hanging = SimulatedModel(
        SimSettings(slot_save_path=tmp_path, slots=2, slot_restore_delay_seconds=5)
    )
    hanging.mark_loaded()
    restorer, _ = client_for(hanging)
    report = await restorer.restore("http://sim", [0], timeout=0.2)
    assert (report.outcome, report.slots) == (CacheOutcome.TIMED_OUT, ())
    assert "not finished within" in report.detail
