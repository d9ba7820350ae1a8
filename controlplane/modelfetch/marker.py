"""The verified-file marker: ``FILE.modelpool.json`` beside a file whose digest was checked.

A member's init container runs the fetcher on every start of its pod, which is every swap of its
pool: once the node has the file, that run must cost a ``stat``, not a read of gigabytes. The
marker records what was verified: ``{"source", "sha256", "size", "mtimeNs"}``, the source in one
spelling per file (``hf://ORG/REPO/PATH@REVISION`` with its revision, a URL as given). A file
whose size and modification time still match it is the same verified file, unless someone
rewrote it in place within the same nanosecond and to the same size, which no downloader here
does (files only ever arrive by an atomic rename).

**Last use.** The marker's own modification time is the file's last use: it is written when the
file is verified, and :func:`touch_marker` sets it to now on every run that finds the file by it
(every start of a member's pod, every fetch Job of a node that had it). The node cache's
collection (:mod:`controlplane.modelcache`) removes a file no InferenceService names once it has
gone unused for a retention. The data file's own time is not touched: the marker's ``mtimeNs``
vouches for it.

Only the standard library (``contextlib``, ``json``, ``os``): the fast path imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MARKER_SUFFIX: Final = ".modelpool.json"


@dataclass(frozen=True, slots=True)
class Marker:
    source: str
    sha256: str
    size: int
    mtime_ns: int

    def to_json(self) -> dict[str, object]:
        return {
            "source": self.source,
            "sha256": self.sha256,
            "size": self.size,
            "mtimeNs": self.mtime_ns,
        }


def marker_path(file: Path) -> Path:
    return file.with_name(file.name + MARKER_SUFFIX)


def read_marker(file: Path) -> Marker | None:
    """The marker of ``file``, or None when there is none or it is not one of ours."""
    try:
        data = json.loads(marker_path(file).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    source, sha256 = data.get("source"), data.get("sha256")
    size, mtime_ns = data.get("size"), data.get("mtimeNs")
    if not (isinstance(source, str) and isinstance(sha256, str)):
        return None
    if not (isinstance(size, int) and isinstance(mtime_ns, int)):
        return None
    return Marker(source, sha256, size, mtime_ns)


def verified(file: Path, source: str, sha256: str | None) -> Marker | None:
    """The marker, when it vouches for ``file`` as it is now, fetched from ``source`` (and with
    the digest ``sha256`` when one is asked for); else None. Never reads the file itself."""
    marker = read_marker(file)
    if marker is None or marker.source != source:
        return None
    if sha256 is not None and marker.sha256 != sha256.lower():
        return None
    try:
        stat = file.stat()
    except OSError:
        return None
    if stat.st_size != marker.size or stat.st_mtime_ns != marker.mtime_ns:
        return None
    return marker


def write_marker(file: Path, source: str, sha256: str) -> Marker:
    """Vouch for ``file`` as it is now (written atomically: a reader sees all or nothing)."""
    stat = file.stat()
    marker = Marker(source, sha256, stat.st_size, stat.st_mtime_ns)
    target = marker_path(file)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(marker.to_json()) + "\n")
    os.replace(temporary, target)
    return marker


def touch_marker(file: Path) -> None:
    """Record a use of ``file``: its marker's modification time becomes now. A cache mounted
    read-only (or a marker gone meanwhile) only loses this use, never the start."""
    with contextlib.suppress(OSError):
        os.utime(marker_path(file))


def remove_marker(file: Path) -> None:
    marker_path(file).unlink(missing_ok=True)
