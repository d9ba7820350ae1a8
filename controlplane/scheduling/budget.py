"""Several residents within a budget: what fits, which residents leave to make room, whose turn.

docs/modelpool.md ("Several residents"). A pool with ``spec.capacity`` is a cache of models, not
one seat: members run together as long as the footprints of every member that holds part of the
slot (granted, or released with a pod not yet gone) sum to at most the capacity. A member that
does not fit gets the slot's turn only by making room, and which residents leave is a cost-aware
choice, never "the oldest" and never a member with requests in flight while another would do.

**What it costs to evict a resident** (:func:`eviction_cost`, smaller leaves first):

1. whether it has demand now or a moment ago (held or in-flight requests): evicting it closes
   its admission and makes its clients wait for its next turn;
2. how much demand (held and in-flight requests, as counted): a resident that a sparse request
   just brought in leaves before one that several clients keep busy, even inside its floor
   (then the turn waits for that floor, as a busy resident's floor is kept in an exclusive
   pool); without it, a member loaded for one request evicted the busiest resident, which came
   straight back (measured by ``make bench-fairness BENCH_ARGS="--budget 2"``);
3. whether it is inside its ``minResidency`` floor (the anti-thrash setting);
4. its priority;
5. its reload time as measured (seconds; an unmeasured member counts as free): what bringing it
   back will cost;
6. how long it has been resident (the longer, the sooner it leaves), then its name, so every
   replica that sees the same pool picks the same set.

:func:`choose_evictions` takes residents in that order until the target fits, then drops again
every one the others make unnecessary (the most costly first), so the set is sufficient and
minimal: no member in it could stay. Members already leaving (released, pods not yet gone) are
not residents; they free their share without being chosen.

**Whose turn it is** (:func:`next_shared_turn`) is :func:`~controlplane.scheduling.policy.next_turn`
with "the resident" replaced by the residents that would have to leave: a waiting member that
fits gets the turn at once (nobody loses anything); one that needs room gets it when none of the
evicted has demand, when it is overdue (``maxWait``: the bound wins), or when every evicted
resident has served its floor. The turn carries the eviction set: the driver writes it into the
intent, so admission closes for those residents only (docs/router.md).

Pure: no Kubernetes, clocks or I/O; callers pass ``now`` on their own clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from controlplane.scheduling.policy import (
    MemberDemand,
    Settings,
    Turn,
    TurnReason,
    best_waiting,
    overdue,
)

#: ``Budget.unit`` of ``spec.capacity.members``: every member counts one.
UNIT_MEMBERS = "members"
#: ``Budget.unit`` of ``spec.capacity.gpuMemory``: footprints in bytes.
UNIT_BYTES = "bytes"


@dataclass(frozen=True, slots=True)
class Budget:
    """A pool's capacity and each member's footprint, in one unit (members or bytes)."""

    capacity: int
    footprints: Mapping[str, int]
    unit: str = UNIT_MEMBERS

    def size(self, member: str) -> int:
        """``member``'s footprint; an undeclared one counts as the whole capacity (it can only
        run alone: the schema refuses such a pool, so this is the safe reading of a stale one)."""
        return self.footprints.get(member, self.capacity)

    def used(self, holders: Iterable[str]) -> int:
        return sum(self.size(member) for member in set(holders))

    def fits(self, member: str, holders: Iterable[str]) -> bool:
        """``member`` may run beside ``holders`` (itself not counted twice)."""
        others = set(holders) - {member}
        return self.used(others) + self.size(member) <= self.capacity

    def describe(self, amount: int) -> str:
        """An amount as ``status.budget`` shows it: a count, or bytes in the largest binary unit
        that divides them (``22Gi``)."""
        if self.unit == UNIT_MEMBERS:
            return str(amount)
        for suffix, scale in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if amount and amount % scale == 0:
                return f"{amount // scale}{suffix}"
        return str(amount)


def _bytes(text: object) -> int | None:
    try:
        value = parse_quantity(text)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, InvalidOperation):
        return None
    return int(Decimal(value).to_integral_value()) if value > 0 else None


def pool_budget(spec: Mapping[str, Any]) -> Budget | None:
    """The budget a pool's ``spec`` declares, or None for an exclusive pool (no ``capacity``).

    A capacity the schema would refuse (both or neither of ``members`` and ``gpuMemory``, a
    malformed quantity) reads as None too: one member at a time is always safe."""
    capacity = spec.get("capacity")
    if not isinstance(capacity, Mapping):
        return None
    names = [
        str((entry.get("inferenceServiceRef") or {}).get("name"))
        for entry in spec.get("members") or ()
    ]
    seats, memory = capacity.get("members"), capacity.get("gpuMemory")
    if isinstance(seats, int) and memory is None and seats >= 1:
        return Budget(seats, dict.fromkeys(names, 1), UNIT_MEMBERS)
    total = _bytes(memory) if seats is None else None
    if total is None:
        return None
    footprints: dict[str, int] = {}
    for name, entry in zip(names, spec.get("members") or (), strict=True):
        size = _bytes(entry.get("gpuMemory"))
        if size is not None:
            footprints[name] = size
    return Budget(total, footprints, UNIT_BYTES)


@dataclass(frozen=True, slots=True)
class Resident:
    """A member that holds part of the budget and may be asked to leave: since when it has been
    resident (the caller's clock), what is asked of it, and its measured reload time (s)."""

    since: float = 0.0
    demand: MemberDemand = field(default_factory=MemberDemand)
    reload: float = 0.0


def eviction_cost(
    member: str, resident: Resident, settings: Settings, now: float
) -> tuple[bool, int, bool, int, float, float, str]:
    """Sort key of a resident: smaller leaves first (the order in the module docstring)."""
    inside_floor = now < resident.since + settings.min_residency
    return (
        resident.demand.wants_slot,
        resident.demand.held + resident.demand.in_flight,
        inside_floor,
        resident.demand.priority,
        resident.reload,
        resident.since,
        member,
    )


def choose_evictions(
    budget: Budget,
    target: str,
    residents: Mapping[str, Resident],
    settings: Settings,
    now: float,
) -> tuple[str, ...] | None:
    """The residents that leave so ``target`` fits (``()``: it fits beside them all; None: it does
    not fit even alone, which the schema forbids). Sufficient and minimal; cheapest first."""
    staying = {m for m in residents if m != target}
    need = budget.used(staying) + budget.size(target) - budget.capacity
    if need <= 0:
        return ()
    if budget.size(target) > budget.capacity:
        return None
    ordered = sorted(staying, key=lambda m: eviction_cost(m, residents[m], settings, now))
    chosen: list[str] = []
    freed = 0
    for member in ordered:
        if freed >= need:
            break
        chosen.append(member)
        freed += budget.size(member)
    for member in reversed(list(chosen)):
        if freed - budget.size(member) >= need:
            chosen.remove(member)
            freed -= budget.size(member)
    return tuple(chosen)


def next_shared_turn(
    demand: Mapping[str, MemberDemand],
    residents: Mapping[str, Resident],
    budget: Budget,
    settings: Settings,
    now: float,
) -> Turn:
    """The next turn of a pool with a budget (rules in the module docstring). ``residents`` are
    the members that hold the slot and stay unless evicted; ``Turn.member`` is None while nobody
    gets a turn."""
    best = best_waiting(
        {m: d for m, d in demand.items() if m not in residents}, None, settings, now
    )
    if best is None:
        return Turn(None, TurnReason.NO_OTHER_DEMAND)
    evict = choose_evictions(budget, best, residents, settings, now)
    if evict is None:
        return Turn(None, TurnReason.NO_ROOM)
    if not evict:
        return Turn(best, TurnReason.FITS)
    if not any(residents[m].demand.wants_slot for m in evict):
        return Turn(best, TurnReason.RESIDENT_IDLE, evict=evict)
    if overdue(demand[best], settings, now):
        return Turn(best, TurnReason.MAX_WAIT, evict=evict)
    floor_ends = max(residents[m].since + settings.min_residency for m in evict)
    if now < floor_ends:
        return Turn(
            None,
            TurnReason.MIN_RESIDENCY,
            recheck_at=_first_overdue(demand, set(residents), settings, floor_ends),
        )
    return Turn(best, TurnReason.RESIDENCY_SERVED, evict=evict)


def _first_overdue(
    demand: Mapping[str, MemberDemand],
    residents: Set[str],
    settings: Settings,
    floor_ends: float,
) -> float:
    """The earliest of the floors' end and the moment a waiting member becomes overdue."""
    soonest = floor_ends
    for member, wanted in demand.items():
        if member not in residents and wanted.held > 0 and wanted.oldest is not None:
            soonest = min(soonest, wanted.oldest + settings.max_wait)
    return soonest
