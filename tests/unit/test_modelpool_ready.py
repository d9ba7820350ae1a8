"""The pool's ``Ready`` condition: each reason, and that it stays put through a normal swap.

``Ready`` is what ``kubectl wait`` and Helm's ``--wait`` read, so it must not flap with each swap,
and it must never be the only thing that changes in a status (each status change is a write).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.api.v1alpha1 import ModelPool
from controlplane.api.v1alpha1.modelpool import SLOT_GRANTED, SLOT_RELEASED
from controlplane.controllers.modelpool.intent import Intent, Owner, OwnerReason
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.plan import (
    Deferral,
    PoolView,
    plan_actions,
    pool_status,
)
from controlplane.controllers.modelpool.ready import pool_ready

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
BUSY = Deferral("PodsBusy", "drain deferred, requests in flight: a at http://a:1: 1 of 2")
BROKEN = Deferral(
    "IdleCheckFailed", "drain deferred, the idle check failed: a at http://a:1: /slots answered 500"
)


def up(name: str) -> MemberState:
    return MemberState(name, slot=SLOT_GRANTED, phase="Ready", urls=(f"http://{name}:1",), pods=1,
                       deployment_drained=False)  # fmt: skip


def loading(name: str) -> MemberState:
    return MemberState(name, slot=SLOT_GRANTED, phase="Creating", pods=1, deployment_drained=False)


def stopped(name: str) -> MemberState:
    return MemberState(name, slot=SLOT_RELEASED, acknowledged=True, phase="Stopped")


def terminating(name: str) -> MemberState:
    return MemberState(name, slot=SLOT_RELEASED, acknowledged=True, phase="Creating", pods=1)


def missing(name: str) -> MemberState:
    return MemberState(name, found=False)


def members(*states: MemberState) -> dict[str, MemberState]:
    return {s.name: s for s in states}


def requested(name: str | None) -> Owner:
    if name is None:
        return Owner(None, OwnerReason.COLD, None)
    return Owner(name, OwnerReason.REQUESTED, Intent("router-0", name, 10.0))


def pool(status: dict[str, Any], generation: int = 3) -> ModelPool:
    return ModelPool.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelPool",
            "metadata": {"name": "gpu", "namespace": "ns", "generation": generation},
            "spec": {"members": [{"inferenceServiceRef": {"name": n}} for n in ("a", "b")]},
            "status": status,
        }
    )


def step(
    current: dict[str, Any],
    snapshot: dict[str, MemberState],
    owner: Owner,
    now: datetime,
    deferral: Deferral | None = None,
) -> dict[str, Any]:
    """The status one reconcile writes over ``current``."""
    view = PoolView(snapshot, owner, plan_actions(snapshot, owner.name), deferral, now)
    return pool_status(pool(current), view).to_dict()


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


# -- the rules -----------------------------------------------------------------------------------


NOT_FOUND = ("False", "MembersNotFound", "InferenceService(s) not found: ghost, phantom")
HELD = (
    "False",
    "MemberInAnotherPool",
    "member(s) listed by another pool first: a (held by pool p)",
)


@pytest.mark.parametrize(
    ("invalid", "deferral", "status", "reason"),
    [
        (None, None, "True", "AcceptingRequests"),
        # a busy member is a drain that ends by itself: the pool is working
        (None, ("PodsBusy", BUSY.message), "True", "AcceptingRequests"),
        (None, ("IdleCheckFailed", BROKEN.message), "False", "IdleCheckFailed"),
        (NOT_FOUND, None, "False", "MembersNotFound"),
        (HELD, None, "False", "MemberInAnotherPool"),
        # an invalid member comes first: the pool decides nothing at all
        (NOT_FOUND, ("IdleCheckFailed", BROKEN.message), "False", "MembersNotFound"),
    ],
)
def test_the_rules(
    invalid: tuple[str, str, str] | None,
    deferral: tuple[str, str] | None,
    status: str,
    reason: str,
) -> None:
    decision = pool_ready(invalid, deferral)
    assert (decision.status, decision.reason) == (status, reason)


def test_the_messages_say_what_to_fix() -> None:
    assert "ghost, phantom" in pool_ready(NOT_FOUND, None).message
    assert "held by pool p" in pool_ready(HELD, None).message
    broken = pool_ready(None, (BROKEN.reason, BROKEN.message)).message
    assert "/slots answered 500" in broken
    assert "cannot be handed over" in broken


# -- through the status the pool writes ----------------------------------------------------------


def test_ready_stays_true_with_one_transition_time_through_cold_warm_and_a_swap() -> None:
    """Cold, warming a, a resident, a drained while busy, its pod going, b loading, b resident:
    ``Ready`` never moves, and the status carries it unchanged from the first write on."""
    journey: list[tuple[dict[str, MemberState], Owner, Deferral | None]] = [
        (members(stopped("a"), stopped("b")), requested(None), None),
        (members(loading("a"), stopped("b")), requested("a"), None),
        (members(up("a"), stopped("b")), requested("a"), None),
        (members(up("a"), stopped("b")), requested("b"), BUSY),
        (members(terminating("a"), stopped("b")), requested("b"), None),
        (members(stopped("a"), loading("b")), requested("b"), None),
        (members(stopped("a"), up("b")), requested("b"), None),
    ]
    status: dict[str, Any] = {}
    phases = []
    first: dict[str, Any] | None = None
    for minute, (snapshot, owner, deferral) in enumerate(journey):
        status = step(status, snapshot, owner, START + timedelta(minutes=minute), deferral)
        phases.append(status["phase"])
        ready = condition(status, "Ready")
        first = first or ready
        assert ready == first, f"Ready moved at step {minute} ({status['phase']})"
    assert first is not None
    assert (first["status"], first["reason"], first["observedGeneration"]) == (
        "True", "AcceptingRequests", 3,
    )  # fmt: skip
    assert {"Pending", "Swapping", "Ready"} <= set(phases), "the journey did not swap"


def test_a_missing_member_makes_the_pool_not_ready_until_it_exists() -> None:
    degraded = step({}, members(up("a"), missing("b")), requested("a"), START)
    ready = condition(degraded, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "MembersNotFound")
    assert "b" in ready["message"]
    assert ready["observedGeneration"] == 3
    assert degraded["phase"] == "Degraded"

    later = START + timedelta(minutes=1)
    found = step(degraded, members(up("a"), stopped("b")), requested("a"), later)
    ready = condition(found, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "AcceptingRequests")
    assert ready["lastTransitionTime"] == "2026-01-01T12:01:00Z"


def test_a_failing_idle_check_flips_ready_in_the_write_that_defers_the_swap() -> None:
    """False while the drain waits on a broken ``/slots``, True again once the member answers
    (busy is fine): each flip rides on a ``SwapDeferred`` change, never alone."""
    settled = step({}, members(up("a"), stopped("b")), requested("a"), START)
    broken = step(settled, members(up("a"), stopped("b")), requested("b"), START, BROKEN)
    ready = condition(broken, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "IdleCheckFailed")
    assert BROKEN.message in ready["message"]
    assert condition(broken, "SwapDeferred")["reason"] == "IdleCheckFailed"
    assert broken["phase"] == "Swapping"

    answers = step(broken, members(up("a"), stopped("b")), requested("b"), START, BUSY)
    assert (condition(answers, "Ready")["status"], condition(answers, "Ready")["reason"]) == (
        "True", "AcceptingRequests",
    )  # fmt: skip


def test_ready_changes_only_with_members_valid_or_swap_deferred() -> None:
    """Every pair of snapshots: whenever ``Ready`` differs, so does a condition it is made from,
    so it never turns an unchanged status into a write."""
    snapshots = [
        (members(up("a"), stopped("b")), requested("a"), None),
        (members(up("a"), stopped("b")), requested("b"), BUSY),
        (members(up("a"), stopped("b")), requested("b"), BROKEN),
        (members(up("a"), missing("b")), requested("a"), None),
        (members(stopped("a"), loading("b")), requested("b"), None),
        (members(stopped("a"), stopped("b")), requested(None), None),
    ]
    for before_args in snapshots:
        before = step({}, *before_args[:2], START, before_args[2])
        for after_args in snapshots:
            after = step(before, *after_args[:2], START, after_args[2])
            if condition(after, "Ready") != condition(before, "Ready"):
                assert any(
                    condition(after, t) != condition(before, t)
                    for t in ("MembersValid", "SwapDeferred")
                ), (before_args, after_args)
