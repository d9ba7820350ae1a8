"""What an InferenceService reports: its phase, ``readyReplicas``, ``endpoint`` and ``Ready``.

Pure functions of the InferenceService, its Deployment, its pod count and the pools listing it, kept
apart from the reconciler so that every rule is a row of a table
(``tests/unit/test_inferenceservice_status.py``). The phase is what ``kubectl get isvc`` shows, so
a pool's swap must read from it: the member being drained says ``Draining``, the member being
brought up says ``Starting``.

**Phase**, first rule that matches (:func:`compute_phase`):

1. Pending: the spec cannot be acted on: a Deployment or Service of that name is not controlled
   by this InferenceService.
2. Creating: the Deployment is missing from the cache, or its status was never written (no
   ``status.observedGeneration``: no deployment controller has looked at it yet).
3. Stopped: desired replicas 0 (the Deployment's, after the grant), no ready replica, the
   Deployment reports no replicas **and** no pod of this InferenceService is left, Terminating
   ones included: Stopped means the process has exited and its GPU memory is free, which is what
   a pool waits for before the next member starts.
4. Draining: desired replicas 0 and a replica still ready (reason ``Stopping``): it is being
   scaled down and serves only until its pod stops.
5. Ready: ``readyReplicas >= 1`` (the server answers ``/health``) and desired replicas 1.
6. Failed: the Deployment's ``Progressing`` condition is ``False`` with reason
   ``ProgressDeadlineExceeded`` (``progressDeadlineSeconds`` is
   :data:`~controlplane.controllers.inferenceservice.desired.PROGRESS_DEADLINE_SECONDS`).
7. Draining when desired 0 (pods still terminating, reason ``Stopping``); Starting otherwise
   (desired 1, nothing ready yet: the model is loading; reason ``Starting``).

Then :func:`explain_hold` says why a member that is not running is not:

* its weights are not ready (``ModelReady`` not True: still downloading, or failed): Starting with
  reason ``WaitingForWeights``, or Failed with ``WeightsFailed`` when the download failed for good
  (the message is the fetcher's: a 404, a 401, both digests of a mismatch); the Deployment is held
  at 0 meanwhile;

* Stopped, and a pool listing it is swapping to it (its ``status.pendingMember``, phase
  ``Swapping``): Starting with reason ``WaitingForSlot``: the pool has chosen it and is draining
  the slot's holder first;
* Stopped, withheld by a pool that has not granted it the slot: Stopped, ``NotGranted``;
* listed by no pool and too new to be sure none is coming: Creating, ``WaitingForPools``.

**Status** (``phase``, ``desiredReplicas`` = the Deployment's replicas as given,
``readyReplicas``, ``endpoint`` = ``http://NAME.NAMESPACE.svc:PORT``, ``pool``,
``observedGeneration`` and a ``Ready`` condition, True only in phase Ready) is computed as a copy
of the current one, so it equals the current status whenever nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, InferenceServiceStatus, set_condition
from controlplane.api.v1alpha1.conditions import FALSE, TRUE, find_condition
from controlplane.api.v1alpha1.inferenceservice import (
    CONDITION_UPDATE_PENDING,
    PHASE_CREATING,
    PHASE_DRAINING,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_READY,
    PHASE_STARTING,
    PHASE_STOPPED,
)
from controlplane.api.v1alpha1.modelpool import PHASE_SWAPPING
from controlplane.controllers.children import (
    PROGRESS_DEADLINE_EXCEEDED,
    REASON_DEPLOYMENT_CREATING,
    REASON_DEPLOYMENT_NOT_OBSERVED,
    REASON_NOT_OWNED,
    progress_deadline_exceeded,
)
from controlplane.controllers.inferenceservice.desired import endpoint
from controlplane.controllers.inferenceservice.rollout import (
    EVENT_UPDATE_APPLIED,
    UP_TO_DATE,
    RolloutVerdict,
)

CONDITION_READY: Final = "Ready"
REASON_SERVER_READY: Final = "ServerReady"
REASON_SCALED_TO_ZERO: Final = "ScaledToZero"
REASON_PROGRESS_DEADLINE: Final = PROGRESS_DEADLINE_EXCEEDED
REASON_STARTING: Final = "Starting"
REASON_STOPPING: Final = "Stopping"
REASON_NOT_GRANTED: Final = "NotGranted"
REASON_WAITING_FOR_POOLS: Final = "WaitingForPools"
REASON_WAITING_FOR_SLOT: Final = "WaitingForSlot"
REASON_WAITING_FOR_WEIGHTS: Final = "WaitingForWeights"
REASON_WEIGHTS_FAILED: Final = "WeightsFailed"


@dataclass(frozen=True, slots=True)
class Hold:
    """Why the Deployment has fewer replicas than ``spec.replicas`` asks, if it has, and whether a
    pool is about to give it more."""

    #: The pool(s) listing it that have not granted it the slot.
    withheld_by: str | None = None
    #: Listed by no pool and too new to be sure none is coming: seconds left to wait.
    settle_seconds: float = 0.0
    #: The pool(s) swapping to it: it is their ``pendingMember`` (:func:`chosen_by`).
    chosen_by: str | None = None
    #: Its weights are not where the server reads them: what they wait for (``ModelReady``).
    weights: str | None = None
    #: ...and they never will be without a change of the spec (the download failed for good).
    weights_failed: bool = False

    @property
    def settling(self) -> bool:
        return self.settle_seconds > 0


@dataclass(frozen=True, slots=True)
class PhaseDecision:
    """The phase and the ``Ready`` condition's reason and message that go with it."""

    phase: str
    reason: str
    message: str


def chosen_by(pools: Iterable[Mapping[str, Any]], member: str) -> str | None:
    """The pools (comma-separated) that are swapping to ``member``: phase ``Swapping`` with
    ``member`` as their ``pendingMember``; None when no pool is."""
    names = sorted(
        str(pool["metadata"]["name"])
        for pool in pools
        if (status := pool.get("status") or {}).get("pendingMember") == member
        and status.get("phase") == PHASE_SWAPPING
    )
    return ", ".join(names) or None


def compute_phase(
    desired_replicas: int,
    deployment: Mapping[str, Any] | None,
    pods: int,
    conflict: str | None = None,
) -> PhaseDecision:
    """The phase, by the rules in the module docstring (first match wins)."""
    if conflict is not None:
        return PhaseDecision(PHASE_PENDING, REASON_NOT_OWNED, conflict)
    if deployment is None:
        return PhaseDecision(
            PHASE_CREATING, REASON_DEPLOYMENT_CREATING, "the Deployment is being created"
        )
    status = deployment.get("status") or {}
    if status.get("observedGeneration") is None:
        return PhaseDecision(
            PHASE_CREATING,
            REASON_DEPLOYMENT_NOT_OBSERVED,
            "no deployment controller has reported on the Deployment yet",
        )
    ready = int(status.get("readyReplicas") or 0)
    if desired_replicas == 0 and ready == 0 and pods == 0 and not status.get("replicas"):
        return PhaseDecision(PHASE_STOPPED, REASON_SCALED_TO_ZERO, "scaled to zero; no pods left")
    if ready >= 1:
        if desired_replicas == 0:
            message = f"scaled to zero; {ready} replica(s) still ready until the pod stops"
            return PhaseDecision(PHASE_DRAINING, REASON_STOPPING, message)
        return PhaseDecision(PHASE_READY, REASON_SERVER_READY, f"{ready} ready replica(s)")
    if (progressing := progress_deadline_exceeded(deployment)) is not None:
        return PhaseDecision(
            PHASE_FAILED,
            REASON_PROGRESS_DEADLINE,
            str(progressing.get("message") or "the Deployment made no progress in time"),
        )
    if desired_replicas == 0:
        return PhaseDecision(PHASE_DRAINING, REASON_STOPPING, f"{pods} pod(s) still terminating")
    return PhaseDecision(PHASE_STARTING, REASON_STARTING, "waiting for the server to be ready")


def explain_hold(decision: PhaseDecision, hold: Hold) -> PhaseDecision:
    """Say why a member is not running, from its pools' side (rules in the module docstring). A
    phase that reports something else (Ready, Draining, Starting, Failed, not owned) is left as it
    is."""
    waiting = decision.phase in (PHASE_STOPPED, PHASE_CREATING, PHASE_STARTING)
    if hold.weights is not None and (waiting or hold.weights_failed):
        if hold.weights_failed:
            return PhaseDecision(PHASE_FAILED, REASON_WEIGHTS_FAILED, hold.weights)
        return PhaseDecision(PHASE_STARTING, REASON_WAITING_FOR_WEIGHTS, hold.weights)
    if decision.phase == PHASE_STOPPED and hold.chosen_by is not None:
        message = (
            f"pool {hold.chosen_by} is swapping to it; it starts once the member holding the slot "
            "has drained"
        )
        return PhaseDecision(PHASE_STARTING, REASON_WAITING_FOR_SLOT, message)
    if decision.reason == REASON_SCALED_TO_ZERO and hold.withheld_by is not None:
        message = f"a member of pool {hold.withheld_by}, which has not granted it the slot"
        return PhaseDecision(PHASE_STOPPED, REASON_NOT_GRANTED, message)
    if hold.settling and decision.reason in (REASON_SCALED_TO_ZERO, REASON_DEPLOYMENT_NOT_OBSERVED):
        message = "no pool lists it yet; it starts unless one does within a moment"
        return PhaseDecision(PHASE_CREATING, REASON_WAITING_FOR_POOLS, message)
    return decision


#: A member of a pool with a slot server: its model's state there (the pool's ``members[].phase``).
REASON_LOADED: Final = "LoadedInSlotServer"
REASON_LOADING: Final = "LoadingInSlotServer"
REASON_LOAD_FAILED: Final = "SlotServerLoadFailed"
REASON_NOT_LOADED: Final = "NotLoaded"


def served_phase(
    decision: PhaseDecision, pool: Mapping[str, Any] | None, member: str
) -> PhaseDecision:
    """Of a member a pool serves from its slot server (``pool``), the phase its model has there,
    as the pool last reported it, once its own Deployment holds no pod (until then, ``decision``:
    a member that ran in pods of its own drains first)."""
    if pool is None or decision.reason != REASON_SCALED_TO_ZERO:
        return decision
    name = pool["metadata"]["name"]
    entries = (pool.get("status") or {}).get("members") or ()
    phase = next((e.get("phase") for e in entries if e.get("name") == member), None)
    if phase == PHASE_READY:
        return PhaseDecision(PHASE_READY, REASON_LOADED, f"loaded in pool {name}'s slot server")
    if phase == PHASE_STARTING:
        return PhaseDecision(
            PHASE_STARTING, REASON_LOADING, f"loading in pool {name}'s slot server"
        )
    if phase == PHASE_FAILED:
        message = f"its model's server exited while pool {name}'s slot server loaded it"
        return PhaseDecision(PHASE_FAILED, REASON_LOAD_FAILED, message)
    return PhaseDecision(
        PHASE_STOPPED, REASON_NOT_LOADED, f"not loaded in pool {name}'s slot server"
    )


def desired_status(
    isvc: InferenceService,
    decision: PhaseDecision,
    deployment: Mapping[str, Any] | None,
    pools: Iterable[str] = (),
    replicas: int | None = None,
    *,
    update: RolloutVerdict = UP_TO_DATE,
) -> InferenceServiceStatus:
    """The status to write: a copy of the current one with every field we own set; ``update``:
    whether a change to the pod waits (the ``UpdatePending`` condition).

    ``lastTransitionTime`` of the ``Ready`` condition moves only when its status flips, so the
    result equals the current status whenever nothing changed.
    """
    status = InferenceServiceStatus.from_dict(isvc.status.to_dict())
    ready = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)
    status.phase = decision.phase
    status.desired_replicas = isvc.spec.desired_replicas() if replicas is None else replicas
    status.ready_replicas = ready
    status.endpoint = endpoint(isvc)
    status.pool = ", ".join(pools) or None
    status.observed_generation = isvc.metadata.generation
    set_condition(
        status.conditions,
        CONDITION_READY,
        TRUE if decision.phase == PHASE_READY else FALSE,
        decision.reason,
        decision.message,
        isvc.metadata.generation,
    )
    set_condition(
        status.conditions,
        CONDITION_UPDATE_PENDING,
        TRUE if update.pending else FALSE,
        update.reason,
        update.message,
        isvc.metadata.generation,
    )
    return status


def update_transition(
    current: InferenceServiceStatus, wanted: InferenceServiceStatus
) -> tuple[str, str] | None:
    """The Event (reason, note) of a change to the pod starting to wait, or going in after it
    waited; None when ``UpdatePending`` keeps its status."""
    before = find_condition(current.conditions, CONDITION_UPDATE_PENDING)
    after = find_condition(wanted.conditions, CONDITION_UPDATE_PENDING)
    was = before is not None and before.status == TRUE
    now = after is not None and after.status == TRUE
    if now and not was and after is not None:
        return CONDITION_UPDATE_PENDING, f"{after.reason}: {after.message}"
    if was and not now:
        return EVENT_UPDATE_APPLIED, "the change to the pod waited for idle and goes in now"
    return None


def status_changed(current: InferenceServiceStatus, wanted: InferenceServiceStatus) -> bool:
    return bool(current.to_dict() != wanted.to_dict())
