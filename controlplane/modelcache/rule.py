"""Which files of the node cache are removed: a pure rule, no disk, no clock.

A file is **named** while some InferenceService (or a pod of one) names it; a named file is never
removed, whatever its age or the cache's size: removing it would make the next start of that
member download it again (or, for a pod already running, leave it without a file on a restart).
An unnamed file is removed

* once it has not been used for ``retention`` seconds (its last use is its last verified start,
  :func:`controlplane.modelfetch.marker.touch_marker`), and
* with a size cap, sooner: while the cache is over the cap, the least recently used unnamed files
  go first, until it is under the cap or no unnamed file is left. Named files count toward the
  cap but are never taken for it, so a cache whose named files alone exceed the cap stays over
  it (:attr:`Decision.over_cap` says so).

The order of the cap's evictions is the files' last use, oldest first, then their path, so that
two runs over the same cache decide the same.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import Enum


class Why(Enum):
    """Why an entry is removed (the value is what the collector's record says)."""

    UNUSED = "Unused"
    OVER_CAP = "OverCap"


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One file of the cache: its path relative to the cache folder (``https/<16 hex>/FILE``,
    ``hf/ORG/REPO/REVISION/PATH``), its size in bytes, and its last use (epoch seconds)."""

    path: str
    size: int
    last_used: float


@dataclass(frozen=True, slots=True)
class Policy:
    """How long an unnamed file may stay unused, and the cache's size cap (0: none)."""

    retention: float
    max_bytes: int = 0

    def __post_init__(self) -> None:
        if not (self.retention >= 0 and math.isfinite(self.retention)):
            raise ValueError(
                f"the retention must be a finite number of seconds >= 0: {self.retention}"
            )
        if self.max_bytes < 0:
            raise ValueError(f"the size cap must be >= 0 bytes (0: none): {self.max_bytes}")


@dataclass(frozen=True, slots=True)
class Removal:
    entry: CacheEntry
    why: Why


@dataclass(frozen=True, slots=True)
class Decision:
    """The entries to remove, in the order to remove them, and what the cache holds after."""

    removals: tuple[Removal, ...]
    #: Bytes of the entries kept.
    kept_bytes: int
    #: A cap is set and the kept entries exceed it (only named files are left to exceed it).
    over_cap: bool


def decide(
    entries: Iterable[CacheEntry], named: Collection[str], now: float, policy: Policy
) -> Decision:
    """The removals of :func:`module rule <controlplane.modelcache.rule>` for ``entries``."""
    listed = sorted(entries, key=lambda e: (e.last_used, e.path))
    unused = [e for e in listed if e.path not in named and now - e.last_used >= policy.retention]
    removals = [Removal(entry, Why.UNUSED) for entry in unused]
    gone = {entry.path for entry in unused}
    kept_bytes = sum(entry.size for entry in listed if entry.path not in gone)
    if policy.max_bytes:
        for entry in listed:
            if kept_bytes <= policy.max_bytes:
                break
            if entry.path in named or entry.path in gone:
                continue
            removals.append(Removal(entry, Why.OVER_CAP))
            kept_bytes -= entry.size
    over_cap = bool(policy.max_bytes) and kept_bytes > policy.max_bytes
    return Decision(tuple(removals), kept_bytes, over_cap)
