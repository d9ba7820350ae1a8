"""The slot's scheduler as a pure function, and its two promises under random load (hypothesis).

The table tests pin each rule of :mod:`controlplane.scheduling.policy`. The property test runs
the policy in a small model of one pool (arrivals, per-request durations, a drain that waits for
every request in flight, a swap that takes its time, admission to the resident closed once the
turn passes) and checks, for random traces: no request waits beyond
:func:`~controlplane.scheduling.policy.wait_bound`, and no turn ends before ``min_residency``
unless the bound (an overdue member) or an idle resident ended it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.scheduling.policy import (
    MemberDemand,
    Residency,
    Settings,
    TurnReason,
    best_waiting,
    next_turn,
    wait_bound,
)
from tests.unit.slot_model import (
    Request,
    assert_served_within,
    replay,
    requests_for,
    timings,
)

S = Settings(max_wait=30.0, min_residency=10.0)


def held(count: int, oldest: float, priority: int = 0) -> MemberDemand:
    return MemberDemand(held=count, oldest=oldest, priority=priority)


def test_nobody_else_waiting_keeps_the_resident() -> None:
    turn = next_turn({"a": MemberDemand(active=True)}, Residency("a", 0), S, 100)
    assert (turn.member, turn.reason, turn.passes) == ("a", TurnReason.NO_OTHER_DEMAND, False)


def test_a_cold_pool_gives_the_turn_to_the_best_waiting_member() -> None:
    turn = next_turn({"b": held(1, 99)}, Residency(None), S, 100)
    assert (turn.member, turn.reason, turn.passes) == ("b", TurnReason.COLD, True)


def test_an_idle_resident_gives_the_turn_at_once_even_inside_its_floor() -> None:
    demand = {"a": MemberDemand(), "b": held(1, 100)}
    turn = next_turn(demand, Residency("a", since=99), S, 100)
    assert (turn.member, turn.reason) == ("b", TurnReason.RESIDENT_IDLE)


def test_a_busy_resident_inside_its_floor_keeps_the_slot_until_the_floor_ends() -> None:
    demand = {"a": MemberDemand(active=True), "b": held(3, 100)}
    turn = next_turn(demand, Residency("a", since=95), S, 100)
    assert (turn.member, turn.reason, turn.passes) == ("a", TurnReason.MIN_RESIDENCY, False)
    assert turn.recheck_at == 105  # the floor ends before b is overdue (130)


def test_held_requests_for_the_resident_are_demand_too() -> None:
    demand = {"a": held(1, 99), "b": held(3, 100)}
    turn = next_turn(demand, Residency("a", since=95), S, 100)
    assert turn.reason is TurnReason.MIN_RESIDENCY


def test_the_recheck_is_when_a_waiting_member_becomes_overdue_if_that_is_sooner() -> None:
    floor = Settings(max_wait=30, min_residency=30)
    demand = {"a": MemberDemand(active=True), "b": held(1, 80)}
    turn = next_turn(demand, Residency("a", since=90), floor, 100)
    assert turn.recheck_at == 110


def test_an_overdue_member_wins_over_the_floor() -> None:
    demand = {"a": MemberDemand(active=True), "b": held(1, 69)}
    turn = next_turn(demand, Residency("a", since=99), S, 100)
    assert (turn.member, turn.reason) == ("b", TurnReason.MAX_WAIT)


def test_a_served_floor_passes_the_turn_to_whoever_waits() -> None:
    demand = {"a": MemberDemand(active=True), "b": held(1, 99.9)}
    turn = next_turn(demand, Residency("a", since=80), S, 100)
    assert (turn.member, turn.reason) == ("b", TurnReason.RESIDENCY_SERVED)


def test_priority_goes_first_and_aging_lets_an_older_lower_priority_pass() -> None:
    young_high = held(1, 99, priority=1)
    assert best_waiting({"b": held(1, 90), "c": young_high}, "a", S, 100) == "c"
    # b has waited 40 s longer than c: 40/30 > 1 level, so b's aged priority passes c's
    assert best_waiting({"b": held(1, 50), "c": held(1, 90, priority=1)}, "a", S, 200) == "b"


def test_overdue_members_go_oldest_first_whatever_their_priority() -> None:
    demand = {"b": held(1, 10), "c": held(1, 20, priority=900)}
    assert best_waiting(demand, "a", S, 100) == "b"


def test_ties_are_broken_by_name_so_every_replica_picks_the_same() -> None:
    assert best_waiting({"c": held(1, 50), "b": held(1, 50)}, "a", S, 60) == "b"


def test_members_without_held_requests_and_the_resident_never_wait() -> None:
    demand = {"a": held(5, 0), "b": MemberDemand(active=True)}
    assert best_waiting(demand, "a", S, 100) is None


def test_settings_refuse_a_bound_that_is_not_positive_or_a_negative_floor() -> None:
    with pytest.raises(ValueError, match="max_wait"):
        Settings(max_wait=0, min_residency=0)
    with pytest.raises(ValueError, match="min_residency"):
        Settings(max_wait=1, min_residency=-1)


def test_the_stated_bound() -> None:
    assert wait_bound(S, members=2, drain=4, swap=3) == 37
    assert wait_bound(S, members=3, drain=4, swap=3) == 44
    with pytest.raises(ValueError, match="at least one member"):
        wait_bound(S, members=0, drain=1, swap=1)


# -- the property: a model of one pool driven by the policy --------------------------------------


@dataclass
class Pool:
    """One slot: resident, draining toward a target, or swapping to it; requests run in
    parallel once forwarded (a server's slots), for their own duration."""

    settings: Settings
    priorities: dict[str, int]
    swap_time: float
    resident: str | None = None
    since: float = 0.0
    target: str | None = None
    swap_ends: float | None = None
    turn_reason: TurnReason | None = None
    running: list[tuple[float, Request]] = field(default_factory=list)
    held: list[Request] = field(default_factory=list)
    last_end: dict[str, float] = field(default_factory=dict)
    #: Turns that ended inside the floor: (resident, how long it lasted, why, whether the cause
    #: was real: the resident had no demand, or the new owner was overdue).
    short_turns: list[tuple[str, float, TurnReason, bool]] = field(default_factory=list)

    def demand(self, now: float) -> dict[str, MemberDemand]:
        found = {}
        for member, priority in self.priorities.items():
            mine = [r for r in self.held if r.member == member]
            active = any(r.member == member for _, r in self.running)
            found[member] = MemberDemand(
                held=len(mine),
                oldest=min((r.arrival for r in mine), default=None),
                active=active,
                priority=priority,
            )
        return found

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def start(self, request: Request, now: float) -> None:
        request.started = now
        self.running.append((now + request.duration, request))

    def step(self, now: float, arrivals: list[Request]) -> None:
        for end, request in [x for x in self.running if x[0] <= now]:
            self.running.remove((end, request))
        for request in arrivals:
            if request.member == self.resident and self.target is None:
                self.start(request, now)  # the fast path: admission open
            else:
                self.held.append(request)
        if self.target is None:
            demand = self.demand(now)
            turn = next_turn(demand, Residency(self.resident, self.since), self.settings, now)
            if turn.member is not None and turn.member != self.resident:
                if (
                    self.resident is not None
                    and now - self.since < self.settings.min_residency - 1e-6
                ):
                    idle = not demand[self.resident].wants_slot
                    late = demand[turn.member].waited(now) >= self.settings.max_wait
                    self.short_turns.append(
                        (self.resident, now - self.since, turn.reason, idle or late)
                    )
                self.target, self.turn_reason = turn.member, turn.reason  # admission closes
        if self.target is not None and self.swap_ends is None and not self.running:
            self.swap_ends = now + self.swap_time  # drained: the swap runs
        if self.swap_ends is not None and now >= self.swap_ends:
            self.resident, self.since = self.target, now
            self.target = self.swap_ends = None
            for request in [r for r in self.held if r.member == self.resident]:
                self.held.remove(request)
                self.start(request, now)  # the whole batch in this turn


members_st = st.integers(min_value=2, max_value=4)


@st.composite
def traces(draw: st.DrawFn) -> tuple[Settings, dict[str, int], float, float, list[Request]]:
    count = draw(members_st)
    names = [chr(ord("a") + i) for i in range(count)]
    priorities = {n: draw(st.integers(0, 3)) for n in names}
    policy, swap, longest = timings(draw)
    requests = requests_for(draw, names, longest)
    return (
        policy,
        priorities,
        swap,
        longest,
        requests,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_no_request_waits_beyond_its_bound_and_no_turn_is_cut_short_without_cause(
    trace: tuple[Settings, dict[str, int], float, float, list[Request]],
) -> None:
    policy, priorities, swap, longest, requests = trace
    pool = Pool(policy, priorities, swap)
    horizon = max(r.arrival for r in requests) + 10 * (policy.max_wait + len(priorities) * 5)
    replay(pool, requests, horizon)
    bound = wait_bound(policy, len(priorities), drain=longest, swap=swap)
    assert_served_within(requests, bound, lambda: f"{policy}, swap {swap}")
    for member, lasted, reason, caused in pool.short_turns:
        assert caused, (
            f"{member}'s turn ended after {lasted:.2f} s < {policy.min_residency} s ({reason}) "
            "while it had demand and nobody was overdue"
        )
