"""Whose turn the slot is: a pure function of pooled demand, residency, settings and now.

docs/modelpool.md ("Scheduling the slot"). The pool is shared by several teams at once, so the
next resident is chosen by a policy with a stated bound, not by "whoever asks once the resident is
idle" (which starves every other member while the resident has steady traffic) and not by "whoever
asks" (which swaps on every request when two members alternate). The rules, first that holds:

1. **nobody else waits**: the resident keeps the slot (sticky);
2. **the pool is cold**, or **the resident has no demand** (nothing held for it, nothing in flight
   anywhere): the best waiting member gets the turn at once;
3. **a waiting member is overdue** (its oldest held request has waited ``max_wait``): it gets the
   turn, even inside the resident's ``min_residency``. The bound is a promise made to a request;
   the floor is an efficiency setting, so the bound wins;
4. **the resident is inside its floor** (resident for less than ``min_residency``): it keeps the
   slot, and the decision is due again when the floor ends or someone becomes overdue;
5. otherwise the floor is served and someone waits: the best waiting member gets the turn.

"Best waiting member": overdue members first, oldest first among them (so every overdue member is
served in the order it became overdue); then the highest *aged* priority, ``priority +
waited / max_wait`` (a member gains one priority level per ``max_wait`` waited, so a lower priority
is passed over only while it is younger than the difference); then the oldest; then the name, so
every replica that sees the same demand picks the same member.

Batching (AABB, not ABAB) follows from the unit of a turn: a member, not a request. Every request
held for the member that gets the turn is answered by that turn.

The function knows nothing of Kubernetes, clocks or I/O: callers pass ``now`` and demand on one
clock (the caller's own monotonic clock), and carry out the turn.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MemberDemand:
    """What the pool's replicas together ask of one member.

    ``held``: requests held for it (not forwarded: it is not resident, or admission to it is
    closed); ``oldest``: when the oldest of them arrived (None when none is held); ``active``: a
    request for it is in flight somewhere, or ended a moment ago (a client looping back to back
    is demand between two of its requests); ``priority``: the member's priority (higher first);
    ``in_flight``: how many requests are in flight for it, as far as the caller can count (its
    own, and one for each other replica that reports it active): how much an eviction would
    interrupt (:mod:`controlplane.scheduling.budget`).
    """

    held: int = 0
    oldest: float | None = None
    active: bool = False
    priority: int = 0
    in_flight: int = 0

    def waited(self, now: float) -> float:
        return 0.0 if self.oldest is None else max(0.0, now - self.oldest)

    @property
    def wants_slot(self) -> bool:
        return self.held > 0 or self.active


@dataclass(frozen=True, slots=True)
class Settings:
    """``max_wait``: the starvation bound (s); ``min_residency``: the anti-thrash floor (s)."""

    max_wait: float
    min_residency: float

    def __post_init__(self) -> None:
        if not self.max_wait > 0:
            raise ValueError(f"max_wait must be positive, got {self.max_wait}")
        if self.min_residency < 0:
            raise ValueError(f"min_residency must not be negative, got {self.min_residency}")


@dataclass(frozen=True, slots=True)
class Residency:
    """The resident (None: cold) and since when it has been (on the caller's clock)."""

    member: str | None
    since: float = 0.0


class TurnReason(enum.StrEnum):
    NO_OTHER_DEMAND = "NoOtherDemand"
    COLD = "Cold"
    RESIDENT_IDLE = "ResidentIdle"
    MAX_WAIT = "MaxWait"
    MIN_RESIDENCY = "MinResidency"
    RESIDENCY_SERVED = "ResidencyServed"
    #: Of a pool with a budget (:mod:`controlplane.scheduling.budget`): the member fits beside
    #: the residents, or could not fit even alone.
    FITS = "Fits"
    NO_ROOM = "NoRoom"


@dataclass(frozen=True, slots=True)
class Turn:
    """The member the slot belongs to next (None: stays cold), why, and when the decision can
    change with no new demand (``recheck_at``: the floor ends or someone becomes overdue);
    ``evict``: in a pool with a budget, the residents that leave to make room for it."""

    member: str | None
    reason: TurnReason
    recheck_at: float | None = None
    evict: tuple[str, ...] = ()

    @property
    def passes(self) -> bool:
        """The turn goes to someone other than the resident: admission to the resident closes."""
        return self.reason in (
            TurnReason.COLD,
            TurnReason.RESIDENT_IDLE,
            TurnReason.MAX_WAIT,
            TurnReason.RESIDENCY_SERVED,
        )


def overdue(demand: MemberDemand, settings: Settings, now: float) -> bool:
    return demand.held > 0 and demand.waited(now) >= settings.max_wait


def ranking(
    member: str, demand: MemberDemand, settings: Settings, now: float
) -> tuple[bool, float, float, str]:
    """Sort key of a waiting member: larger goes first (the name inverted so "a" beats "b")."""
    waited = demand.waited(now)
    late = overdue(demand, settings, now)
    aged = waited if late else demand.priority + waited / settings.max_wait
    return (late, aged, waited, _inverted(member))


def _inverted(name: str) -> str:
    """A key under which a smaller name sorts larger (for max())."""
    return "".join(chr(0x10FFFF - ord(ch)) for ch in name) + chr(0x10FFFF)


def best_waiting(
    demand: Mapping[str, MemberDemand], resident: str | None, settings: Settings, now: float
) -> str | None:
    """The waiting member (held requests, not the resident) that goes first, or None."""
    waiting = [m for m, d in demand.items() if m != resident and d.held > 0]
    if not waiting:
        return None
    return max(waiting, key=lambda m: ranking(m, demand[m], settings, now))


def next_turn(
    demand: Mapping[str, MemberDemand], residency: Residency, settings: Settings, now: float
) -> Turn:
    """The pool's next turn by the rules of the module docstring (first that holds wins)."""
    resident = residency.member
    best = best_waiting(demand, resident, settings, now)
    if best is None:
        return Turn(resident, TurnReason.NO_OTHER_DEMAND)
    if resident is None:
        return Turn(best, TurnReason.COLD)
    own = demand.get(resident, MemberDemand())
    if not own.wants_slot:
        return Turn(best, TurnReason.RESIDENT_IDLE)
    if overdue(demand[best], settings, now):
        return Turn(best, TurnReason.MAX_WAIT)
    floor_ends = residency.since + settings.min_residency
    if now < floor_ends:
        return Turn(
            resident,
            TurnReason.MIN_RESIDENCY,
            recheck_at=_first_deadline(demand, resident, settings, floor_ends),
        )
    return Turn(best, TurnReason.RESIDENCY_SERVED)


def _first_deadline(
    demand: Mapping[str, MemberDemand], resident: str, settings: Settings, floor_ends: float
) -> float:
    """The earliest of the floor's end and the moment a waiting member becomes overdue."""
    soonest = floor_ends
    for member, wanted in demand.items():
        if member != resident and wanted.held > 0 and wanted.oldest is not None:
            soonest = min(soonest, wanted.oldest + settings.max_wait)
    return soonest


def wait_bound(settings: Settings, members: int, drain: float, swap: float) -> float:
    """The longest a held request waits while the pool is healthy (docs/modelpool.md).

    It becomes overdue after ``max_wait``; from then on only members overdue before it go first,
    each costing at most one drain of the in-flight requests (``drain``: their longest duration)
    and one swap; so ``max_wait + (members - 1) * (drain + swap)``.
    """
    if members < 1:
        raise ValueError("a pool has at least one member")
    if math.isinf(drain) or math.isinf(swap):
        return math.inf
    return settings.max_wait + (members - 1) * (drain + swap)
