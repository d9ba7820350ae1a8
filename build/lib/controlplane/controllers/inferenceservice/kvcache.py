"""The KV cache carried across a swap: which pod to save from or restore into, and what to record.

Pure functions of the InferenceService, its pods and a save or restore's
:class:`~controlplane.probes.slotcache.CacheReport`, kept apart from the reconciler (which does the
HTTP calls and the writes) so that every rule is a test (``tests/unit/test_inferenceservice_kv
cache.py``). The feature (docs/kv-cache.md):

* **Save** when the Deployment of an InferenceService with ``spec.kvCache.enabled`` is about to go
  from 1 to 0 replicas (a pool's drain, or the user's ``replicas: 0``) and a pod of it is Ready
  and not Terminating (:func:`pod_to_save_from`). The used slots are saved, bounded by
  ``timeoutSeconds``, then the Deployment is lowered whatever happened.
* **Restore** into a pod that carries the readiness gate :data:`KV_CACHE_RESTORED_CONDITION` and
  whose condition is not True yet (:func:`restore_step`): once its containers are ready, the slots
  ``status.kvCache.lastSave`` lists are restored, bounded by ``timeoutSeconds``; then the condition
  is set True whatever happened, with reason ``Restored``, ``RestoreFailed`` or
  ``NothingToRestore``. The pod becomes Ready only then, and never later than the bound (a pod
  whose server never shows up behind its Service is given up on after the same bound, counted by
  the reconciler on its own clock).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, KvCacheOperation, KvCacheStatus
from controlplane.api.v1alpha1.conditions import TRUE
from controlplane.api.v1alpha1.inferenceservice import (
    KV_NOTHING,
    KV_PARTIAL,
    KV_SUCCEEDED,
    KV_TIMED_OUT,
)
from controlplane.controllers.inferenceservice.desired import KV_CACHE_RESTORED_CONDITION
from controlplane.probes.slotcache import CacheOutcome, CacheReport

REASON_RESTORED: Final = "Restored"
REASON_RESTORE_FAILED: Final = "RestoreFailed"
REASON_NOTHING_TO_RESTORE: Final = "NothingToRestore"
#: Event reasons on the InferenceService.
EVENT_SAVED: Final = "KvCacheSaved"
EVENT_SAVE_FAILED: Final = "KvCacheSaveFailed"
EVENT_RESTORED: Final = "KvCacheRestored"
EVENT_RESTORE_FAILED: Final = "KvCacheRestoreFailed"
#: Outcomes whose slots a restore may load (a timed-out save lists the slots it finished).
RESTORABLE: Final = (KV_SUCCEEDED, KV_PARTIAL, KV_TIMED_OUT)


def _conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = (pod.get("status") or {}).get("conditions") or ()
    return {str(c.get("type")): c for c in found}


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    return (_conditions(pod).get("Ready") or {}).get("status") == TRUE


def pod_to_save_from(pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The pod whose server holds the cache: Ready and not Terminating (at most one: a member
    runs one pod)."""
    ready = [p for p in pods if not is_terminating(p) and is_pod_ready(p)]
    return min(ready, key=lambda p: str(p["metadata"]["name"])) if ready else None


def has_restore_gate(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("readinessGates") or ()
    return any(g.get("conditionType") == KV_CACHE_RESTORED_CONDITION for g in gates)


class RestoreStep(enum.Enum):
    """What a pod with the restore gate needs now."""

    #: The gate's condition is True already (or the pod is not ours to gate, or is Terminating).
    DONE = "done"
    #: Its server is not loaded yet (ContainersReady is not True): wait for the pod's next change.
    WAIT = "wait"
    #: Nothing was saved: set the condition True at once, no server call.
    NOTHING = "nothing"
    #: Restore the saved slots now.
    RESTORE = "restore"


def slots_to_restore(status: KvCacheStatus | None) -> list[int]:
    """The slots the last save left on disk for a restore (none after a failed or empty save)."""
    save = status.last_save if status is not None else None
    if save is None or save.outcome not in RESTORABLE:
        return []
    return sorted(save.slots)


def restore_step(pod: Mapping[str, Any], isvc: InferenceService) -> RestoreStep:
    """What the pod needs (rules in the module docstring)."""
    if is_terminating(pod) or not has_restore_gate(pod):
        return RestoreStep.DONE
    conditions = _conditions(pod)
    if (conditions.get(KV_CACHE_RESTORED_CONDITION) or {}).get("status") == TRUE:
        return RestoreStep.DONE
    if not isvc.spec.kv_cache_enabled() or not slots_to_restore(isvc.status.kv_cache):
        return RestoreStep.NOTHING
    if (conditions.get("ContainersReady") or {}).get("status") != TRUE:
        return RestoreStep.WAIT
    return RestoreStep.RESTORE


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def operation_record(report: CacheReport, pod: str, at: datetime) -> KvCacheOperation:
    """The ``lastSave`` / ``lastRestore`` entry for ``report``."""
    return KvCacheOperation(
        outcome=report.outcome.value,
        pod=pod,
        time=rfc3339(at),
        slots=list(report.slots),
        tokens=report.tokens,
        bytes_written=report.bytes_written or None,
        duration_milliseconds=round(report.seconds * 1000),
        message=report.detail,
    )


def _part(verb: str, noun: str, operation: KvCacheOperation | None) -> str | None:
    if operation is None:
        return None
    slots = len(operation.slots)
    done = f"{slots} slot{'s' if slots != 1 else ''} ({operation.tokens or 0} tokens)"
    if operation.outcome == KV_SUCCEEDED:
        return f"{verb} {done}"
    if operation.outcome == KV_PARTIAL:
        return f"{verb} {done}, some failed"
    if operation.outcome == KV_TIMED_OUT:
        return f"{noun} timed out after {done}"
    if operation.outcome == KV_NOTHING:
        return f"nothing to {noun}"
    return f"{noun} failed"


def summary(status: KvCacheStatus) -> str | None:
    """The one line ``kubectl get isvc -o wide`` shows: ``saved 1 slot (48 tokens); restored 1
    slot (48 tokens)``."""
    parts = [
        part
        for part in (
            _part("saved", "save", status.last_save),
            _part("restored", "restore", status.last_restore),
        )
        if part is not None
    ]
    return "; ".join(parts) or None


def with_operation(
    status: KvCacheStatus | None, *, save: KvCacheOperation | None = None,
    restore: KvCacheOperation | None = None,
) -> KvCacheStatus:  # fmt: skip
    """A copy of ``status`` with the new save or restore and its summary."""
    found = KvCacheStatus.from_dict(status.to_dict()) if status is not None else KvCacheStatus()
    if save is not None:
        found.last_save = save
    if restore is not None:
        found.last_restore = restore
    found.summary = summary(found)
    return found


@dataclass(frozen=True, slots=True)
class RestoreVerdict:
    """The gate condition's reason and message, and the event to record, for one restore."""

    reason: str
    message: str
    warning: bool


def restore_verdict(report: CacheReport | None, why_nothing: str = "") -> RestoreVerdict:
    """What a restore's ``report`` sets on the pod (None: there was nothing to restore)."""
    if report is None or report.outcome is CacheOutcome.NOTHING:
        return RestoreVerdict(REASON_NOTHING_TO_RESTORE, why_nothing or "nothing saved", False)
    if report.outcome is CacheOutcome.SUCCEEDED:
        return RestoreVerdict(REASON_RESTORED, report.detail, False)
    return RestoreVerdict(REASON_RESTORE_FAILED, report.detail, True)


def gate_condition_patch(verdict: RestoreVerdict, at: datetime) -> dict[str, Any]:
    """The strategic-merge patch of ``pods/status`` that sets the gate's condition True (pod
    conditions merge by ``type``: the kubelet's and others' are kept)."""
    condition = {
        "type": KV_CACHE_RESTORED_CONDITION,
        "status": TRUE,
        "reason": verdict.reason,
        "message": verdict.message[:1024],
        "lastTransitionTime": rfc3339(at),
    }
    return {"status": {"conditions": [condition]}}
