"""Where each container's output goes, and reading the end of it.

One file per container, as a kubelet keeps one per container: the pod's first regular container
(a member's server, a router-proxy, a Job's only container) writes ``LOG_DIR/NAMESPACE_POD.log``,
the name the stand-in always used (tests and ``make dev`` read it); every other container
(init containers, further containers) writes ``LOG_DIR/containers/NAMESPACE_POD_CONTAINER.log``.
Names of namespaces, pods and containers hold no ``_``, so neither form is ambiguous. A restarted
container appends to its file: the stand-in keeps one log per container, not one per instance.

:func:`tail` reads the last lines from the end of the file in blocks, so a long-running server's
log is never read whole to answer ``tailLines=1``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

#: How much is read from the end of a file at a time while looking for line breaks.
BLOCK_BYTES: Final = 64 * 1024


def container_log_path(log_dir: Path, pod: Mapping[str, Any], container: str) -> Path:
    """The log file of ``container`` of ``pod`` (see the module's docstring)."""
    meta = pod["metadata"]
    regular = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or ()]
    stem = f"{meta['namespace']}_{meta['name']}"
    if regular and regular[0] == container:
        return log_dir / f"{stem}.log"
    return log_dir / "containers" / f"{stem}_{container}.log"


def container_names(pod: Mapping[str, Any]) -> list[str]:
    """Every container of the pod, init containers first."""
    spec = pod.get("spec") or {}
    return [
        str(c.get("name"))
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    ]


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def tail(
    path: Path, lines: int | None = None, max_bytes: int | None = None, end: int | None = None
) -> bytes:
    """The last ``lines`` lines of the file (all of it for None), then at most its last
    ``max_bytes`` bytes; empty when the file does not exist. A last line without its line break
    counts as a line. With ``end``, as if the file ended there (a follower goes on from it)."""
    try:
        file = path.open("rb")
    except FileNotFoundError:
        return b""
    with file:
        size = file.seek(0, os.SEEK_END)
        if end is not None:
            size = min(size, end)
        if lines is None:
            if max_bytes is None:
                file.seek(0)
                return file.read(size)
            start = max(size - max_bytes, 0)
            file.seek(start)
            return file.read(size - start)
        if lines <= 0:
            return b""
        data = b""
        position = size
        while position > 0:
            step = min(BLOCK_BYTES, position)
            position -= step
            file.seek(position)
            data = file.read(step) + data
            # One more break than lines: the first may end the line before the ones wanted,
            # and a final break ends the last line rather than starting an empty one. With a
            # byte limit, that many bytes of the file's end are enough whatever the lines.
            if data.count(b"\n") > lines or (max_bytes is not None and len(data) >= max_bytes):
                break
    found = _last_lines(data, lines)
    return found[-max_bytes:] if max_bytes is not None and len(found) > max_bytes else found


def _last_lines(data: bytes, lines: int) -> bytes:
    body = data[:-1] if data.endswith(b"\n") else data
    parts = body.split(b"\n")
    kept = b"\n".join(parts[-lines:])
    return kept + b"\n" if data.endswith(b"\n") else kept
