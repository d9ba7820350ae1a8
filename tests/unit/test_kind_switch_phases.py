"""The kind switch benchmark's pure part: timestamps, a server's start and load, the phases."""

from __future__ import annotations

import pytest

from bench.kind_switch_phases import (
    HEALTHY,
    STARTED,
    Switch,
    cri_time,
    router_mode_switch,
    server_times,
    timestamped,
)


def test_cri_stamps_keep_their_nanoseconds_and_bad_lines_are_skipped() -> None:
    assert cri_time("2026-12-03T11:28:38.104000001Z") == pytest.approx(1796297318.104, abs=1e-6)
    lines = timestamped("2026-12-03T11:28:38.5Z hello\nnot a stamp\n2026-12-03T11:28:39Z bye")
    assert [line for _, line in lines] == ["hello", "bye"]
    assert lines[1][0] - lines[0][0] == pytest.approx(0.5)


def test_a_servers_start_is_its_first_line_less_its_own_stamp() -> None:
    # llama-server stamps each line with minutes.seconds.ms.us since its start
    lines = [
        (100.250, "0.00.250.000 I main: build"),
        (100.400, "0.00.400.000 I llama_server: model loaded"),
    ]
    times = server_times(lines)
    assert times is not None
    assert times[0] == pytest.approx(100.0)
    assert times[1] == 100.400
    assert server_times(lines[:1]) is None  # never loaded


def test_each_phase_runs_from_the_last_mark_before_it() -> None:
    record = {"sent": 10.0, "first_token": 11.5, "done": 11.6, "index": 1, "model": "b"}
    marks: list[float | None] = [10.1, 10.2, 10.5, None, 10.6, 10.7, 11.0, 11.05, 11.5, 11.6]
    switch = Switch(record, marks)
    assert switch.phase(0) == pytest.approx(0.1)  # from the request's sending
    assert switch.phase(3) is None  # a step this mode does not have
    assert switch.phase(4) == pytest.approx(0.1)  # from the mark before the missing one
    assert switch.load == pytest.approx(marks[HEALTHY] - marks[STARTED])  # type: ignore[operator]
    assert switch.readiness == pytest.approx(0.05)
    assert switch.total == pytest.approx(1.6)


def test_router_modes_marks_come_from_its_own_log_within_the_request() -> None:
    record = {"sent": 0.0, "first_token": 1.0, "done": 1.1, "index": 1, "model": "tiny-2"}
    lines = [
        (-1.0, "request for name=tiny-2 queued at position 1"),  # an earlier request: ignored
        (0.01, "request for name=tiny-2 queued at position 1"),
        (0.02, "evicting idle LRU name=tiny-1 for a queued request"),
        (0.05, "run: instance name=tiny-1 exited with status 0"),
        (0.06, "spawning server instance with name=tiny-2 on port 4001"),
        (0.30, "[4001] 0.00.100.000 I main: build"),
        (0.50, "[4001] 0.00.300.000 I llama_server: model loaded"),
        (0.51, "proxying request to model tiny-2 on port 4001"),
    ]
    switch = router_mode_switch(record, lines)
    assert switch.marks[:3] == [0.01, 0.02, 0.05]
    assert switch.load == pytest.approx(0.5 - 0.2)
    assert switch.readiness == pytest.approx(0.01)
    with pytest.raises(SystemExit, match="lacks a step"):
        router_mode_switch(record, lines[:-1])
