"""``controlplane collect-model-cache``: remove from a node cache what no InferenceService names.

::

    controlplane collect-model-cache --cache-dir DIR [--keep PATH]... [--retention SECONDS]
        [--max-bytes N]

Lists the cache (:mod:`.disk`), decides with the rule (:mod:`.rule`: an unnamed file goes once
unused for ``--retention``; with ``--max-bytes``, the least recently used unnamed files go first
while the cache is over it; a ``--keep`` path never goes), removes the chosen files with their
markers, partial downloads and locks, and prunes the folders left empty. ``--keep`` paths are
relative to ``--cache-dir``, as the fetcher lays files out (``https/<16 hex>/FILE``,
``hf/ORG/REPO/REVISION/PATH``). Nothing outside ``--cache-dir`` is touched, nor anything in it
that is not of the fetcher's layout.

stdout: one JSON object per line: ``{"event": "removed", "path", "bytes", "lastUsed", "why"}``
per removed file (``why``: ``Unused`` or ``OverCap``), ``{"event": "skipped", "path", "reason"}``
per chosen file left in place (``FetchInProgress``: its folder's fetch holds the lock;
``UsedMeanwhile``; ``Gone``), then ``{"event": "summary", ...}``. Exit codes: 0 done (skips
included: the next run retries them); 2 bad input (a missing cache folder, a ``--keep`` path
outside the layout, a negative number).

The operator runs it on each node as a Job (:mod:`controlplane.controllers.modelcache`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Final

from controlplane.modelcache.disk import entry_folder, list_cache, remove
from controlplane.modelcache.rule import Policy, decide

SUBCOMMAND: Final = "collect-model-cache"
#: Seconds an unnamed file may stay unused, by default (the operator's own default is the same).
DEFAULT_RETENTION: Final = 24 * 3600.0
EXIT_OK: Final = 0
EXIT_INVALID: Final = 2


def seconds(text: str) -> float:
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0: {text}")
    return value


def byte_count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (0: no cap): {text}")
    return value


def cache_path(text: str) -> str:
    """A path relative to the cache, inside the fetcher's layout (one entry folder and a file)."""
    pure = PurePosixPath(text)
    outside = pure.is_absolute() or ".." in pure.parts or pure.as_posix() != text.strip("/")
    if outside or entry_folder(text) is None:
        raise argparse.ArgumentTypeError(
            "expected a path relative to the cache, https/<16 hex>/FILE, http/<16 hex>/FILE or "
            f"hf/ORG/REPO/REVISION/PATH: {text!r}"
        )
    return pure.as_posix()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir", type=Path, required=True, help="the node cache (the operator's CACHE)"
    )
    parser.add_argument(
        "--keep",
        type=cache_path,
        action="append",
        default=[],
        metavar="PATH",
        help="a file some InferenceService names, relative to --cache-dir: never removed; "
        "repeatable",
    )
    parser.add_argument(
        "--retention",
        type=seconds,
        default=DEFAULT_RETENTION,
        metavar="SECONDS",
        help="how long an unnamed file may stay unused before it is removed "
        f"(default {DEFAULT_RETENTION:g})",
    )
    parser.add_argument(
        "--max-bytes",
        type=byte_count,
        default=0,
        metavar="N",
        help="the cache's size cap: over it, the least recently used unnamed files go first "
        "(named files are never removed, even over it; default 0: no cap)",
    )


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def collect(
    cache_dir: Path,
    keep: Sequence[str],
    policy: Policy,
    *,
    now: float,
    emit: Callable[[dict[str, object]], None],
) -> None:
    """One collection of ``cache_dir``; each record goes to ``emit``."""
    listed = list_cache(cache_dir)
    named = frozenset(keep)
    decision = decide((item.entry for item in listed), named, now, policy)
    removed_files = removed_bytes = 0
    for outcome in remove(cache_dir, decision.removals, listed, named):
        entry = outcome.removal.entry
        if outcome.removed:
            removed_files += 1
            removed_bytes += entry.size
            emit({"event": "removed", "path": entry.path, "bytes": entry.size,
                  "lastUsed": _iso(entry.last_used), "why": outcome.removal.why.value})  # fmt: skip
        else:
            emit({"event": "skipped", "path": entry.path, "reason": outcome.reason})
    total = sum(item.entry.size for item in listed)
    emit(
        {
            "event": "summary",
            "files": len(listed),
            "bytes": total,
            "named": sum(1 for item in listed if item.entry.path in named),
            "removedFiles": removed_files,
            "removedBytes": removed_bytes,
            "keptBytes": total - removed_bytes,
            "retentionSeconds": policy.retention,
            "maxBytes": policy.max_bytes,
            "overCap": bool(policy.max_bytes) and total - removed_bytes > policy.max_bytes,
        }
    )


def _print(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def run(args: argparse.Namespace) -> int:
    """Remove from a node cache the files no InferenceService names (retention, size cap)."""
    cache_dir: Path = args.cache_dir
    if not cache_dir.is_dir():
        print(f"error: --cache-dir {cache_dir} is not a folder", file=sys.stderr)
        return EXIT_INVALID
    policy = Policy(retention=args.retention, max_bytes=args.max_bytes)
    collect(cache_dir.resolve(), args.keep, policy, now=time.time(), emit=_print)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """The command without the console script's dispatch (tests, ``python -m``)."""
    parser = argparse.ArgumentParser(prog=f"controlplane {SUBCOMMAND}", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
