"""The InferenceService controller's KV cache rules: which pod, which step, what is recorded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService, KvCacheOperation, KvCacheStatus
from controlplane.controllers.inferenceservice.kvcache import (
    RestoreStep,
    gate_condition_patch,
    operation_record,
    pod_to_save_from,
    restore_step,
    restore_verdict,
    slots_to_restore,
    summary,
    with_operation,
)
from controlplane.probes.slotcache import CacheOutcome, CacheReport

GATE = "inference.modelpool.dev/kv-cache-restored"
AT = datetime(2026, 12, 1, 3, 4, 5, tzinfo=UTC)


def isvc(enabled: bool = True, last_save: dict[str, Any] | None = None) -> InferenceService:
    status: dict[str, Any] = {}
    if last_save is not None:
        status["kvCache"] = {"lastSave": last_save}
    return InferenceService.from_dict(
        {
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"model": {"name": "a", "source": "/m"}, "kvCache": {"enabled": enabled}},
            "status": status,
        }
    )


def pod(
    name: str = "a-1",
    *,
    ready: bool = False,
    containers_ready: bool = False,
    gate: str | None = None,
    gated: bool = True,
    terminating: bool = False,
) -> dict[str, Any]:
    conditions = [
        {"type": "Ready", "status": str(ready)},
        {"type": "ContainersReady", "status": str(containers_ready)},
    ]
    if gate is not None:
        conditions.append({"type": GATE, "status": gate})
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    spec = {"readinessGates": [{"conditionType": GATE}]} if gated else {}
    return {"metadata": meta, "spec": spec, "status": {"conditions": conditions}}


SAVED = {"outcome": "Succeeded", "slots": [1, 0], "tokens": 96}


def test_the_save_is_from_the_ready_pod_that_is_not_terminating() -> None:
    assert pod_to_save_from([pod(ready=False)]) is None
    assert pod_to_save_from([pod(ready=True, terminating=True)]) is None
    chosen = pod_to_save_from([pod("a-2", ready=False), pod("a-1", ready=True)])
    assert chosen is not None
    assert chosen["metadata"]["name"] == "a-1"


@pytest.mark.parametrize(
    ("found", "service", "step"),
    [
        (pod(containers_ready=True, gate="True"), isvc(last_save=SAVED), RestoreStep.DONE),
        (pod(containers_ready=True, gated=False), isvc(last_save=SAVED), RestoreStep.DONE),
        (pod(containers_ready=True, terminating=True), isvc(last_save=SAVED), RestoreStep.DONE),
        (pod(containers_ready=False), isvc(last_save=SAVED), RestoreStep.WAIT),
        (pod(containers_ready=True), isvc(last_save=SAVED), RestoreStep.RESTORE),
        (pod(containers_ready=True, gate="False"), isvc(last_save=SAVED), RestoreStep.RESTORE),
        # Nothing saved (never, or the last save failed or found nothing), or the cache turned
        # off: the gate opens at once, without waiting for the server.
        (pod(containers_ready=False), isvc(), RestoreStep.NOTHING),
        (pod(), isvc(last_save={"outcome": "Failed", "slots": []}), RestoreStep.NOTHING),
        (pod(), isvc(last_save={"outcome": "Nothing"}), RestoreStep.NOTHING),
        (pod(), isvc(enabled=False, last_save=SAVED), RestoreStep.NOTHING),
    ],
)
def test_what_a_gated_pod_needs(
    found: dict[str, Any], service: InferenceService, step: RestoreStep
) -> None:
    assert restore_step(found, service) is step


@pytest.mark.parametrize(
    ("outcome", "slots"),
    [("Succeeded", [0, 1]), ("Partial", [0, 1]), ("TimedOut", [0, 1]), ("Failed", [])],
)
def test_the_slots_a_restore_loads_are_those_the_last_save_finished(
    outcome: str, slots: list[int]
) -> None:
    status = KvCacheStatus(last_save=KvCacheOperation(outcome=outcome, slots=[1, 0]))
    assert slots_to_restore(status) == slots
    assert slots_to_restore(None) == []


def test_a_report_becomes_a_record_and_a_summary_line() -> None:
    report = CacheReport(CacheOutcome.SUCCEEDED, "saved 2 of 2", (0, 1), 96, 4096, 0.0123)
    record = operation_record(report, "a-1", AT)
    assert record.to_dict() == {
        "outcome": "Succeeded", "pod": "a-1", "time": "2026-12-01T03:04:05Z", "slots": [0, 1],
        "tokens": 96, "bytesWritten": 4096, "durationMilliseconds": 12, "message": "saved 2 of 2",
    }  # fmt: skip
    status = with_operation(None, save=record)
    assert status.summary == "saved 2 slots (96 tokens)"
    restored = operation_record(
        CacheReport(CacheOutcome.SUCCEEDED, "ok", (0,), 48, 0, 0.001), "a-2", AT
    )
    assert "bytesWritten" not in restored.to_dict()
    status = with_operation(status, restore=restored)
    assert status.summary == "saved 2 slots (96 tokens); restored 1 slot (48 tokens)"
    assert status.last_save == record, "a restore keeps the save it loaded"


@pytest.mark.parametrize(
    ("outcome", "line"),
    [
        ("Partial", "saved 1 slot (5 tokens), some failed"),
        ("TimedOut", "save timed out after 1 slot (5 tokens)"),
        ("Failed", "save failed"),
        ("Nothing", "nothing to save"),
    ],
)
def test_the_summary_says_how_a_save_ended(outcome: str, line: str) -> None:
    operation = KvCacheOperation(outcome=outcome, slots=[0], tokens=5)
    assert summary(KvCacheStatus(last_save=operation)) == line


def test_a_restore_opens_the_gate_with_a_reason_that_says_how_it_went() -> None:
    ok = restore_verdict(CacheReport(CacheOutcome.SUCCEEDED, "restored 1 of 1 slot(s)", (0,)))
    assert (ok.reason, ok.warning) == ("Restored", False)
    hung = restore_verdict(CacheReport(CacheOutcome.TIMED_OUT, "not finished within 1 s"))
    assert (hung.reason, hung.warning) == ("RestoreFailed", True)
    nothing = restore_verdict(None, "nothing saved")
    assert (nothing.reason, nothing.message) == ("NothingToRestore", "nothing saved")
    patch = gate_condition_patch(ok, AT)
    assert patch == {"status": {"conditions": [{
        "type": GATE, "status": "True", "reason": "Restored",
        "message": "restored 1 of 1 slot(s)", "lastTransitionTime": "2026-12-01T03:04:05Z",
    }]}}  # fmt: skip
