"""When a change to a member's pod may reach its Deployment: the idle gate of day-2 edits."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.inferenceservice import CONDITION_UPDATE_PENDING, update_pending
from controlplane.controllers.inferenceservice.desired import desired_deployment
from controlplane.controllers.inferenceservice.rollout import (
    REASON_IDLE_CHECK_FAILED,
    REASON_UP_TO_DATE,
    REASON_WAITING_FOR_IDLE,
    REASON_WAITING_FOR_POOL,
    TEMPLATE_HASH_ANNOTATION,
    Gate,
    pod_change,
    rollout_gate,
    running_fetch_image,
)
from controlplane.controllers.inferenceservice.weights import WeightsPlacement
from controlplane.probes.idle import IdleOutcome, IdleReport

IDLE = IdleReport(IdleOutcome.IDLE, "1 slot, none processing", answered=True)
BUSY = IdleReport(IdleOutcome.BUSY, "1 of 1 slots processing", answered=True)
FAILED = IdleReport(IdleOutcome.FAILED, "GET /slots: 500")
#: A serving member no pool lists whose pod is on node gpu-1, cordoned: nothing else changes.
LEAVING: dict[str, Any] = {
    "changes_pod": False,
    "leaving": "gpu-1",
    "pods": 1,
    "wanted_replicas": 1,
    "pooled": False,
}


def member(**spec: Any) -> InferenceService:
    return InferenceService.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "llama", "namespace": "ns", "uid": "u1", "generation": 1},
            "spec": {"model": {"name": "tiny", "source": "/models/tiny.gguf"}, **spec},
        }
    )


def test_an_edit_of_the_args_is_a_pod_change_and_a_change_of_replicas_alone_is_not() -> None:
    running = desired_deployment(member(args=["--ctx-size", "2048"]), 1)
    assert not pod_change(running, desired_deployment(member(args=["--ctx-size", "2048"]), 1))
    assert not pod_change(running, desired_deployment(member(args=["--ctx-size", "2048"]), 0))
    assert pod_change(running, desired_deployment(member(args=["--ctx-size", "4096"]), 1))
    assert pod_change(running, desired_deployment(member(image="llama:b2"), 1))
    assert not pod_change(None, desired_deployment(member(), 1)), "nothing runs yet"


def test_a_resources_edit_is_seen_through_the_template_hash() -> None:
    """The API server rewrites quantities (0.5 -> 500m), so resources are compared by hash."""
    running = desired_deployment(member(resources={"limits": {"memory": "1Gi"}}), 1)
    wanted = desired_deployment(member(resources={"limits": {"memory": "2Gi"}}), 1)
    assert pod_change(running, wanted)


def test_a_deployment_written_before_the_template_hash_is_compared_field_by_field() -> None:
    """An operator upgrade to the version that writes the hash replaces no running member."""
    running = desired_deployment(member(args=["--ctx-size", "2048"]), 1)
    del running["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
    # The server adds defaults to the template: extra fields are not a change.
    served = copy.deepcopy(running)
    served["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"
    assert not pod_change(served, desired_deployment(member(args=["--ctx-size", "2048"]), 1))
    assert pod_change(served, desired_deployment(member(args=["--ctx-size", "4096"]), 1))


@pytest.mark.parametrize(
    ("facts", "reports", "gate", "reason"),
    [
        # Nothing about the pod changes: written at once, whatever runs.
        ({"changes_pod": False, "pods": 1, "wanted_replicas": 1, "pooled": False}, None,
         Gate.APPLY, REASON_UP_TO_DATE),
        # No pod (Terminating ones count as pods): the change costs nothing.
        ({"changes_pod": True, "pods": 0, "wanted_replicas": 1, "pooled": False}, None,
         Gate.APPLY, REASON_UP_TO_DATE),
        # Going to 0 anyway: a pool's release already passed its idle gate.
        ({"changes_pod": True, "pods": 1, "wanted_replicas": 0, "pooled": True}, None,
         Gate.APPLY, REASON_UP_TO_DATE),
        # A pool member waits for its pool's drain.
        ({"changes_pod": True, "pods": 1, "wanted_replicas": 1, "pooled": True}, None,
         Gate.WAIT, REASON_WAITING_FOR_POOL),
        # A member no pool lists: ask /slots first ...
        ({"changes_pod": True, "pods": 1, "wanted_replicas": 1, "pooled": False}, None,
         Gate.PROBE, REASON_WAITING_FOR_IDLE),
        # ... idle everywhere: written; busy anywhere: waits; a failed check proves nothing.
        ({"changes_pod": True, "pods": 1, "wanted_replicas": 1, "pooled": False},
         [("http://a:1", IDLE)], Gate.APPLY, REASON_UP_TO_DATE),
        ({"changes_pod": True, "pods": 2, "wanted_replicas": 2, "pooled": False},
         [("http://a:1", IDLE), ("http://b:1", BUSY)], Gate.WAIT, REASON_WAITING_FOR_IDLE),
        ({"changes_pod": True, "pods": 2, "wanted_replicas": 2, "pooled": False},
         [("http://a:1", BUSY), ("http://b:1", FAILED)], Gate.WAIT, REASON_IDLE_CHECK_FAILED),
        # Pods but no ready endpoint: nothing can be in flight through the Service.
        ({"changes_pod": True, "pods": 1, "wanted_replicas": 1, "pooled": False}, [],
         Gate.APPLY, REASON_UP_TO_DATE),
        # A pod on a cordoned node (a drain) waits as a pod change does: its pool drains it ...
        (LEAVING | {"pooled": True}, None, Gate.WAIT, REASON_WAITING_FOR_POOL),
        # ... or its own /slots decide: asked first, busy waits, a failed check proves nothing.
        (LEAVING, None, Gate.PROBE, REASON_WAITING_FOR_IDLE),
        (LEAVING, [("http://a:1", BUSY)], Gate.WAIT, REASON_WAITING_FOR_IDLE),
        (LEAVING, [("http://a:1", FAILED)], Gate.WAIT, REASON_IDLE_CHECK_FAILED),
        (LEAVING, [("http://a:1", IDLE)], Gate.APPLY, REASON_UP_TO_DATE),
        # Lowered to 0 anyway (a pool's release, past its gate): the pod goes with it.
        (LEAVING | {"wanted_replicas": 0, "pooled": True}, None, Gate.APPLY, REASON_UP_TO_DATE),
    ],
)  # fmt: skip
def test_the_gate(
    facts: dict[str, Any],
    reports: list[tuple[str, IdleReport]] | None,
    gate: Gate,
    reason: str,
) -> None:
    verdict = rollout_gate(**facts, reports=reports)
    assert (verdict.gate, verdict.reason) == (gate, reason)
    assert verdict.pending is (gate is not Gate.APPLY)
    if verdict.pending and facts.get("leaving"):
        assert "leaves node gpu-1" in verdict.message


def test_a_busy_verdict_names_the_endpoint_and_what_it_said() -> None:
    verdict = rollout_gate(changes_pod=True, pods=1, wanted_replicas=1, pooled=False,
                           reports=[("http://a:1", BUSY)])  # fmt: skip
    assert "http://a:1: 1 of 1 slots processing" in verdict.message


def fetched(fetch_image: str, replicas: int = 1) -> dict[str, Any]:
    isvc = member(model={"name": "tiny", "source": "https://example.test/tiny.gguf"})
    return desired_deployment(isvc, replicas, placement=WeightsPlacement(fetch_image=fetch_image))


def test_a_running_member_keeps_the_fetcher_image_it_started_with() -> None:
    running = fetched("operator:v1")
    assert running_fetch_image(running, 1) == "operator:v1"
    # The operator upgraded: the member's pod would be the same but for the fetcher's image.
    upgraded = fetched("operator:v2")
    assert pod_change(running, upgraded)
    assert not pod_change(running, fetched(running_fetch_image(running, 1) or ""))
    # Without a pod the current image is taken; a member with no fetcher has none to keep.
    assert running_fetch_image(running, 0) is None
    assert running_fetch_image(desired_deployment(member(), 1), 1) is None
    assert running_fetch_image(None, 1) is None


def test_update_pending_reads_the_condition_as_the_watch_delivers_it() -> None:
    def with_condition(status: str) -> dict[str, Any]:
        condition = {"type": CONDITION_UPDATE_PENDING, "status": status, "reason": "R"}
        return {"status": {"conditions": [{"type": "Ready", "status": "True"}, condition]}}

    assert update_pending(with_condition("True"))
    assert not update_pending(with_condition("False"))
    assert not update_pending({"status": {}})
    assert not update_pending(None)
