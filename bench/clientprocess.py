"""The data-path load clients (:mod:`bench.dataplane_clients`) as processes of their own, and
their JSON lines read without blocking the event loop: shared by the benchmark's slow phase and
the slow-clients e2e test, which drive the same clients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import anyio.to_thread

REPO: Final = Path(__file__).resolve().parents[1]


def client_process(mode: str, url: str, count: int, *extra: str) -> subprocess.Popen[str]:
    """``python -m bench.dataplane_clients MODE URL COUNT EXTRA...``, its stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench.dataplane_clients", mode, url, str(count), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip


async def next_line(process: subprocess.Popen[str]) -> dict[str, Any]:
    """The client's next JSON line, read off the event loop (watches keep running meanwhile)."""
    assert process.stdout is not None
    line = await anyio.to_thread.run_sync(process.stdout.readline)
    if not line:
        raise RuntimeError(f"client exited: {process.stderr.read() if process.stderr else ''}")
    record: dict[str, Any] = json.loads(line)
    return record
