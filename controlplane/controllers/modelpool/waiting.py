"""The waiting demand a pool shows (``status.waiting``, the ``Waiting`` column): pure.

Every router-proxy replica reports the requests it holds per member
(:mod:`controlplane.api.v1alpha1.demand`); the pool controller sums the live reports of a pool so
``kubectl get mpool`` says why the slot is where it is: who waits, how many requests, since when.
A report carries how long its oldest request had waited when it was written (a duration); the
controller places the arrival on its own clock, at the moment it saw the report, so no instant
written by another machine is compared with ours. The arrival is rounded to the second: the status
changes when the demand does, not with every report's jitter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from controlplane.api.v1alpha1.demand import ReportedDemand
from controlplane.api.v1alpha1.modelpool import WaitingDemand


@dataclass(frozen=True, slots=True)
class SeenReport:
    """One replica's live report, and when the controller saw it (seconds since the epoch)."""

    seen_at: float
    demand: dict[str, ReportedDemand]


def waiting_demand(
    reports: Iterable[SeenReport], members: Sequence[str], resident: str | None
) -> list[WaitingDemand]:
    """Members other than the resident with held requests, oldest first (then by name)."""
    held: dict[str, int] = {}
    oldest: dict[str, float] = {}
    for report in reports:
        for member, entry in report.demand.items():
            if member not in members or member == resident or entry.held <= 0:
                continue
            held[member] = held.get(member, 0) + entry.held
            arrived = report.seen_at - entry.waited
            oldest[member] = min(oldest.get(member, arrived), arrived)
    order = sorted(held, key=lambda m: (oldest[m], m))
    return [
        WaitingDemand(member=m, requests=held[m], since=_rfc3339(math.floor(oldest[m])))
        for m in order
    ]


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
