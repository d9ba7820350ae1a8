"""Giving an idle slot back (docs/modelpool.md, "Giving an idle slot back"): the idle clocks, the
residents due and acted on, the owner after a reclaim, and the status the pool then writes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.api.v1alpha1 import ModelPool
from controlplane.api.v1alpha1.modelpool import (
    IDLE_ACTION_DEFAULT,
    IDLE_ACTION_RELEASE,
    PHASE_IDLE,
    PHASE_READY,
    PHASE_SWAPPING,
    SLOT_GRANTED,
    SLOT_RELEASED,
)
from controlplane.controllers.modelpool.idle import (
    PoolIdleSettings,
    idle_settings,
    reclaimed_owner,
)
from controlplane.controllers.modelpool.intent import Intent, Owner, OwnerReason, choose_owner
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.plan import PoolView, plan_actions, pool_status
from controlplane.controllers.modelpool.residents import kept_residents
from controlplane.scheduling.budget import Budget
from controlplane.scheduling.idle import Activity, IdleVerdict, judge_idle, parse_stamp, stamp

NOW = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)
RELEASE = PoolIdleSettings(after=5.0, action=IDLE_ACTION_RELEASE, default="a")
BACK_TO_DEFAULT = PoolIdleSettings(after=5.0, action=IDLE_ACTION_DEFAULT, default="a")


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def judge(
    activity: Mapping[str, Activity],
    residents: tuple[str, ...] = ("b",),
    settings: PoolIdleSettings = RELEASE,
    *,
    shared: bool = False,
    requested: bool = False,
    clocks: Mapping[str, datetime | None] | None = None,
    published: tuple[str, ...] = (),
) -> IdleVerdict:
    return judge_idle(
        activity,
        residents,
        settings.rule,
        shared=shared,
        requested=requested,
        pool_since=None,
        member_since=clocks or {},
        published=published,
        now=NOW,
    )


QUIET = Activity()
IN_FLIGHT = Activity(active=True)
HELD = Activity(held=1)


@pytest.mark.parametrize(
    ("case", "activity", "kwargs", "due"),
    [
        ("quiet for idleAfter", {}, {"clocks": {"b": ago(5)}}, ("b",)),
        ("quiet, not yet long enough", {}, {"clocks": {"b": ago(4.9)}}, ()),
        ("a request in flight on it", {"b": IN_FLIGHT}, {"clocks": {"b": ago(60)}}, ()),
        ("a request held for it", {"b": HELD}, {"clocks": {"b": ago(60)}}, ()),
        (
            "held for another member: the exclusive slot's turn passes anyway",
            {"c": HELD},
            {"clocks": {"b": ago(60)}},
            (),
        ),
        (
            "held for another member of a pool with a budget: its own clock",
            {"c": HELD},
            {"clocks": {"b": ago(60)}, "shared": True},
            ("b",),
        ),
        ("an intent suspends it", {}, {"clocks": {"b": ago(60)}, "requested": True}, ()),
        (
            "an intent beside a budget does not",
            {},
            {"clocks": {"b": ago(60)}, "requested": True, "shared": True},
            ("b",),
        ),
        (
            "the default of a Default pool is where the slot goes back to",
            {},
            {"clocks": {"a": ago(60)}, "residents": ("a",), "settings": BACK_TO_DEFAULT},
            (),
        ),
        (
            "the default of a Release pool is given back like any",
            {},
            {"clocks": {"a": ago(60)}, "residents": ("a",)},
            ("a",),
        ),
        (
            "idleAfter unset: no clock at all",
            {},
            {"clocks": {"b": ago(60)}, "settings": PoolIdleSettings(after=None)},
            (),
        ),
        (
            "one busy resident of two keeps only its own clock stopped",
            {"c": IN_FLIGHT},
            {"clocks": {"b": ago(60), "c": ago(60)}, "residents": ("b", "c"), "shared": True},
            ("b",),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_who_is_due(
    case: str, activity: dict[str, Activity], kwargs: dict[str, object], due: tuple[str, ...]
) -> None:
    assert judge(activity, **kwargs).due == due, case  # type: ignore[arg-type]


def test_a_clock_starts_on_the_next_whole_second_and_keeps_its_start() -> None:
    now = NOW + timedelta(microseconds=250_000)
    first = judge_idle({}, ("b",), RELEASE.rule, shared=False, requested=False, pool_since=None,
                       member_since={}, published=(), now=now)  # fmt: skip
    assert first.member_since == {"b": NOW + timedelta(seconds=1)}
    assert first.pool_since == NOW + timedelta(seconds=1)
    assert first.due == ()
    assert first.next_due_in == pytest.approx(5.75)
    later = judge({}, clocks={"b": ago(3)})
    assert later.member_since == {"b": ago(3)}, "a running clock keeps its start"
    assert later.next_due_in == pytest.approx(2.0)


def test_an_intent_suspends_the_reclaim_without_asking_to_look_again() -> None:
    """A swap on request moves the slot: the resident quiet past idleAfter is not due, and no
    clock asks for a reconcile (the intent's end brings one), so no hot requeue loop."""
    verdict = judge({}, clocks={"b": ago(60)}, requested=True)
    assert (verdict.due, verdict.next_due_in) == ((), None)
    assert verdict.member_since == {"b": ago(60)}, "its clock keeps its start"


def test_demand_stops_the_clocks() -> None:
    verdict = judge({"b": IN_FLIGHT}, clocks={"b": ago(60)})
    assert verdict.member_since == {}
    assert verdict.pool_since is None
    assert verdict.next_due_in is None


def test_only_a_published_reclaim_is_acted_on() -> None:
    """Due first goes into status.reclaiming (admission closes on every replica); the drain
    comes only in a reconcile that began with it there."""
    assert judge({}, clocks={"b": ago(60)}).act == ()
    assert judge({}, clocks={"b": ago(60)}, published=("b",)).act == ("b",)
    assert judge({"b": HELD}, clocks={"b": ago(60)}, published=("b",)).act == ()


def test_the_pool_clock_needs_every_member_quiet() -> None:
    assert judge({"c": IN_FLIGHT}, shared=True).pool_since is None
    assert judge({"c": QUIET}, shared=True).pool_since is not None


activities = st.dictionaries(
    st.sampled_from("abcd"),
    st.builds(Activity, held=st.integers(0, 3), active=st.booleans()),
    max_size=4,
)
clocks = st.dictionaries(
    st.sampled_from("abcd"),
    st.one_of(st.none(), st.floats(0, 120).map(ago)),
    max_size=4,
)
residents_st = st.lists(st.sampled_from("abcd"), unique=True, max_size=3).map(tuple)


@given(
    activity=activities,
    residents=residents_st,
    member_since=clocks,
    published=residents_st,
    shared=st.booleans(),
    requested=st.booleans(),
    default_action=st.booleans(),
)
def test_a_busy_resident_is_never_due(
    activity: dict[str, Activity],
    residents: tuple[str, ...],
    member_since: dict[str, datetime | None],
    published: tuple[str, ...],
    shared: bool,
    requested: bool,
    default_action: bool,
) -> None:
    """Whatever the clocks say: a resident with a request in flight or held, or (without a
    budget) any held request in the pool, is never due, never acted on; nothing acted on was not
    published; and no clock is due before idleAfter."""
    settings = BACK_TO_DEFAULT if default_action else RELEASE
    verdict = judge_idle(activity, residents, settings.rule, shared=shared, requested=requested,
                         pool_since=None, member_since=member_since, published=published,
                         now=NOW)  # fmt: skip
    held_anywhere = any(a.held for a in activity.values())
    for member in verdict.due:
        assert member in residents
        assert activity.get(member, QUIET).quiet
        assert shared or not held_anywhere
        assert shared or not requested
        assert settings.rule.reclaimable(member)
        assert NOW - verdict.member_since[member] >= timedelta(seconds=5)
    assert set(verdict.act) <= set(verdict.due) & set(published)
    if any(not a.quiet for a in activity.values()):
        assert verdict.pool_since is None


def test_idle_settings_read_from_the_spec() -> None:
    assert idle_settings({}) == PoolIdleSettings(after=None, action=IDLE_ACTION_RELEASE)
    with_default = {"default": "a", "scheduling": {"idleAfter": "5m"}}
    assert idle_settings(with_default) == PoolIdleSettings(300.0, IDLE_ACTION_DEFAULT, "a")
    released = {"default": "a", "scheduling": {"idleAfter": "5s", "idleAction": "Release"}}
    assert idle_settings(released) == RELEASE


@pytest.mark.parametrize(
    ("owner", "act", "settings", "phase", "expected"),
    [
        (Owner("b", OwnerReason.RESIDENT), ("b",), RELEASE, PHASE_READY, None),
        (Owner("b", OwnerReason.RESIDENT), ("b",), BACK_TO_DEFAULT, PHASE_READY, "a"),
        (Owner("b", OwnerReason.RESIDENT), (), RELEASE, PHASE_READY, "b"),
        (Owner("a", OwnerReason.DEFAULT), (), RELEASE, PHASE_IDLE, None),
        (Owner("a", OwnerReason.DEFAULT), (), BACK_TO_DEFAULT, PHASE_IDLE, "a"),
        (Owner(None, OwnerReason.COLD), (), RELEASE, PHASE_IDLE, None),
        (Owner("a", OwnerReason.DEFAULT), (), RELEASE, "Pending", "a"),
    ],
)
def test_the_owner_after_a_reclaim(
    owner: Owner,
    act: tuple[str, ...],
    settings: PoolIdleSettings,
    phase: str,
    expected: str | None,
) -> None:
    after = reclaimed_owner(owner, act, settings, phase)
    assert after.name == expected
    assert (after.reason is OwnerReason.RECLAIMED) == (after != owner)


def test_a_request_wins_over_an_idle_pool() -> None:
    requested = choose_owner(["a", "b"], "a", None, None)
    assert reclaimed_owner(requested, (), RELEASE, PHASE_IDLE).reason is OwnerReason.RECLAIMED
    asked = choose_owner(["a", "b"], "a", None, Intent("proxy-0", "b", 10.0))
    assert reclaimed_owner(asked, (), RELEASE, PHASE_IDLE) == asked


# -- the status a reclaim writes -----------------------------------------------------------------


def up(name: str) -> MemberState:
    return MemberState(name, slot=SLOT_GRANTED, phase="Ready", urls=(f"http://{name}:1",), pods=1,
                       deployment_drained=False)  # fmt: skip


def gone(name: str) -> MemberState:
    return MemberState(name, slot=SLOT_RELEASED, acknowledged=True, phase="Stopped")


def pool_with(resident: str | None, phase: str, reclaiming: tuple[str, ...] = ()) -> ModelPool:
    pool = ModelPool.from_dict(
        {
            "metadata": {"name": "gpu-0", "namespace": "ns", "generation": 1},
            "spec": {"members": [{"inferenceServiceRef": {"name": n}} for n in ("a", "b")]},
        }
    )
    pool.status.resident_member = resident
    pool.status.residents = [resident] if resident else []
    pool.status.phase = phase
    pool.status.reclaiming = list(reclaiming)
    return pool


def test_released_for_idleness_the_pool_drains_then_is_idle_with_no_resident() -> None:
    owner = Owner(None, OwnerReason.RECLAIMED)
    members = {"a": gone("a"), "b": up("b")}
    verdict = IdleVerdict(member_since={"b": ago(6)}, due=("b",), act=("b",), pool_since=ago(6))
    draining = pool_status(
        pool_with("b", PHASE_READY, ("b",)),
        PoolView(members, owner, plan_actions(members, None), now=NOW, idle=verdict),
    )
    assert (draining.phase, draining.resident_member) == (PHASE_SWAPPING, "b")
    assert draining.reclaiming == ["b"], "admission stays closed while it drains"
    assert draining.idle_since == stamp(ago(6))
    entry = next(m for m in draining.members if m.name == "b")
    assert parse_stamp(entry.idle_since) == ago(6)

    members = {"a": gone("a"), "b": gone("b")}
    idle = pool_status(
        pool_with("b", PHASE_SWAPPING, ("b",)),
        PoolView(members, owner, plan_actions(members, None), now=NOW,
                 idle=IdleVerdict(pool_since=ago(9))),
    )  # fmt: skip
    assert (idle.phase, idle.resident_member, idle.residents) == (PHASE_IDLE, None, [])
    assert idle.reclaiming == []
    slot = next(c for c in idle.conditions if c.type == "SlotAllocated")
    assert (slot.status, slot.reason) == ("False", "Idle")
    ready = next(c for c in idle.conditions if c.type == "Ready")
    assert ready.status == "True", "an idle pool still serves: the next request brings it up"


def test_beside_a_budget_only_the_resident_due_leaves_and_the_others_stay() -> None:
    """A pool with a budget: b quiet past idleAfter, c busy; acted on, b is not kept, so the plan
    probes it (the /slots gate) and c keeps the slot and its fast path."""
    budget = Budget(2, {"a": 1, "b": 1, "c": 1})
    verdict = judge(
        {"c": IN_FLIGHT},
        residents=("b", "c"),
        shared=True,
        clocks={"b": ago(60), "c": ago(60)},
        published=("b",),
    )
    assert verdict.act == ("b",)
    members = {"a": gone("a"), "b": up("b"), "c": up("c")}
    owner = reclaimed_owner(Owner("c", OwnerReason.RESIDENT), verdict.act, RELEASE, PHASE_READY)
    assert owner == Owner("c", OwnerReason.RESIDENT), "c was not due: it stays the owner"
    keep = kept_residents(members, ["b", "c"], owner.name, verdict.act, budget)
    assert keep == ()
    plan = plan_actions(members, owner.name, keep, budget)
    assert (plan.probe, plan.release, plan.grant) == (("b",), (), None)
