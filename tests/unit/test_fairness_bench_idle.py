"""The fairness benchmark's idle mode (``make bench-fairness BENCH_ARGS="--idle"``): its pure part,
the trace, the pools and the peer's configuration, the member processes found below a system's
process, the GPU-busy seconds read from them, the bursts and the figures."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest

from bench.fairness_bench import (
    IDLE_GAP_SECONDS,
    IDLE_POOL,
    IDLE_TRACE,
    Answer,
    Client,
    Sample,
    Trace,
    bursts,
    busy_seconds,
    descendants,
    held_after,
    idle_table,
    judge_idle,
    llama_swap_config,
    member_processes,
    member_starts,
    pool_objects,
    replay,
)


def _answer(sent: float, ended: float, status: int | None = 200, by: str = "model-a2") -> Answer:
    return Answer("a2", sent, ended, status, by if status == 200 else "")


def test_the_idle_trace_is_bursts_for_the_default_with_a_quiet_gap_after_each() -> None:
    assert {client.member for client in IDLE_TRACE.clients} == {IDLE_POOL[1][0]} == {"a2"}
    assert len(IDLE_TRACE.clients) == 3
    (times,) = {client.times for client in IDLE_TRACE.clients}
    assert times == (0.0, 30.0, 60.0)
    assert {client.burst for client in IDLE_TRACE.clients} == {8.0}
    # the trace ends with its last gap: every burst is followed by the same quiet
    assert IDLE_TRACE.seconds == times[-1] + 8.0 + IDLE_GAP_SECONDS == 90.0


def test_a_bursts_client_asks_back_to_back_only_inside_its_bursts() -> None:
    """Against an address nobody listens on, so that every request ends at once (refused)."""
    trace = Trace("t", (Client("a2", "bursts", times=(0.0, 0.6), burst=0.2),), seconds=0.8)
    answers = anyio.run(replay, "http://127.0.0.1:9", trace)
    start = min(a.sent for a in answers)
    offsets = sorted(a.sent - start for a in answers)
    assert offsets
    # sent within 0 to 0.2 s and 0.6 to 0.8 s of the client's start, the first a moment after it
    assert all(at < 0.3 or 0.5 < at < 0.9 for at in offsets)
    assert any(at > 0.5 for at in offsets)
    assert all(a.status is None for a in answers)


def test_the_released_pool_alone_carries_the_idle_scheduling() -> None:
    held = pool_objects(pools=(IDLE_POOL,))
    release = pool_objects(
        pools=(IDLE_POOL,), scheduling={"idleAfter": "5s", "idleAction": "Release"}
    )

    def pools(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in objects if o["kind"] == "ModelPool"]

    ((held_pool,), (released,)) = (pools(held), pools(release))
    assert "scheduling" not in held_pool["spec"]
    assert released["spec"]["scheduling"] == {"idleAfter": "5s", "idleAction": "Release"}
    assert released["spec"]["default"] == "a2"
    assert all("scheduling" not in p["spec"] for p in pools(pool_objects()))


def test_the_peers_ttl_is_set_on_every_model_only_when_asked() -> None:
    config = llama_swap_config(["a2", "b2"], ttl=5)
    assert [entry["ttl"] for entry in config["models"].values()] == [5, 5]
    assert all("ttl" not in entry for entry in llama_swap_config(["a2"])["models"].values())


def test_the_processes_below_a_root_are_its_children_and_theirs_only() -> None:
    parents = {10: 1, 11: 10, 12: 11, 13: 11, 20: 1, 21: 20, 1: 0}
    assert descendants(parents, 10) == {11, 12, 13}
    assert descendants(parents, 11) == {12, 13}
    assert descendants(parents, 12) == set()
    assert descendants(parents, 99) == set()


def test_a_member_process_below_this_one_is_found_and_gone_once_it_exits() -> None:
    # the simulator's command line, without starting it: a sleep that carries the same words
    argv = [sys.executable, "-c", "import time; time.sleep(30)", "controlplane.cli", "sim"]
    child = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 10
        while child.pid not in member_processes(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in member_processes(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert child.pid not in member_processes(os.getpid())


def _samples(*alive: tuple[float, set[int]]) -> list[Sample]:
    return [(at, frozenset(pids)) for at, pids in alive]


def test_busy_seconds_count_the_readings_with_a_member_alive_within_the_trace() -> None:
    samples = _samples((9.0, {1}), (11.0, {1}), (20.0, set()), (40.0, {2}), (45.0, {2, 3}))
    # 10 to 20 (1 alive), nothing 20 to 40, 40 to 50 (the last reading holds until the end)
    assert busy_seconds(samples, 10.0, 50.0) == pytest.approx(20.0)
    assert busy_seconds(samples, 10.0, 42.0) == pytest.approx(12.0)
    assert busy_seconds([], 0.0, 10.0) == 0.0
    assert busy_seconds(_samples((0.0, set())), 0.0, 10.0) == 0.0


def test_member_starts_are_the_processes_first_seen_in_the_trace() -> None:
    samples = _samples((9.0, {1}), (11.0, {1}), (20.0, set()), (40.0, {2}), (45.0, {2, 3}))
    assert member_starts(samples, 10.0) == 2
    assert member_starts(samples, 8.0) == 3
    assert member_starts([], 0.0) == 0


def test_a_burst_begins_once_every_earlier_request_has_ended_a_gap_before() -> None:
    answers = [
        _answer(0.0, 0.2),
        _answer(0.01, 0.3),
        _answer(0.3, 7.9),  # a long one: the gap counts from its end
        _answer(20.0, 23.0),  # 12.1 s after every earlier one ended: a burst begins
        _answer(20.001, 23.1),
        _answer(23.0, 23.2),
        _answer(40.0, 40.1),  # 16.8 s quiet
    ]
    assert bursts(list(reversed(answers)), 11.0) == [answers[:3], answers[3:6], answers[6:]]
    assert bursts(answers, 13.0) == [answers[:6], answers[6:]]
    assert bursts([], 11.0) == []


def test_a_member_is_held_until_the_first_reading_with_none_alive() -> None:
    samples = _samples((10.0, {1}), (12.0, {1}), (15.4, set()), (30.0, {2}), (40.0, {2}))
    assert held_after(samples, 8.0) == pytest.approx(7.4)
    assert held_after(samples, 15.4) == 0.0
    assert held_after(samples, 31.0) == math.inf


def test_the_idle_figures_and_their_row() -> None:
    answers = [
        _answer(100.0, 100.5),
        _answer(100.5, 101.0),
        _answer(130.0, 134.0),
        _answer(134.0, 134.2),
        _answer(160.0, 160.4),
        _answer(160.4, 160.5, status=503),
        _answer(160.5, 160.6, by="model-b2"),
    ]
    samples = _samples((99.9, {7}), (115.0, set()), (130.0, {8}), (150.0, set()))
    row = judge_idle("ours-release", answers, samples, 100.0, 190.0)
    assert (row.requests, row.unanswered) == (7, 2)
    assert row.busy == pytest.approx(35.0)
    assert row.saved == pytest.approx(55.0)
    assert row.starts == 1
    assert row.after_gaps == pytest.approx((4.0, 0.4))
    # the bursts end at 101.0, 134.2 and 160.6: the first reading with none alive after each
    assert row.held == pytest.approx((14.0, 15.8, math.inf))
    assert row.max_wait == pytest.approx(4.0)
    assert row.p50_wait == pytest.approx(0.5)
    lines = idle_table([row]).splitlines()
    assert lines[0].startswith("| system | requests | not answered | GPU busy s |")
    assert lines[1] == "|" + "---|" * 10
    assert lines[2] == (
        "| ours-release | 7 | 2 | 35.0 of 90 | 55.0 | 14.0, 15.8, held | 1 | 4.0, 0.4 | "
        "4.0 | 0.50 |"
    )


def test_a_row_with_no_answer_and_no_gap() -> None:
    row = judge_idle("llama-swap", [], [], 0.0, 90.0)
    assert math.isnan(row.max_wait)
    assert math.isnan(row.p50_wait)
    assert idle_table([row]).splitlines()[-1] == (
        "| llama-swap | 0 | 0 | 0.0 of 90 | 90.0 | none | 0 | none | nan | nan |"
    )
