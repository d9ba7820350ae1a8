"""The peer side of the controller benchmark's protocol (see bench/README.md), for Python peers.

A peer is started with the arguments :func:`parse_args` reads and ``KUBECONFIG`` in its
environment, and prints one JSON object per line on stdout (:func:`emit`). :class:`Tally` is the
trivial reconciler's bookkeeping and prints ``synced``, ``settled``, ``done`` and ``replayed`` in
order; a peer calls :meth:`Tally.mark_synced` when its cache holds every object and
:meth:`Tally.reconciled` from its reconciler. The peer stops on SIGTERM or when its stdin closes
(:func:`stdin_closed`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import time
from typing import Any

import msgspec


def rss_bytes() -> int:
    """The process's resident set (``VmRSS``), or -1 where ``/proc`` does not have it."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def emit(event: str, **fields: Any) -> None:
    """Print one protocol line; each carries the wall-clock time and the resident set."""
    line = {"event": event, "t": time.time(), "rss_bytes": rss_bytes(), **fields}
    sys.stdout.buffer.write(msgspec.json.encode(line) + b"\n")
    sys.stdout.buffer.flush()


def parse_args(argv: list[str] | None = None, *, description: str = "") -> argparse.Namespace:
    """The arguments every peer accepts; unknown ones are ignored so the protocol can grow."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("--expect", type=int, required=True, help="number of objects")
    parser.add_argument("--target", type=int, required=True, help="spec.round of the live burst")
    parser.add_argument(
        "--replay-target", type=int, default=None, help="spec.round of the replayed burst"
    )
    parser.add_argument("--group", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--plural", required=True)
    parser.add_argument("--kind", required=True)
    args, _unknown = parser.parse_known_args(argv)
    return args


class Tally:
    """What the trivial reconciler counts, and the protocol lines it triggers, in order."""

    def __init__(self, expect: int, target: int, replay_target: int | None = None) -> None:
        self.expect = expect
        self.target = target
        self.replay_target = replay_target
        self.total = 0  # every reconcile call
        self.seen: set[str] = set()  # objects reconciled at all (the start-up pass)
        self.at_target: set[str] = set()
        self.at_replay_target: set[str] = set()
        self.synced = self.settled = self.done = self.replayed = False
        self._reported_total = -1

    def mark_synced(self, objects: int) -> None:
        """The cache holds every object: ``synced``, then a ``memory`` figure after a collection."""
        if self.synced:
            return
        self.synced = True
        emit("synced", objects=objects)
        gc.collect()
        emit("memory", objects=objects, after_gc=True)
        self._announce()

    def reconciled(self, key: str, round_: object) -> None:
        """One reconcile of ``key`` (``namespace/name``) that read ``spec.round == round_``."""
        self.total += 1
        self.seen.add(key)
        if round_ == self.target:
            self.at_target.add(key)
        elif round_ == self.replay_target:
            self.at_replay_target.add(key)
        self._announce()

    def progress(self) -> None:
        """A ``progress`` line, unless nothing was reconciled since the last one."""
        if self.total == self._reported_total:
            return
        self._reported_total = self.total
        emit(
            "progress",
            reconciles_total=self.total,
            reconciled=len(self.at_replay_target if self.done else self.at_target),
        )

    def _announce(self) -> None:
        if self.synced and not self.settled and len(self.seen) >= self.expect:
            self.settled = True
            emit("settled", reconciled=len(self.seen), reconciles_total=self.total)
        if self.settled and not self.done and len(self.at_target) >= self.expect:
            self.done = True
            emit("done", reconciled=len(self.at_target), reconciles_total=self.total)
        if (
            self.done
            and not self.replayed
            and self.replay_target is not None
            and len(self.at_replay_target) >= self.expect
        ):
            self.replayed = True
            emit("replayed", reconciled=len(self.at_replay_target), reconciles_total=self.total)


async def stdin_closed() -> None:
    """Return when stdin reaches end of file (never, when stdin is not a pipe or terminal)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (ValueError, OSError):
        await asyncio.Event().wait()
    with contextlib.suppress(OSError):
        while await reader.read(65536):
            pass
