"""What the pool controller does with a snapshot of its members, and the status it reports."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from controlplane.api.v1alpha1 import ModelPool
from controlplane.api.v1alpha1.conditions import find_condition
from controlplane.api.v1alpha1.modelpool import (
    SLOT_GRANTED,
    SLOT_RELEASED,
    BudgetStatus,
    ModelPoolStatus,
)
from controlplane.controllers.modelpool.intent import Intent, Owner, OwnerReason
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.plan import (
    Deferral,
    Plan,
    PoolView,
    blocking_reports,
    decided_slots,
    deferral_from,
    deployment_drained,
    plan_actions,
    pool_status,
    status_changed,
    transitions,
)
from controlplane.controllers.modelpool.residents import kept_residents
from controlplane.probes.idle import IdleOutcome, IdleReport
from controlplane.scheduling.budget import Budget

GRANTED, RELEASED = SLOT_GRANTED, SLOT_RELEASED

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def up(name: str) -> MemberState:
    """Ready and serving at an endpoint, with the pool's grant."""
    return MemberState(name, slot=GRANTED, phase="Ready", urls=(f"http://{name}:1",), pods=1,
                       deployment_drained=False)  # fmt: skip


def applied(name: str) -> MemberState:
    """Just applied: the pool has not decided about it, so its Deployment was never raised."""
    return MemberState(name, phase="Stopped")


def loading(name: str) -> MemberState:
    return MemberState(name, slot=GRANTED, phase="Creating", pods=1, deployment_drained=False)


def stopped(name: str) -> MemberState:
    """Released, the release acknowledged by the member, nothing left."""
    return MemberState(name, slot=RELEASED, acknowledged=True, phase="Stopped")


def terminating(name: str) -> MemberState:
    """Released, its pod still Terminating (the process has not exited)."""
    return MemberState(name, slot=RELEASED, acknowledged=True, phase="Creating", pods=1)


def missing(name: str) -> MemberState:
    return MemberState(name, found=False)


def members(*states: MemberState) -> dict[str, MemberState]:
    return {s.name: s for s in states}


# -- the plan ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("snapshot", "owner", "expected"),
    [
        # cold pool, default a: nothing else holds the slot, a goes up
        (members(stopped("a"), stopped("b")), "a", Plan(grant="a")),
        # settled: nothing to do
        (members(up("a"), stopped("b")), "a", Plan()),
        # swap a -> b: a serves, so it is probed first; b must wait
        (members(up("a"), stopped("b")), "b", Plan(probe=("a",), holding=("a",))),
        # a released but its pod is Terminating: b still waits
        (members(terminating("a"), stopped("b")), "b", Plan(holding=("a",))),
        # a gone: b goes up
        (members(stopped("a"), stopped("b")), "b", Plan(grant="b")),
        # a not serving (loading): released without a probe; b waits for its pod
        (members(loading("a"), stopped("b")), "b", Plan(release=("a",), holding=("a",))),
        # a starting (listed, not ready) pod: its server may be up before its readiness probe
        # says so, with requests forwarded by the swap's driver: probed on that endpoint
        (
            members(replace(loading("a"), starting_urls=("http://a:2",)), stopped("b")),
            "b",
            Plan(probe=("a",), holding=("a",)),
        ),
        # Ready by phase but no ready endpoint yet: still probed (and the probe step fails it)
        (
            members(MemberState("a", phase="Ready", pods=1), stopped("b")),
            "b",
            Plan(probe=("a",), holding=("a",)),
        ),
        # a ready endpoint but a stale phase: serving all the same
        (
            members(MemberState("a", phase="Creating", urls=("http://a:1",)), stopped("b")),
            "b",
            Plan(probe=("a",), holding=("a",)),
        ),
        # the owner is already granted: no write for it, others still drained
        (members(up("a"), up("b")), "a", Plan(probe=("b",), holding=("b",))),
        # cold, no owner: everything is drained, nothing goes up
        (
            members(up("a"), loading("b")),
            None,
            Plan(probe=("a",), release=("b",), holding=("a", "b")),
        ),
        # three members: the owner waits for both
        (
            members(stopped("a"), terminating("b"), up("c")),
            "a",
            Plan(probe=("c",), holding=("b", "c")),
        ),
        # the Deployment has not caught up with the release yet (no pod seen): the owner waits
        (
            members(MemberState("a", slot=RELEASED, deployment_drained=False), stopped("b")),
            "b",
            Plan(holding=("a",)),
        ),
        # pool and members applied together (undecided): the non-owner is released at once
        # (nothing serves), the owner is granted only once the other holds nothing
        (members(applied("a"), applied("b")), "a", Plan(release=("b",), holding=("b",))),
        (members(applied("a"), stopped("b")), "a", Plan(grant="a")),
        # running without this pool's grant (it joined while running): granted, not restarted
        (
            members(MemberState("a", phase="Ready", urls=("http://a:1",), pods=1), stopped("b")),
            "a",
            Plan(grant="a"),
        ),
        # a non-owner that holds the grant, not serving (stopped, or crashed): released at once;
        # it holds the slot until then, so the owner waits
        (
            members(MemberState("a", slot=GRANTED, phase="Stopped"), stopped("b")),
            "b",
            Plan(release=("a",), holding=("a",)),
        ),
        # released, nothing left, but the member has not acknowledged the release (its raise
        # may still be landing): the owner waits
        (
            members(MemberState("a", slot=RELEASED, phase="Stopped"), stopped("b")),
            "b",
            Plan(holding=("a",)),
        ),
        # a released member stays released: no write for it again
        (members(stopped("a"), up("b")), "b", Plan()),
        # a missing member: no action at all
        (members(up("a"), stopped("b"), missing("z")), "b", Plan(missing=("z",))),
        (members(stopped("a"), missing("z")), "a", Plan(missing=("z",))),
    ],
)
def test_plan(snapshot: dict[str, MemberState], owner: str | None, expected: Plan) -> None:
    assert plan_actions(snapshot, owner) == expected


@pytest.mark.parametrize(
    ("deployment", "drained"),
    [
        (None, True),
        (
            {
                "metadata": {"generation": 2},
                "spec": {"replicas": 0},
                "status": {"observedGeneration": 2},
            },
            True,
        ),
        (
            {
                "metadata": {"generation": 2},
                "spec": {"replicas": 0},
                "status": {"observedGeneration": 2, "replicas": 0},
            },
            True,
        ),
        (
            {
                "metadata": {"generation": 2},
                "spec": {"replicas": 0},
                "status": {"observedGeneration": 1, "replicas": 0},
            },
            False,
        ),
        (
            {
                "metadata": {"generation": 2},
                "spec": {"replicas": 0},
                "status": {"observedGeneration": 2, "replicas": 1},
            },
            False,
        ),
        (
            {
                "metadata": {"generation": 2},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 2},
            },
            False,
        ),
        ({"metadata": {"generation": 1}, "spec": {"replicas": 0}, "status": {}}, False),
    ],
)
def test_a_deployment_is_drained_once_observed_at_zero(
    deployment: dict[str, Any] | None, drained: bool
) -> None:
    assert deployment_drained(deployment) is drained


# -- deferral --------------------------------------------------------------------------------------


def test_a_starting_member_is_held_only_by_a_server_that_answered_and_is_not_idle() -> None:
    starting = replace(loading("a"), starting_urls=("http://a:2",))
    serving = up("a")
    busy = IdleReport(IdleOutcome.BUSY, "1 of 1 slot(s) processing", 1, 1, answered=True)
    garbled = IdleReport(IdleOutcome.FAILED, "/slots answered 200 with JSON null", answered=True)
    idle = IdleReport(IdleOutcome.IDLE, "1 slot(s) idle", 1, answered=True)
    loading_503 = IdleReport(IdleOutcome.FAILED, "/slots answered 503")
    refused = IdleReport(IdleOutcome.FAILED, "/slots: ConnectError: refused")
    # a server that is not up holds nothing of a starting member: released as before
    assert blocking_reports(starting, [("u", loading_503)]) == []
    assert blocking_reports(starting, [("u", refused)]) == []
    assert blocking_reports(starting, [("u", idle)]) == []
    # one that answered is judged as a serving member is: busy waits, unproven defers
    assert blocking_reports(starting, [("u", busy)]) == [("u", busy)]
    assert blocking_reports(starting, [("u", garbled)]) == [("u", garbled)]
    # a serving member is held by anything short of idle, answered or not
    assert blocking_reports(serving, [("u", refused), ("v", idle)]) == [("u", refused)]
    assert blocking_reports(serving, [("u", idle)]) == []


def test_busy_defers_as_pods_busy_and_a_failed_check_wins() -> None:
    busy = IdleReport(IdleOutcome.BUSY, "1 of 2 slot(s) processing", 2, 1)
    failed = IdleReport(IdleOutcome.FAILED, "/slots answered 500")
    deferral = deferral_from({"a": [("http://a:1", busy)]})
    assert deferral is not None
    assert deferral.reason == "PodsBusy"
    assert "a at http://a:1: 1 of 2 slot(s) processing" in deferral.message
    deferral = deferral_from({"a": [("http://a:1", busy)], "c": [("http://c:1", failed)]})
    assert deferral is not None
    assert deferral.reason == "IdleCheckFailed"
    assert "c at http://c:1: /slots answered 500" in deferral.message
    assert "a at http://a:1" in deferral.message
    assert deferral_from({}) is None


# -- status --------------------------------------------------------------------------------------


def pool(status: dict[str, Any] | None = None, generation: int = 3) -> ModelPool:
    return ModelPool.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelPool",
            "metadata": {"name": "gpu", "namespace": "ns", "generation": generation},
            "spec": {"members": [{"inferenceServiceRef": {"name": n}} for n in ("a", "b")]},
            "status": status or {},
        }
    )


def owner(name: str | None, reason: OwnerReason = OwnerReason.REQUESTED) -> Owner:
    intent = Intent("router-0", name, 10.0) if name and reason is OwnerReason.REQUESTED else None
    return Owner(name, reason, intent)


def compute(
    snapshot: dict[str, MemberState],
    chosen: Owner,
    current: dict[str, Any] | None = None,
    deferral: Deferral | None = None,
) -> dict[str, Any]:
    plan = plan_actions(snapshot, chosen.name)
    status = pool_status(pool(current), PoolView(snapshot, chosen, plan, deferral, NOW))
    return status.to_dict()


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_cold_pool_warming_its_default_is_swapping_with_the_default_pending() -> None:
    status = compute(members(stopped("a"), stopped("b")), owner("a", OwnerReason.DEFAULT))
    assert (status["phase"], status.get("residentMember"), status["pendingMember"]) == (
        "Swapping", None, "a",
    )  # fmt: skip
    assert conditions(status) == {
        "MembersValid": ("True", "MembersFound"),
        "SlotAllocated": ("False", "Starting"),
        "SwapDeferred": ("False", "NotDeferred"),
        "Ready": ("True", "AcceptingRequests"),
    }
    assert status["observedGeneration"] == 3


def test_ready_when_the_owner_is_ready_and_nobody_else_holds_the_slot() -> None:
    status = compute(members(up("a"), stopped("b")), owner("a", OwnerReason.DEFAULT))
    assert (status["phase"], status["residentMember"], status.get("pendingMember")) == (
        "Ready", "a", None,
    )  # fmt: skip
    assert status["members"] == [
        {"name": "a", "phase": "Ready", "resident": True, "slot": "Granted"},
        {"name": "b", "phase": "Stopped", "resident": False, "slot": "Released"},
    ]
    assert conditions(status)["SlotAllocated"] == ("True", "ResidentReady")


def test_the_decision_is_written_into_the_pool_status() -> None:
    """The slots the reconcile decided (a released, b granted) are what the status says; a
    member that was not decided about keeps its slot as last written."""
    snapshot = members(stopped("a"), applied("b"), up("c"))
    slots = decided_slots(snapshot, released=["c"], granted="b")
    assert slots == {"a": RELEASED, "b": GRANTED, "c": RELEASED}
    chosen = owner("b", OwnerReason.DEFAULT)
    view = PoolView(snapshot, chosen, plan_actions(snapshot, "b"), None, NOW, slots=slots)
    written = pool_status(pool(None), view).to_dict()["members"]
    assert [(m["name"], m.get("slot")) for m in written] == [
        ("a", RELEASED), ("b", GRANTED), ("c", RELEASED),
    ]  # fmt: skip
    unchanged = pool_status(pool(None), PoolView(snapshot, chosen, Plan(), None, NOW))
    assert [m.slot for m in unchanged.members] == [RELEASED, None, GRANTED]


def test_during_a_swap_the_old_resident_keeps_the_title_until_the_new_one_is_ready() -> None:
    current = {"residentMember": "a", "phase": "Ready"}
    busy = Deferral("PodsBusy", "drain deferred, requests in flight: a at http://a:1: 1 of 2")
    status = compute(members(up("a"), stopped("b")), owner("b"), current, busy)
    assert (status["phase"], status["residentMember"], status["pendingMember"]) == (
        "Swapping", "a", "b",
    )  # fmt: skip
    assert conditions(status)["SlotAllocated"] == ("False", "Draining")
    deferred = find_condition(pool(status).status.conditions, "SwapDeferred")
    assert deferred is not None
    assert (deferred.status, deferred.reason, deferred.message) == (
        "True",
        "PodsBusy",
        busy.message,
    )

    status = compute(members(terminating("a"), stopped("b")), owner("b"), current)
    assert (status["residentMember"], status["pendingMember"]) == ("a", "b")
    assert conditions(status)["SlotAllocated"] == ("False", "WaitingForPods")

    status = compute(members(stopped("a"), loading("b")), owner("b"), current)
    assert (status["phase"], status["residentMember"], status["pendingMember"]) == (
        "Swapping", "a", "b",
    )  # fmt: skip

    status = compute(members(stopped("a"), up("b")), owner("b"), current)
    assert (status["phase"], status["residentMember"], status.get("pendingMember")) == (
        "Ready", "b", None,
    )  # fmt: skip


def test_a_withdrawn_intent_brings_the_resident_back_as_the_pending_member() -> None:
    current = {"residentMember": "a", "pendingMember": "b", "phase": "Swapping"}
    status = compute(members(stopped("a"), loading("b")), owner("a", OwnerReason.RESIDENT), current)
    assert (status["residentMember"], status["pendingMember"]) == ("a", "a")  # a comes back
    assert status["phase"] == "Swapping"


def test_cold_without_default_is_pending() -> None:
    status = compute(members(stopped("a"), stopped("b")), owner(None, OwnerReason.COLD))
    assert status["phase"] == "Pending"
    assert status.get("residentMember") is None
    assert status.get("pendingMember") is None
    assert conditions(status)["SlotAllocated"] == ("False", "Cold")


def test_a_missing_member_is_degraded_and_keeps_resident_and_pending() -> None:
    current = {"residentMember": "a", "pendingMember": "b", "phase": "Swapping"}
    snapshot = members(up("a"), stopped("b"), missing("z"))
    status = compute(snapshot, owner("b"), current)
    assert (status["phase"], status["residentMember"], status["pendingMember"]) == (
        "Degraded", "a", "b",
    )  # fmt: skip
    assert conditions(status)["MembersValid"] == ("False", "MembersNotFound")
    valid = find_condition(pool(status).status.conditions, "MembersValid")
    assert valid is not None
    assert valid.message == "InferenceService(s) not found: z"
    assert {"name": "z", "phase": "NotFound", "resident": False} in status["members"]


def test_status_is_unchanged_when_nothing_changed_and_transition_times_stay() -> None:
    snapshot = members(up("a"), stopped("b"))
    first = compute(snapshot, owner("a", OwnerReason.DEFAULT))
    later = pool_status(
        pool(first),
        PoolView(
            snapshot,
            owner("a", OwnerReason.DEFAULT),
            plan_actions(snapshot, "a"),
            None,
            datetime(2026, 1, 2, tzinfo=UTC),
        ),
    )
    assert not status_changed(pool(first).status, later)
    # a new generation is a change (observedGeneration follows it)
    bumped = pool(first, generation=4)
    plan = plan_actions(snapshot, "a")
    wanted = pool_status(bumped, PoolView(snapshot, owner("a", OwnerReason.DEFAULT), plan))
    assert status_changed(bumped.status, wanted)
    assert wanted.observed_generation == 4


# -- a pool with a budget (several residents) ------------------------------------------------------

TWO = Budget(2, {"a": 1, "b": 1, "c": 1})


@pytest.mark.parametrize(
    ("snapshot", "owner", "keep", "expected"),
    [
        # b fits beside a: nothing is drained, b goes up at once
        (members(up("a"), stopped("b"), stopped("c")), "b", ("a",), Plan(grant="b")),
        # c needs room: the intent evicts b, which is probed; a stays; c waits for b
        (
            members(up("a"), up("b"), stopped("c")),
            "c",
            ("a",),
            Plan(probe=("b",), holding=("b",)),
        ),
        # b released, its pod still Terminating: it still holds its share, c waits
        (members(up("a"), terminating("b"), stopped("c")), "c", ("a",), Plan(holding=("b",))),
        # b gone: c fits beside a
        (members(up("a"), stopped("b"), stopped("c")), "c", ("a",), Plan(grant="c")),
        # an intent that evicts nobody although nothing fits: the owner waits, nothing is drained
        (members(up("a"), up("b"), stopped("c")), "c", ("a", "b"), Plan()),
    ],
)
def test_a_budget_drains_only_the_evicted_and_grants_when_the_owner_fits(
    snapshot: dict[str, MemberState], owner: str, keep: tuple[str, ...], expected: Plan
) -> None:
    assert plan_actions(snapshot, owner, keep, TWO) == expected


def test_kept_residents_are_the_granted_residents_the_intent_does_not_evict() -> None:
    snapshot = members(up("a"), up("b"), loading("c"))
    # c is granted but was never resident (an abandoned swap): it is not kept
    assert kept_residents(snapshot, ["a", "b"], "c", ("b",), TWO) == ("a",)
    assert kept_residents(snapshot, ["a", "b"], None, (), Budget(3, TWO.footprints)) == ("a", "b")
    assert kept_residents(snapshot, ["a", "b"], "c", (), None) == ()


def test_a_lowered_capacity_lets_the_oldest_grant_leave_first() -> None:
    older = replace(up("a"), since="2026-01-01T00:00:01.000000Z")
    newer = replace(up("b"), since="2026-01-01T00:00:02.000000Z")
    snapshot = members(older, newer, stopped("c"))
    assert kept_residents(snapshot, ["a", "b"], "b", (), Budget(1, TWO.footprints)) == ()
    assert kept_residents(snapshot, ["a", "b"], None, (), Budget(1, TWO.footprints)) == ("b",)
    # an owner not granted yet takes no room: it waits for an eviction the intent names
    assert kept_residents(snapshot, ["a", "b"], "c", (), TWO) == ("a", "b")


def test_a_budget_pool_names_every_resident_and_what_they_use() -> None:
    pool = ModelPool.from_dict({
        "metadata": {"name": "p", "namespace": "ns", "generation": 1},
        "spec": {"members": [{"inferenceServiceRef": {"name": n}} for n in "abc"]},
        "status": {"residentMember": "a", "residents": ["a"]},
    })  # fmt: skip
    snapshot = members(up("a"), up("b"), stopped("c"))
    owner = Owner("b", OwnerReason.REQUESTED, Intent("proxy-0", "b", 10.0))
    view = PoolView(snapshot, owner, Plan(), now=NOW, budget=TWO, keep=("a",))
    status = pool_status(pool, view)
    assert (status.residents, status.resident_member) == (["a", "b"], "b")
    assert status.budget is not None
    assert (status.budget.used, status.budget.capacity) == ("2", "2")
    assert [m.resident for m in status.members] == [True, True, False]
    assert status.phase == "Ready"
    # the same pool, exclusive: one resident and no budget shown
    alone = members(up("a"), stopped("b"), stopped("c"))
    exclusive = pool_status(
        pool, PoolView(alone, Owner("a", OwnerReason.RESIDENT), Plan(), now=NOW)
    )
    assert (exclusive.residents, exclusive.budget) == (["a"], None)


def test_an_evicted_resident_leaves_the_residents_when_its_release_is_written() -> None:
    pool = ModelPool.from_dict({
        "metadata": {"name": "p", "namespace": "ns", "generation": 1},
        "spec": {"members": [{"inferenceServiceRef": {"name": n}} for n in "abc"]},
        "status": {"residentMember": "b", "residents": ["a", "b"]},
    })  # fmt: skip
    snapshot = members(up("a"), up("b"), stopped("c"))
    owner = Owner("c", OwnerReason.REQUESTED, Intent("proxy-0", "c", 10.0, evict=("b",)))
    slots = {"a": GRANTED, "b": RELEASED, "c": RELEASED}
    view = PoolView(snapshot, owner, Plan(holding=("b",)), now=NOW, slots=slots, budget=TWO,
                    keep=("a",))  # fmt: skip
    status = pool_status(pool, view)
    assert (status.residents, status.resident_member, status.pending_member) == (["a"], "a", "c")
    assert status.phase == "Swapping"
    # b's pod is still there: it still counts
    assert status.budget is not None
    assert status.budget.used == "2"


def test_in_a_budget_pool_a_join_completes_a_swap_and_a_resident_moving_back_does_not() -> None:
    budget = BudgetStatus(capacity="2", used="2")
    before = ModelPoolStatus(resident_member="b", residents=["a", "b"], budget=budget)
    back = ModelPoolStatus(resident_member="a", residents=["a"], budget=budget)
    joined = ModelPoolStatus(resident_member="c", residents=["a", "c"], budget=budget)
    owner = Owner("c", OwnerReason.REQUESTED, Intent("proxy-0", "c", 10.0, evict=("b",)))
    assert transitions(before, back, owner, NOW) == []
    (done,) = transitions(back, joined, owner, NOW)
    assert done.reason == "SwapCompleted"
    assert done.message == "swap done: c is resident (beside a)"


def test_a_resident_whose_pod_change_waits_for_the_pool_is_drained_then_granted_again() -> None:
    """docs/inferenceservice.md, "Changing a serving member": the owner is drained through the
    same probe as any member, and granted again only once the change went in."""
    changing = replace(up("a"), update_pending=True)
    # Serving: probed first (released only when idle), nothing granted.
    assert plan_actions(members(changing, stopped("b")), "a") == Plan(probe=("a",), refresh=("a",))
    # Starting (no ready endpoint, nothing listed): released at once.
    starting = replace(loading("a"), update_pending=True)
    assert plan_actions(members(starting, stopped("b")), "a") == Plan(
        release=("a",), refresh=("a",)
    )
    # Released, the change not yet in: not granted again (its old pod may still be serving).
    released = MemberState("a", slot=RELEASED, phase="Draining", pods=1, update_pending=True)
    assert plan_actions(members(released, stopped("b")), "a") == Plan()
    # The change went in (the Deployment at 0 took the new pod): granted, as any owner.
    changed = replace(released, update_pending=False)
    assert plan_actions(members(changed, stopped("b")), "a") == Plan(grant="a")


def test_a_member_that_is_not_resident_is_not_drained_for_its_pod_change() -> None:
    """A pending change of a member without the slot goes in by itself (it has no pod)."""
    waiting = replace(stopped("b"), update_pending=True)
    assert plan_actions(members(up("a"), waiting), "a") == Plan()


def test_a_kept_resident_of_a_budget_pool_is_drained_for_its_pod_change() -> None:
    budget = Budget(capacity=2, footprints={"a": 1, "b": 1, "c": 1})
    kept = replace(up("b"), update_pending=True)
    plan = plan_actions(members(up("a"), kept, stopped("c")), "a", keep=("b",), budget=budget)
    assert plan == Plan(probe=("b",), refresh=("b",))
