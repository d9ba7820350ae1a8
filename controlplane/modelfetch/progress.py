"""What ``controlplane fetch-model`` says on stdout: one JSON record per line, and their parser.

The operator learns how far a download is by reading the last line of the fetch container's log
(``pods/log?tailLines=1``), so every line stdout gets is one whole record::

    {"event": "progress", "bytesDone": N, "bytesTotal": N|null, "bytesPerSecond": F}
    {"event": "done", "bytesTotal": N, "sha256": HEX, "path": P, "downloaded": bool}

``progress`` comes once when a download starts and then at most once per interval; ``done``
once at the end (``downloaded`` false when the file was already there). Failures are not records:
they are the termination message (:mod:`controlplane.modelfetch.errors`).

Pure and small on purpose: the operator imports this module, and only this one, of the package
(never ``huggingface_hub`` or ``httpx``). A pod's log mixes stderr into stdout, so
:func:`parse_line` answers None for any line that is not one of these records, never raises.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

EVENT_PROGRESS: Final = "progress"
EVENT_DONE: Final = "done"
#: Seconds between two progress records (``--progress-interval``).
DEFAULT_INTERVAL: Final = 1.0


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a download is: bytes on disk so far, of a total when the server said one."""

    bytes_done: int
    bytes_total: int | None
    #: Over the time since the previous record (0.0 in the first one).
    bytes_per_second: float

    def to_json(self) -> dict[str, Any]:
        return {
            "event": EVENT_PROGRESS,
            "bytesDone": self.bytes_done,
            "bytesTotal": self.bytes_total,
            "bytesPerSecond": round(self.bytes_per_second, 1),
        }


@dataclass(frozen=True, slots=True)
class Done:
    """The verified file: its size, its sha256, where it is, and whether this run fetched it."""

    bytes_total: int
    sha256: str
    path: str
    downloaded: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "event": EVENT_DONE,
            "bytesTotal": self.bytes_total,
            "sha256": self.sha256,
            "path": self.path,
            "downloaded": self.downloaded,
        }


ProgressRecord = Progress | Done


def format_record(record: ProgressRecord) -> str:
    """The record as its one line (no newline)."""
    return json.dumps(record.to_json())


def _int(value: object) -> int | None:
    # JSON booleans are Python ints: refused, a count is never true or false.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_line(text: str) -> ProgressRecord | None:
    """The record ``text`` holds, or None when it is not one (any other log line)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    event = data.get("event")
    if event == EVENT_PROGRESS:
        done = _int(data.get("bytesDone"))
        total = data.get("bytesTotal")
        rate = data.get("bytesPerSecond")
        if done is None or (total is not None and _int(total) is None):
            return None
        if not isinstance(rate, int | float) or isinstance(rate, bool):
            return None
        return Progress(done, _int(total), float(rate))
    if event == EVENT_DONE:
        size = _int(data.get("bytesTotal"))
        sha256, path, downloaded = data.get("sha256"), data.get("path"), data.get("downloaded")
        if size is None or not isinstance(sha256, str) or not isinstance(path, str):
            return None
        if not isinstance(downloaded, bool):
            return None
        return Done(size, sha256, path, downloaded)
    return None


def _stdout_line(line: str) -> None:
    # Flushed per line: the operator reads the log while the download runs.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class ProgressReporter:
    """Turns byte counts into progress records, at most one per ``interval`` seconds.

    The downloaders call :meth:`start` when the size is known (or known to be unknown), then
    :meth:`advance` per chunk; the first :meth:`start` writes a record at once, so the operator
    sees a download begin before its first interval ends. Thread-safe: the Hub client may report
    from a worker thread.
    """

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        write: Callable[[str], None] = _stdout_line,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._write = write
        self._clock = clock
        self._lock = threading.Lock()
        self._done = 0
        self._total: int | None = None
        self._started = False
        self._last_time = 0.0
        self._last_done = 0

    @property
    def bytes_done(self) -> int:
        return self._done

    @property
    def bytes_total(self) -> int | None:
        return self._total

    def start(self, total: int | None, done: int = 0) -> None:
        """A download (or a resumed attempt of one) begins at ``done`` bytes of ``total``."""
        with self._lock:
            self._total, self._done = total, done
            if not self._started:
                self._started = True
                self._emit(self._clock(), first=True)
            else:
                self._maybe_emit()

    def set_total(self, total: int | None) -> None:
        with self._lock:
            self._total = total

    def advance(self, count: int) -> None:
        """``count`` more bytes on disk (negative when a restart throws some away)."""
        with self._lock:
            self._done = max(0, self._done + count)
            self._maybe_emit()

    def finish(self, record: Done) -> None:
        """Write the final record."""
        with self._lock:
            self._write(format_record(record))

    def _maybe_emit(self) -> None:
        now = self._clock()
        if self._started and now - self._last_time >= self._interval:
            self._emit(now, first=False)

    def _emit(self, now: float, *, first: bool) -> None:
        elapsed = now - self._last_time
        rate = 0.0 if first or elapsed <= 0 else max(0, self._done - self._last_done) / elapsed
        self._write(format_record(Progress(self._done, self._total, rate)))
        self._last_time, self._last_done = now, self._done
