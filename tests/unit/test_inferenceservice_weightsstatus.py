"""Where the weights stand, from the fetch Job, its pods and the fetcher's last record."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelStatus
from controlplane.controllers.inferenceservice.weights import FETCH_CONTAINER, WeightsPlacement
from controlplane.controllers.inferenceservice.weightsstatus import (
    CONDITION_MODEL_READY,
    EVENT_DOWNLOAD_FAILED,
    EVENT_DOWNLOAD_STARTED,
    EVENT_DOWNLOAD_SUCCEEDED,
    FetchObservation,
    fetched,
    node_lost,
    not_fetched,
    transition_event,
    weights_ready,
)
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.plan import plan_actions
from controlplane.modelfetch.progress import Done, Progress

SOURCE = "hf://org/repo/x.gguf"
PLACEMENT = WeightsPlacement(cache_path="/cache")
MIB = 1024 * 1024


def isvc(source: str = SOURCE, status: dict[str, Any] | None = None) -> InferenceService:
    return InferenceService.from_dict(
        {
            "metadata": {"name": "llama", "namespace": "ml", "uid": "u"},
            "spec": {"model": {"name": "llama", "source": source}},
            "status": status or {},
        }
    )


def job(*conditions: str, message: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": "llama-model-1"},
        "status": {"conditions": [{"type": c, "status": "True", "message": message}
                                  for c in conditions]},
    }  # fmt: skip


def pod(phase: str, *, node: str = "n1", exit_code: int = 0, message: str = "",
        finished: str = "2026-12-02T00:00:00Z") -> dict[str, Any]:  # fmt: skip
    state: dict[str, Any] = {}
    if phase in ("Succeeded", "Failed"):
        state = {"terminated": {"exitCode": exit_code, "message": message, "finishedAt": finished}}
    return {
        "metadata": {"name": f"p-{phase}-{finished}"},
        "spec": {"nodeName": node},
        "status": {"phase": phase,
                   "containerStatuses": [{"name": FETCH_CONTAINER, "state": state}]},
    }  # fmt: skip


def judge(observation: FetchObservation, obj: InferenceService | None = None) -> Any:
    obj = obj or isvc()
    return fetched(obj, obj.spec.model.parsed(), PLACEMENT, observation)  # type: ignore[union-attr]


def test_no_job_yet_is_pending() -> None:
    verdict = judge(FetchObservation())
    assert (verdict.ready, verdict.status.state, verdict.reason) == (
        False,
        "Pending",
        "FetchPending",
    )


def test_a_running_fetch_shows_its_percentage_and_rate() -> None:
    record = Progress(bytes_done=21 * MIB, bytes_total=50 * MIB, bytes_per_second=10 * MIB)
    verdict = judge(FetchObservation(job(), [pod("Running", node="gpu-1")], record))
    assert not verdict.ready
    assert verdict.status.summary == "Downloading 42%"
    assert verdict.status.bytes_done == 21 * MIB
    assert verdict.status.bytes_total == 50 * MIB
    assert verdict.status.bytes_per_second == 10 * MIB
    assert "on node gpu-1" in verdict.message


def test_a_complete_job_is_ready_on_the_node_that_fetched_with_the_digest() -> None:
    done = Done(bytes_total=5 * MIB, sha256="ab" * 32, path="/x", downloaded=True)
    verdict = judge(FetchObservation(job("Complete"), [pod("Succeeded", node="gpu-1")], done))
    assert verdict.ready
    assert verdict.status.node == "gpu-1"
    assert verdict.status.sha256 == "ab" * 32
    assert verdict.status.path == "/cache/hf/org/repo/main/x.gguf"
    assert verdict.status.summary == "Ready"


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("DigestMismatch: sha256 of the download is 11, spec.model.sha256 is 22", "DigestMismatch"),
        ("NotFound: https://h/x.gguf answered 404", "NotFound"),
        ("segfault", "FetchFailed"),
    ],
)
def test_a_failed_job_fails_with_the_fetchers_reason(message: str, reason: str) -> None:
    verdict = judge(FetchObservation(job("Failed"), [pod("Failed", exit_code=3, message=message)]))
    assert not verdict.ready
    assert verdict.failed
    assert verdict.reason == reason
    assert verdict.message == message
    assert verdict.status.summary == f"Failed: {reason}"


def test_a_failed_pod_the_job_retries_is_retrying_not_failed() -> None:
    failed = pod("Failed", exit_code=1, message="Unreachable: connection refused")
    verdict = judge(FetchObservation(job(), [failed, pod("Pending")]))
    assert not verdict.failed
    assert verdict.reason == "Retrying"
    assert "Unreachable: connection refused" in verdict.message


def test_a_source_read_where_it_is_is_ready_without_a_job() -> None:
    obj = isvc("pvc://weights/x.gguf")
    verdict = not_fetched(obj, obj.spec.model.parsed())  # type: ignore[union-attr]
    assert verdict.ready
    assert verdict.status.summary == "Ready (pvc)"


def ready_status(source: str) -> dict[str, Any]:
    return {
        "model": {"source": source, "state": "Ready"},
        "conditions": [{"type": CONDITION_MODEL_READY, "status": "True", "reason": "Cached",
                        "message": "", "lastTransitionTime": "2026-12-02T00:00:00Z"}],
    }  # fmt: skip


def test_weights_are_ready_only_for_the_source_the_spec_names_now() -> None:
    assert weights_ready(isvc(status=ready_status(SOURCE)).to_dict())
    assert not weights_ready(isvc(status=ready_status("hf://org/repo/old.gguf")).to_dict())
    assert not weights_ready(isvc().to_dict()), "no verdict yet: not ready"
    assert weights_ready(isvc("/models/x.gguf").to_dict()), "read where it is: always"


def test_events_tell_the_start_the_end_and_a_failure_once() -> None:
    downloading = ModelStatus(source=SOURCE, state="Downloading", summary="Downloading 1%")
    ready = ModelStatus(source=SOURCE, state="Ready", summary="Ready", fetch_job="j")
    failed = ModelStatus(source=SOURCE, state="Failed", summary="Failed: NotFound", message="x")
    started = transition_event(None, downloading)
    assert started is not None
    assert started.reason == EVENT_DOWNLOAD_STARTED
    assert transition_event(downloading, downloading) is None, "told once"
    succeeded = transition_event(downloading, ready)
    assert succeeded is not None
    assert succeeded.reason == EVENT_DOWNLOAD_SUCCEEDED
    lost = transition_event(downloading, failed)
    assert lost is not None
    assert (lost.type, lost.reason) == ("Warning", EVENT_DOWNLOAD_FAILED)


def test_a_pool_drains_nothing_for_an_owner_whose_weights_are_not_ready() -> None:
    members = {
        "a": MemberState("a", slot="Granted", phase="Ready", urls=("http://a",)),
        "b": MemberState("b", weights_ready=False, weights="Downloading 42%"),
    }
    plan = plan_actions(members, "b")
    assert plan.probe == ()
    assert plan.release == ()
    assert plan.grant is None
    assert plan.waiting_for_weights == "b"
    ready = {**members, "b": MemberState("b")}
    assert plan_actions(ready, "b").probe == ("a",), "with its weights, the swap goes ahead"


def test_weights_on_a_node_that_left_are_fetched_again_not_pinned_to_nowhere() -> None:
    done = Done(bytes_total=MIB, sha256="ab" * 32, path="/x", downloaded=True)
    ready = judge(FetchObservation(job("Complete"), [pod("Succeeded", node="gpu-1")], done))
    assert node_lost(ready, {"gpu-1", "gpu-2"}) is None, "its node is there: nothing to do"
    lost = node_lost(ready, {"gpu-2"})
    assert lost is not None
    assert not lost.ready
    assert lost.status.node is None
    assert "gpu-1" in lost.message
    assert ready.status.node == "gpu-1", "the verdict judged is not changed in place"


def test_a_job_being_deleted_is_not_taken_for_the_weights_it_once_fetched() -> None:
    deleting = job("Complete")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    verdict = judge(FetchObservation(deleting, [pod("Succeeded", node="gpu-1")]))
    assert not verdict.ready
    assert verdict.status.state == "Pending"
