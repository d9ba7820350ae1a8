"""Several residents within a budget: the pool's budget read from its spec, the eviction choice and
the shared turn (:mod:`controlplane.scheduling.budget`), as tables and as properties (hypothesis).

The properties are the issue's: never over budget (the target fits once the chosen residents are
gone), the set is minimal (no member of it could stay), a resident with demand is chosen only when
the residents without demand cannot make room, and a member inside its floor only when the others
cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.scheduling.budget import (
    UNIT_BYTES,
    UNIT_MEMBERS,
    Budget,
    Resident,
    choose_evictions,
    next_shared_turn,
    pool_budget,
)
from controlplane.scheduling.policy import MemberDemand, Settings, TurnReason, wait_bound
from tests.unit.slot_model import (
    Request,
    assert_served_within,
    replay,
    requests_for,
    timings,
)

S = Settings(max_wait=30.0, min_residency=10.0)
GI = 1 << 30


def members(*names: str, memory: dict[str, str] | None = None) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for name in names:
        entry: dict[str, object] = {"inferenceServiceRef": {"name": name}}
        if memory and name in memory:
            entry["gpuMemory"] = memory[name]
        out.append(entry)
    return out


def test_a_pool_without_capacity_is_exclusive() -> None:
    assert pool_budget({"members": members("a", "b")}) is None


def test_a_count_capacity_counts_every_member_one() -> None:
    budget = pool_budget({"members": members("a", "b", "c"), "capacity": {"members": 2}})
    assert budget == Budget(2, {"a": 1, "b": 1, "c": 1}, UNIT_MEMBERS)
    assert budget.fits("c", {"a"})
    assert not budget.fits("c", {"a", "b"})
    assert budget.describe(2) == "2"


def test_a_memory_capacity_reads_each_members_quantity() -> None:
    spec = {
        "members": members("a", "b", memory={"a": "16Gi", "b": "6Gi"}),
        "capacity": {"gpuMemory": "24Gi"},
    }
    budget = pool_budget(spec)
    assert budget == Budget(24 * GI, {"a": 16 * GI, "b": 6 * GI}, UNIT_BYTES)
    assert budget.fits("b", {"a"})
    assert budget.describe(22 * GI) == "22Gi"


def test_a_capacity_the_schema_refuses_reads_as_exclusive() -> None:
    both = {"members": members("a"), "capacity": {"members": 2, "gpuMemory": "1Gi"}}
    garbled = {"members": members("a"), "capacity": {"gpuMemory": "lots"}}
    assert pool_budget(both) is None
    assert pool_budget(garbled) is None


def test_an_undeclared_footprint_counts_as_the_whole_capacity() -> None:
    budget = Budget(10, {"a": 4})
    assert budget.size("b") == 10
    assert not budget.fits("b", {"a"})


def resident(
    since: float = 0.0, *, active: bool = False, priority: int = 0, reload: float = 0.0
) -> Resident:
    return Resident(since, MemberDemand(active=active, priority=priority), reload)


def test_a_target_that_fits_evicts_nobody() -> None:
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    assert choose_evictions(budget, "b", {"a": resident()}, S, 100) == ()


def test_an_idle_resident_leaves_before_a_busy_one() -> None:
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    chosen = choose_evictions(budget, "c", {"a": resident(active=True), "b": resident()}, S, 100)
    assert chosen == ("b",)


def test_a_resident_inside_its_floor_stays_while_another_can_leave() -> None:
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    chosen = choose_evictions(budget, "c", {"a": resident(95), "b": resident(50)}, S, 100)
    assert chosen == ("b",)


def test_the_less_busy_resident_leaves_even_inside_its_floor_and_the_turn_waits_for_it() -> None:
    """a has four requests in flight and has served its floor; b, which one sparse request just
    brought in, has one. b leaves, not a: evicting a would bring it straight back. The turn
    waits for b's floor (as a busy resident's floor is kept in an exclusive pool)."""
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    busy = Resident(0.0, MemberDemand(active=True, in_flight=4))
    sparse = Resident(98.0, MemberDemand(active=True, in_flight=1))
    residents = {"a": busy, "b": sparse}
    assert choose_evictions(budget, "c", residents, S, 100) == ("b",)
    waiting = {"c": MemberDemand(held=1, oldest=99.5)}
    turn = next_shared_turn(waiting, residents, budget, S, 100)
    assert (turn.member, turn.reason, turn.recheck_at) == (None, TurnReason.MIN_RESIDENCY, 108)
    later = next_shared_turn(waiting, residents, budget, S, 108.5)
    assert (later.member, later.evict) == ("c", ("b",))


def test_the_cheaper_reload_leaves_first() -> None:
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    residents = {"a": resident(reload=1.0), "b": resident(reload=9.0)}
    assert choose_evictions(budget, "c", residents, S, 100) == ("a",)


def test_only_as_much_as_needed_leaves() -> None:
    # 24 GiB: a 16 + b 4 + c 4 resident; d needs 8: one of the small ones is not enough, so b and
    # c go (cheapest first) only if a alone would not do: a alone frees 16, so a goes alone when
    # b and c are busier... here all idle, and the pruning keeps the set minimal.
    budget = Budget(24, {"a": 16, "b": 4, "c": 4, "d": 8})
    residents = {"a": resident(since=3), "b": resident(since=1), "c": resident(since=2)}
    chosen = choose_evictions(budget, "d", residents, S, 100)
    assert chosen is not None
    assert budget.used(set(residents) - set(chosen)) + 8 <= 24
    assert all(budget.used(set(residents) - set(chosen) | {m}) + 8 > 24 for m in chosen)
    assert chosen == ("b", "c")


def test_a_target_larger_than_the_capacity_never_fits() -> None:
    assert choose_evictions(Budget(4, {"a": 5}), "a", {}, S, 0) is None


def test_a_waiting_member_that_fits_gets_the_turn_at_once_inside_everyones_floor() -> None:
    budget = Budget(2, {"a": 1, "b": 1})
    demand = {"a": MemberDemand(active=True), "b": MemberDemand(held=1, oldest=99)}
    turn = next_shared_turn(demand, {"a": resident(99, active=True)}, budget, S, 100)
    assert (turn.member, turn.reason, turn.evict) == ("b", TurnReason.FITS, ())


def test_a_member_that_needs_room_waits_for_the_floor_of_the_busy_resident_it_would_evict() -> None:
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    residents = {"a": resident(95, active=True), "b": resident(96, active=True)}
    demand = {"c": MemberDemand(held=2, oldest=99)}
    turn = next_shared_turn(demand, residents, budget, S, 100)
    assert (turn.member, turn.reason, turn.recheck_at) == (None, TurnReason.MIN_RESIDENCY, 105)
    later = next_shared_turn(demand, residents, budget, S, 105.5)
    assert (later.member, later.reason, later.evict) == ("c", TurnReason.RESIDENCY_SERVED, ("a",))


def test_an_idle_resident_makes_room_at_once() -> None:
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    residents = {"a": resident(99, active=True), "b": resident(99)}
    turn = next_shared_turn({"c": MemberDemand(held=1, oldest=99)}, residents, budget, S, 100)
    assert (turn.member, turn.reason, turn.evict) == ("c", TurnReason.RESIDENT_IDLE, ("b",))


def test_an_overdue_member_evicts_even_inside_the_floor() -> None:
    budget = Budget(1, {"a": 1, "c": 1})
    residents = {"a": resident(99, active=True)}
    turn = next_shared_turn({"c": MemberDemand(held=1, oldest=60)}, residents, budget, S, 100)
    assert (turn.member, turn.reason, turn.evict) == ("c", TurnReason.MAX_WAIT, ("a",))


def test_held_requests_for_a_resident_are_not_a_turn_to_give() -> None:
    budget = Budget(2, {"a": 1, "b": 1})
    demand = {"a": MemberDemand(held=3, oldest=50)}
    turn = next_shared_turn(demand, {"a": resident()}, budget, S, 100)
    assert (turn.member, turn.reason) == (None, TurnReason.NO_OTHER_DEMAND)


# -- properties ------------------------------------------------------------------------------------

NAMES = ("a", "b", "c", "d", "e", "f")


@st.composite
def pools(draw: st.DrawFn) -> tuple[Budget, str, dict[str, Resident], float]:
    sizes = {name: draw(st.integers(1, 10)) for name in NAMES}
    target = draw(st.sampled_from(NAMES))
    capacity = draw(st.integers(sizes[target], 30))
    residents: dict[str, Resident] = {}
    for name in NAMES:
        if name != target and draw(st.booleans()):
            residents[name] = Resident(
                since=draw(st.floats(0, 100)),
                demand=MemberDemand(
                    held=draw(st.integers(0, 2)),
                    oldest=50.0,
                    active=draw(st.booleans()),
                    priority=draw(st.integers(0, 3)),
                ),
                reload=draw(st.floats(0, 10)),
            )
    return Budget(capacity, sizes), target, residents, draw(st.floats(0, 120))


@given(pools())
def test_the_chosen_set_makes_room_and_is_minimal(
    case: tuple[Budget, str, dict[str, Resident], float],
) -> None:
    budget, target, residents, now = case
    chosen = choose_evictions(budget, target, residents, S, now)
    assert chosen is not None  # the target is never larger than the capacity here
    assert set(chosen) <= set(residents)
    assert target not in chosen
    staying = set(residents) - set(chosen)
    assert budget.used(staying) + budget.size(target) <= budget.capacity
    for member in chosen:
        assert budget.used(staying | {member}) + budget.size(target) > budget.capacity


@given(pools())
def test_demand_and_floors_are_spared_whenever_the_others_suffice(
    case: tuple[Budget, str, dict[str, Resident], float],
) -> None:
    budget, target, residents, now = case
    chosen = choose_evictions(budget, target, residents, S, now)
    assert chosen is not None
    need = budget.used(residents) + budget.size(target) - budget.capacity
    idle = [m for m, r in residents.items() if not r.demand.wants_slot]
    if budget.used(idle) >= need:
        assert all(not residents[m].demand.wants_slot for m in chosen)
        served = [m for m in idle if now >= residents[m].since + S.min_residency]
        if budget.used(served) >= need:
            assert all(now >= residents[m].since + S.min_residency for m in chosen)


# -- the bound, in a small model of a pool with a budget ---------------------------------------


@dataclass
class SharedPool:
    """Residents within a budget; one swap at a time (one driver): admission closes for the
    residents it evicts, they drain (their requests in flight finish), leave, and the target
    loads for ``swap_time``; requests run in parallel once forwarded."""

    settings: Settings
    priorities: dict[str, int]
    budget: Budget
    swap_time: float
    residents: dict[str, float] = field(default_factory=dict)
    target: str | None = None
    evict: tuple[str, ...] = ()
    swap_ends: float | None = None
    running: list[tuple[float, Request]] = field(default_factory=list)
    held: list[Request] = field(default_factory=list)

    def demand(self) -> dict[str, MemberDemand]:
        found = {}
        for member, priority in self.priorities.items():
            mine = [r for r in self.held if r.member == member]
            found[member] = MemberDemand(
                held=len(mine),
                oldest=min((r.arrival for r in mine), default=None),
                active=any(r.member == member for _, r in self.running),
                priority=priority,
            )
        return found

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def open(self, member: str) -> bool:
        return member in self.residents and member not in self.evict

    def step(self, now: float, arrivals: list[Request]) -> None:
        self.running = [(end, r) for end, r in self.running if end > now]
        self.held += arrivals
        for request in [r for r in self.held if self.open(r.member)]:
            self.held.remove(request)
            request.started = now
            self.running.append((now + request.duration, request))
        if self.target is None:
            demand = self.demand()
            residents = {m: Resident(since, demand[m]) for m, since in self.residents.items()}
            turn = next_shared_turn(demand, residents, self.budget, self.settings, now)
            if turn.member is not None:
                self.target, self.evict = turn.member, turn.evict  # admission closes for those
        draining = any(r.member in self.evict for _, r in self.running)
        if self.target is not None and self.swap_ends is None and not draining:
            for member in self.evict:
                del self.residents[member]
            assert self.budget.used(self.residents) + self.budget.size(self.target) <= (
                self.budget.capacity
            ), f"{self.target} does not fit beside {sorted(self.residents)}"
            self.evict, self.swap_ends = (), now + self.swap_time
        if self.swap_ends is not None and now >= self.swap_ends and self.target is not None:
            self.residents[self.target] = now
            self.target = self.swap_ends = None


@st.composite
def shared_traces(
    draw: st.DrawFn,
) -> tuple[Settings, dict[str, int], Budget, float, float, list[Request]]:
    names = [chr(ord("a") + i) for i in range(draw(st.integers(3, 5)))]
    priorities = {n: draw(st.integers(0, 3)) for n in names}
    sizes = {n: draw(st.integers(1, 4)) for n in names}
    capacity = draw(st.integers(max(sizes.values()), sum(sizes.values()) - 1))
    policy, swap, longest = timings(draw)
    requests = requests_for(draw, names, longest)
    return (
        policy,
        priorities,
        Budget(capacity, sizes),
        swap,
        longest,
        requests,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_traces())
def test_no_request_waits_beyond_its_bound_and_the_budget_holds_in_a_shared_pool(
    trace: tuple[Settings, dict[str, int], Budget, float, float, list[Request]],
) -> None:
    policy, priorities, budget, swap, longest, requests = trace
    pool = SharedPool(policy, priorities, budget, swap)
    horizon = max(r.arrival for r in requests) + 10 * (policy.max_wait + len(priorities) * 5)
    replay(pool, requests, horizon)
    bound = wait_bound(policy, len(priorities), drain=longest, swap=swap)
    assert_served_within(requests, bound, lambda: f"{policy}, {budget}, swap {swap}")
