"""The InferenceService phase rules and the "did the status change?" decision."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService, set_condition
from controlplane.api.v1alpha1.conditions import find_condition
from controlplane.controllers.inferenceservice.rollout import (
    REASON_WAITING_FOR_IDLE,
    Gate,
    RolloutVerdict,
)
from controlplane.controllers.inferenceservice.status import (
    Hold,
    PhaseDecision,
    chosen_by,
    compute_phase,
    desired_status,
    explain_hold,
    status_changed,
    update_transition,
)


def deployment(
    *, observed: int | None = 1, ready: int = 0, replicas: int = 0, deadline: bool = False
) -> dict[str, Any]:
    status: dict[str, Any] = {"replicas": replicas, "readyReplicas": ready}
    if observed is not None:
        status["observedGeneration"] = observed
    if deadline:
        status["conditions"] = [
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "ReplicaSet has timed out progressing.",
            }
        ]
    return {"metadata": {"generation": 1}, "status": status}


# (desired replicas, deployment, pods, conflict) -> (phase, Ready condition's reason)
CASES = [
    ("conflict wins", 1, deployment(ready=1, replicas=1), 1, "in the way", "Pending", "NotOwned"),
    ("deployment missing", 1, None, 0, None, "Creating", "DeploymentCreating"),
    ("missing, desired 0", 0, None, 0, None, "Creating", "DeploymentCreating"),
    ("never observed", 1, deployment(observed=None), 0, None, "Creating", "DeploymentNotObserved"),
    ("ready", 1, deployment(ready=1, replicas=1), 1, None, "Ready", "ServerReady"),
    ("still ready while scaling down is draining", 0, deployment(ready=1, replicas=1), 1, None,
     "Draining", "Stopping"),
    ("stopped", 0, deployment(), 0, None, "Stopped", "ScaledToZero"),
    ("terminating pod is draining, not stopped", 0, deployment(), 1, None, "Draining",
     "Stopping"),
    ("deployment still counts a replica", 0, deployment(replicas=1), 0, None, "Draining",
     "Stopping"),
    ("a deadline while draining is failed", 0, deployment(deadline=True), 1, None, "Failed",
     "ProgressDeadlineExceeded"),
    ("deadline exceeded", 1, deployment(replicas=1, deadline=True), 1, None, "Failed",
     "ProgressDeadlineExceeded"),
    ("ready beats an old deadline", 1, deployment(ready=1, replicas=1, deadline=True), 1, None,
     "Ready", "ServerReady"),
    ("stopped beats a deadline", 0, deployment(deadline=True), 0, None, "Stopped", "ScaledToZero"),
    ("starting", 1, deployment(replicas=1), 1, None, "Starting", "Starting"),
    ("raised, no pod yet", 1, deployment(), 0, None, "Starting", "Starting"),
]  # fmt: skip


def swapping_to(member: str, *, name: str = "gpu", phase: str = "Swapping") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase, "pendingMember": member}}


def test_only_a_swapping_pool_that_waits_for_the_member_has_chosen_it() -> None:
    assert chosen_by([swapping_to("a")], "a") == "gpu"
    assert chosen_by([swapping_to("b")], "a") is None
    assert chosen_by([swapping_to("a", phase="Degraded")], "a") is None
    assert chosen_by([swapping_to("a", name="z"), swapping_to("a", name="y")], "a") == "y, z"
    assert chosen_by([{"metadata": {"name": "cold"}}], "a") is None


# (phase decided from the Deployment, hold) -> (phase, reason) after the pools have their say
HOLDS = [
    ("stopped, chosen by its pool: starting", "Stopped", "ScaledToZero", Hold(chosen_by="gpu"),
     "Starting", "WaitingForSlot"),
    ("withheld and chosen: starting", "Stopped", "ScaledToZero",
     Hold(withheld_by="gpu", chosen_by="gpu"), "Starting", "WaitingForSlot"),
    ("withheld, not chosen: stopped", "Stopped", "ScaledToZero", Hold(withheld_by="gpu"),
     "Stopped", "NotGranted"),
    ("draining stays draining though chosen", "Draining", "Stopping", Hold(chosen_by="gpu"),
     "Draining", "Stopping"),
    ("ready stays ready", "Ready", "ServerReady", Hold(withheld_by="gpu"), "Ready", "ServerReady"),
    ("settling", "Stopped", "ScaledToZero", Hold(settle_seconds=1.0), "Creating",
     "WaitingForPools"),
    ("nothing held", "Stopped", "ScaledToZero", Hold(), "Stopped", "ScaledToZero"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("phase", "reason", "hold", "want_phase", "want_reason"),
    [case[1:] for case in HOLDS],
    ids=[case[0] for case in HOLDS],
)
def test_hold_table(phase: str, reason: str, hold: Hold, want_phase: str, want_reason: str) -> None:
    decision = explain_hold(PhaseDecision(phase, reason, "m"), hold)
    assert (decision.phase, decision.reason) == (want_phase, want_reason)


@pytest.mark.parametrize(
    ("desired", "found", "pods", "conflict", "phase", "reason"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_phase_table(
    desired: int,
    found: dict[str, Any] | None,
    pods: int,
    conflict: str | None,
    phase: str,
    reason: str,
) -> None:
    decision = compute_phase(desired, found, pods, conflict)
    assert (decision.phase, decision.reason) == (phase, reason)


def isvc(status: dict[str, Any] | None = None) -> InferenceService:
    return InferenceService.from_dict(
        {
            "metadata": {"name": "llama", "namespace": "ml", "uid": "u", "generation": 2},
            "spec": {"model": {"name": "m", "source": "s"}, "port": 8080},
            "status": status or {},
        }
    )


READY = PhaseDecision("Ready", "ServerReady", "1 ready replica(s)")


def test_a_fresh_status_differs_and_carries_everything() -> None:
    current = isvc()
    wanted = desired_status(current, READY, deployment(ready=1, replicas=1))
    assert status_changed(current.status, wanted)
    written = wanted.to_dict()
    assert written["phase"] == "Ready"
    assert written["readyReplicas"] == 1
    assert written["desiredReplicas"] == 1, "spec.replicas is absent: the column shows its 1"
    assert written["endpoint"] == "http://llama.ml.svc:8080"
    assert written["observedGeneration"] == 2
    condition, update = written["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Ready",
        "True",
        "ServerReady",
    )
    assert (update["type"], update["status"], update["reason"]) == (
        "UpdatePending",
        "False",
        "UpToDate",
    )
    assert condition["observedGeneration"] == 2


def test_the_same_observation_again_changes_nothing() -> None:
    first = desired_status(isvc(), READY, deployment(ready=1, replicas=1))
    stored = isvc(first.to_dict())
    again = desired_status(stored, READY, deployment(ready=1, replicas=1))
    assert not status_changed(stored.status, again)


def test_a_flip_moves_the_transition_time_and_a_message_change_does_not() -> None:
    old = isvc()
    set_condition(old.status.conditions, "Ready", "True", "ServerReady", "1 ready replica(s)", 2,
                  now=datetime(2020, 1, 1, tzinfo=UTC))  # fmt: skip
    old.status.phase = "Ready"
    stopped = desired_status(old, PhaseDecision("Stopped", "ScaledToZero", "gone"), deployment())
    assert stopped.conditions[0].last_transition_time != "2020-01-01T00:00:00Z"
    reworded = desired_status(old, PhaseDecision("Ready", "ServerReady", "other words"), None)
    assert reworded.conditions[0].last_transition_time == "2020-01-01T00:00:00Z"
    assert status_changed(old.status, reworded)


def test_a_new_generation_is_a_change() -> None:
    stored = isvc(desired_status(isvc(), READY, deployment(ready=1, replicas=1)).to_dict())
    stored.metadata.generation = 3
    assert status_changed(stored.status, desired_status(stored, READY, deployment(ready=1)))


def test_unknown_status_fields_survive() -> None:
    stored = isvc({"phase": "Ready", "futureField": {"x": 1}})
    wanted = desired_status(stored, READY, deployment(ready=1, replicas=1))
    assert wanted.to_dict()["futureField"] == {"x": 1}


def test_desired_replicas_follows_the_spec() -> None:
    scaled = isvc()
    scaled.spec.replicas = 0
    stopped = PhaseDecision("Stopped", "ScaledToZero", "gone")
    assert desired_status(scaled, stopped, deployment()).desired_replicas == 0


def test_a_waiting_change_is_a_condition_and_its_start_and_end_are_events() -> None:
    current = isvc()
    settled = desired_status(current, READY, deployment(ready=1, replicas=1))
    waiting = desired_status(
        current,
        READY,
        deployment(ready=1, replicas=1),
        update=RolloutVerdict(Gate.WAIT, REASON_WAITING_FOR_IDLE, "busy at http://a:1"),
    )
    pending = find_condition(waiting.conditions, "UpdatePending")
    assert pending is not None
    assert (pending.status, pending.reason, pending.message) == (
        "True",
        REASON_WAITING_FOR_IDLE,
        "busy at http://a:1",
    )
    assert update_transition(settled, waiting) == (
        "UpdatePending",
        f"{REASON_WAITING_FOR_IDLE}: busy at http://a:1",
    )
    assert update_transition(waiting, settled) == (
        "UpdateApplied",
        "the change to the pod waited for idle and goes in now",
    )
    assert update_transition(settled, settled) is None
    assert update_transition(waiting, waiting) is None
