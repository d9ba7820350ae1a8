"""The fetcher's stdout records: their one-line form, the operator's parser, the throttle."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.modelfetch.errors import (
    TERMINATION_MESSAGE_LIMIT,
    FetchError,
    Reason,
    digest_mismatch,
    disk_full,
    for_status,
)
from controlplane.modelfetch.progress import (
    Done,
    Progress,
    ProgressReporter,
    format_record,
    parse_line,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_records_round_trip_through_their_line() -> None:
    progress = Progress(10, 100, 2.5)
    done = Done(100, "ab" * 32, "/var/lib/modelpool/model/m.gguf", downloaded=True)
    assert parse_line(format_record(progress)) == progress
    assert parse_line(format_record(done)) == done
    assert parse_line(format_record(Progress(0, None, 0.0))) == Progress(0, None, 0.0)


def test_the_line_format_is_the_contract() -> None:
    assert format_record(Progress(1, None, 0.0)) == (
        '{"event": "progress", "bytesDone": 1, "bytesTotal": null, "bytesPerSecond": 0.0}'
    )
    assert format_record(Done(3, "00", "/p", downloaded=False)) == (
        '{"event": "done", "bytesTotal": 3, "sha256": "00", "path": "/p", "downloaded": false}'
    )


@pytest.mark.parametrize(
    "line",
    [
        "",
        "NotFound: https://h/m.gguf answered 404: no such file",
        "2026-01-01 INFO controlplane.modelfetch waiting",
        "[1, 2]",
        '{"event": "progress"}',
        '{"event": "progress", "bytesDone": true, "bytesTotal": 1, "bytesPerSecond": 0}',
        '{"event": "progress", "bytesDone": 1, "bytesTotal": "1", "bytesPerSecond": 0}',
        '{"event": "done", "bytesTotal": 1, "sha256": "x", "path": "/p", "downloaded": 1}',
        '{"event": "started", "bytesDone": 1}',
    ],
)
def test_any_other_line_is_not_a_record(line: str) -> None:
    assert parse_line(line) is None


def test_an_integer_rate_is_read_as_a_float() -> None:
    line = '{"event": "progress", "bytesDone": 5, "bytesTotal": 10, "bytesPerSecond": 3}'
    assert parse_line(line) == Progress(5, 10, 3.0)


def test_the_reporter_writes_at_start_then_at_most_once_per_interval() -> None:
    lines: list[str] = []
    clock = Clock()
    reporter = ProgressReporter(interval=1.0, write=lines.append, clock=clock)
    reporter.start(1000)
    for _ in range(5):
        clock.now += 0.1
        reporter.advance(100)
    assert [parse_line(line) for line in lines] == [Progress(0, 1000, 0.0)]
    clock.now = 101.0  # 1.0 s after the first record
    reporter.advance(100)
    record = parse_line(lines[-1])
    assert isinstance(record, Progress)
    assert (record.bytes_done, record.bytes_total) == (600, 1000)
    assert record.bytes_per_second == pytest.approx(600.0)
    reporter.finish(Done(1000, "aa", "/p", downloaded=True))
    assert parse_line(lines[-1]) == Done(1000, "aa", "/p", downloaded=True)
    assert len(lines) == 3


def test_a_restart_counts_down_and_a_resumed_start_says_where_it_is() -> None:
    lines: list[str] = []
    clock = Clock()
    reporter = ProgressReporter(interval=0.0, write=lines.append, clock=clock)
    reporter.start(None, done=40)
    assert parse_line(lines[-1]) == Progress(40, None, 0.0)
    clock.now += 1
    reporter.advance(-40)
    assert reporter.bytes_done == 0
    assert parse_line(lines[-1]) == Progress(0, None, 0.0)


def test_reasons_map_to_exit_codes_and_messages() -> None:
    assert for_status(404, "u").reason is Reason.NOT_FOUND
    assert for_status(401, "u").reason is Reason.UNAUTHORIZED
    assert for_status(403, "u").reason is Reason.FORBIDDEN
    assert for_status(503, "u").reason is Reason.SERVER_ERROR
    assert for_status(429, "u").transient
    assert for_status(400, "u").reason is Reason.INVALID
    assert for_status(404, "u").exit_code == 3
    assert for_status(500, "u").exit_code == 1
    mismatch = digest_mismatch("aa", "bb")
    assert mismatch.termination_message == (
        "DigestMismatch: sha256 of the download is aa, spec.model.sha256 is bb"
    )
    assert mismatch.exit_code == 3
    full = disk_full(Path("/cache"), 100, 7)
    assert full.exit_code == 1
    assert not full.transient
    assert "100 more bytes" in full.message
    assert "7 bytes are free" in full.message


def test_the_termination_message_fits_kubernetes_limit_in_whole_characters() -> None:
    message = FetchError(Reason.INVALID, "é" * 5000).termination_message
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    assert message.startswith("Invalid: éé")
