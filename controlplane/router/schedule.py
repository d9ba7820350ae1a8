"""The pool's turn as this replica sees it: the scheduler's inputs gathered, its verdict asked.

The policy itself is pure (:mod:`controlplane.scheduling.policy`); this is the I/O around it on a
router-proxy replica: every replica's demand (:class:`~controlplane.router.demand.PoolLeases`
merged with our own :class:`~controlplane.router.demand.LocalDemand`), the pool's settings and
member priorities from its spec, and since when the resident has held the slot, observed on our
own monotonic clock (a timestamp written by another machine is never compared with ours).

A pool with ``spec.capacity`` has several residents (:mod:`controlplane.scheduling.budget`): each
is tracked since when we have seen it resident, the turn goes by
:func:`~controlplane.scheduling.budget.next_shared_turn` and carries the residents that leave.

It also answers the one question the fast path asks of the schedule: is admission to a member
closed (a live intent on the pool's Lease names another member; in a pool with a budget, and
names this one among the residents that leave for it; a change to its pod waits for the pool; the
pool is giving it back for idleness; or the pool's status closes it for a drain)?
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from controlplane.api.v1alpha1.inferenceservice import update_pending
from controlplane.api.v1alpha1.modelpool import (
    DEFAULT_MAX_WAIT,
    DEFAULT_MIN_RESIDENCY,
    DEFAULT_SWAP_BUDGET,
    status_admission,
    status_reclaiming,
    status_residents,
)
from controlplane.clock import TimeSource
from controlplane.router.demand import DEFAULT_ACTIVITY_WINDOW_SECONDS, LocalDemand, PoolLeases
from controlplane.router.inflight import InFlightRequests
from controlplane.router.routing import parse_duration
from controlplane.runtime.objects import ObjectView
from controlplane.scheduling.budget import Budget, Resident, next_shared_turn, pool_budget
from controlplane.scheduling.policy import (
    MemberDemand,
    Residency,
    Settings,
    Turn,
    best_waiting,
    next_turn,
)

DEFAULT_MAX_WAIT_SECONDS = parse_duration(DEFAULT_MAX_WAIT, 30.0)
DEFAULT_BUDGET_SECONDS = parse_duration(DEFAULT_SWAP_BUDGET, 300.0)
DEFAULT_MIN_RESIDENCY_SECONDS = parse_duration(DEFAULT_MIN_RESIDENCY, 10.0)


class PoolCache(Protocol):
    """What the schedule reads from the informer caches."""

    def pool(self, name: str) -> ObjectView | None: ...

    def pool_leases(self, pool: str) -> list[ObjectView]: ...

    def isvc(self, name: str) -> ObjectView | None: ...


class PoolSchedule:
    """The scheduler's inputs for each pool this replica routes to, and its verdict."""

    def __init__(
        self,
        view: PoolCache,
        leases: PoolLeases,
        local: LocalDemand,
        inflight: InFlightRequests,
        *,
        activity_window: float = DEFAULT_ACTIVITY_WINDOW_SECONDS,
        clock: TimeSource = time.monotonic,
        reload: Callable[[str, str], float | None] = lambda pool, member: None,
    ) -> None:
        self.view, self.leases, self.local, self.inflight = view, leases, local, inflight
        self.activity_window = activity_window
        self.clock = clock
        #: A member's measured reload time (s; None: not measured), for the eviction's cost.
        self.reload = reload
        #: Per pool, each resident and since when we have seen it so (our clock).
        self._residents: dict[str, dict[str, float]] = {}
        #: Per pool, its budget as parsed for a spec generation (the fast path asks for it).
        self._budgets: dict[str, tuple[object, Budget | None]] = {}

    def residents(self, pool_name: str) -> list[str]:
        """The members the pool names resident (one, or none, in an exclusive pool)."""
        return status_residents((self.view.pool(pool_name) or {}).get("status") or {})

    def budget(self, pool_name: str) -> Budget | None:
        """The pool's capacity and footprints (None: exclusive), parsed once per generation."""
        pool = self.view.pool(pool_name) or {}
        generation = (pool.get("metadata") or {}).get("generation")
        known = self._budgets.get(pool_name)
        if known is None or known[0] != generation or generation is None:
            known = (generation, pool_budget(pool.get("spec") or {}))
            self._budgets[pool_name] = known
        return known[1]

    def admission_closed(self, pool_name: str, member: str) -> bool:
        """The turn has passed from ``member``: a live intent on the pool's Lease names another
        member and, in a pool with a budget, ``member`` among the residents that leave for it; or
        a change to its pod waits for the pool to drain it (its ``UpdatePending``: its requests
        are held for the new pod, docs/inferenceservice.md, "Changing a serving member"); or the
        pool is giving it back for idleness (``status.reclaiming``: a request held for it is
        demand, which ends the reclaim, docs/modelpool.md "Giving an idle slot back"); or the pool
        drains it (``status.admissionClosed``: the fenced drain, whose probe waits for every
        replica's acknowledgement, docs/design.md "One fenced drain")."""
        if update_pending(self.view.isvc(member)):
            return True
        if member in status_reclaiming((self.view.pool(pool_name) or {}).get("status") or {}):
            return True
        if self.fenced_off(pool_name, member):
            return True
        intent = self.leases.live_intent(pool_name, self.view.pool_leases(pool_name))
        if intent is None or intent.target == member:
            return False
        return self.budget(pool_name) is None or member in intent.evict

    def fenced_off(self, pool_name: str, member: str) -> bool:
        """The pool's status closes admission to ``member`` for a drain
        (``status.admissionClosed``): the closure our demand report acknowledges, so the one the
        fenced drain relies on. A request counted in flight is checked against it once more
        before it is sent, and a swap's own direct address is not used while it holds."""
        status = (self.view.pool(pool_name) or {}).get("status") or {}
        return member in status_admission(status)[0]

    def residency(self, pool_name: str) -> Residency:
        """The resident and since when we have seen it so (first sight counts as its start: a
        replica that starts late keeps the floor longer, never shorter)."""
        since = self.resident_since(pool_name)
        status = (self.view.pool(pool_name) or {}).get("status") or {}
        resident = status.get("residentMember") or None
        if resident is None:
            return Residency(None, self.clock())
        return Residency(str(resident), since.get(str(resident), self.clock()))

    def settings(self, pool_name: str) -> Settings:
        """``spec.scheduling`` as the policy takes it (docs/modelpool.md): an unset bound is
        :data:`DEFAULT_MAX_WAIT_SECONDS`, or half the budget when that is shorter; the floor
        never exceeds the bound."""
        spec = (self.view.pool(pool_name) or {}).get("spec") or {}
        scheduling = spec.get("scheduling") or {}
        budget = parse_duration(spec.get("swapBudget"), DEFAULT_BUDGET_SECONDS)
        max_wait = parse_duration(
            scheduling.get("maxWait"), min(DEFAULT_MAX_WAIT_SECONDS, budget / 2)
        )
        floor = scheduling.get("minResidency")
        min_residency = (
            0.0 if floor in ("0", "0s") else parse_duration(floor, DEFAULT_MIN_RESIDENCY_SECONDS)
        )
        return Settings(max_wait=max_wait, min_residency=min(min_residency, max_wait))

    def priorities(self, pool_name: str) -> dict[str, int]:
        """Each member of the pool and its priority (0 when unset)."""
        members = ((self.view.pool(pool_name) or {}).get("spec") or {}).get("members") or []
        found: dict[str, int] = {}
        for entry in members:
            name = (entry.get("inferenceServiceRef") or {}).get("name")
            if name:
                priority = entry.get("priority")
                found[str(name)] = priority if isinstance(priority, int) else 0
        return found

    def demand(self, pool_name: str) -> dict[str, MemberDemand]:
        """Every replica's demand for the pool's members: ours and every live report."""
        return self.leases.pooled(
            pool_name,
            self.view.pool_leases(pool_name),
            self.local,
            self.inflight,
            self.priorities(pool_name),
            self.activity_window,
        )

    def resident_since(self, pool_name: str) -> dict[str, float]:
        """Each resident and since when we have seen it so (first sight counts as its start)."""
        now = self.clock()
        known = self._residents.get(pool_name, {})
        current = {m: known.get(m, now) for m in self.residents(pool_name)}
        self._residents[pool_name] = current
        return current

    def turn(self, pool_name: str) -> Turn:
        """Whose turn the pool's slot is, on every replica's demand (the scheduler's verdict)."""
        budget = self.budget(pool_name)
        if budget is None:
            return next_turn(
                self.demand(pool_name),
                self.residency(pool_name),
                self.settings(pool_name),
                self.clock(),
            )
        demand = self.demand(pool_name)
        residents = {
            member: Resident(
                since, demand.get(member, MemberDemand()), self.reload(pool_name, member) or 0.0
            )
            for member, since in self.resident_since(pool_name).items()
        }
        return next_shared_turn(demand, residents, budget, self.settings(pool_name), self.clock())

    def turn_in(self, pool_name: str, member: str) -> float:
        """Seconds until ``member`` (waiting) is likely to get the turn: when its oldest held
        request becomes overdue, or sooner, when the resident's floor ends if it is first in
        line. An estimate for ``Retry-After``, never a promise."""
        now = self.clock()
        settings = self.settings(pool_name)
        demand = self.demand(pool_name)
        wanted = demand.get(member)
        if wanted is None or wanted.oldest is None:
            return 0.0
        due = wanted.oldest + settings.max_wait
        residency = self.residency(pool_name)
        if best_waiting(demand, residency.member, settings, now) == member:
            due = min(due, residency.since + settings.min_residency)
        return max(0.0, due - now)
