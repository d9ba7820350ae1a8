"""The InferenceService's status written, and the events its changes make.

*Why a module of its own:* what the status says is decided by pure rules
(:mod:`~controlplane.controllers.inferenceservice.status`,
:mod:`~controlplane.controllers.inferenceservice.weightsstatus`); writing it is where a stale
cache shows (a 409), where an object deleted meanwhile shows (a 404), and where each change is
told to the user as an event: the phase, the weights' progress, a pod change that waited. Those
answers are the same whether the status came from a normal reconcile or from a Deployment the API
server refused, so both writes are here, apart from the order of the children's writes.

**Status** is written through the status subresource with the cached ``resourceVersion`` and
only when it differs from the cached status; a 409 requeues. Each phase change is recorded as an
``events.k8s.io`` event on the InferenceService. A Deployment the API server refuses
(``spec.pod``'s pass-through types) is ``Failed`` with reason ``DeploymentRefused`` and the
server's message.
"""

from __future__ import annotations

import logging
from typing import Final

from controlplane.api.v1alpha1 import InferenceService, InferenceServiceStatus, set_condition
from controlplane.api.v1alpha1.conditions import FALSE
from controlplane.api.v1alpha1.inferenceservice import PHASE_FAILED, PHASE_PENDING
from controlplane.controllers.inferenceservice.status import (
    CONDITION_READY,
    PhaseDecision,
    status_changed,
    update_transition,
)
from controlplane.controllers.inferenceservice.weightsstatus import (
    WeightsVerdict,
    transition_event,
)
from controlplane.runtime.cache import Object
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Result
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.events import EventRecorder

#: The log of the reconciler this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.controllers.inferenceservice.reconciler")

#: The Ready reason of an InferenceService whose Deployment the API server refuses (a malformed
#: ``spec.pod.affinity`` or volume source, which the CRD keeps whole).
REASON_DEPLOYMENT_REFUSED: Final = "DeploymentRefused"


async def write_status(
    client: KubeClient,
    recorder: EventRecorder,
    key: str,
    obj: Object,
    isvc: InferenceService,
    status: InferenceServiceStatus,
    decision: PhaseDecision,
    weights: WeightsVerdict,
    settle: Result,
) -> Result:
    """Write ``status`` (which differs from ``isvc``'s) and record what changed; ``settle`` once
    written, a requeue on a 409, nothing more when the InferenceService is gone."""
    previous = isvc.status.phase
    weights_event = transition_event(isvc.status.model, weights.status)
    update_event = update_transition(isvc.status, status)
    isvc.status = status
    try:
        await client.update_status(InferenceService.resource(), isvc.to_dict())
    except Conflict:
        return Result(requeue=True)  # our cache was stale; the watch brings the new version
    except NotFound:
        return Result()
    if weights_event is not None:
        recorder.event(obj, weights_event.type, weights_event.reason, "FetchModel",
                       weights_event.note)  # fmt: skip
    if update_event is not None:
        recorder.event(obj, "Normal", update_event[0], "UpdatePod", update_event[1])
    if previous != decision.phase:
        log.info("%s: phase %s -> %s (%s)", key, previous, decision.phase, decision.reason)
        recorder.event(
            obj,
            "Warning" if decision.phase in (PHASE_FAILED, PHASE_PENDING) else "Normal",
            decision.phase,
            "Reconcile",
            f"phase {previous or 'unset'} -> {decision.phase}: {decision.message}",
        )
    return settle


async def write_refused(
    client: KubeClient,
    recorder: EventRecorder,
    obj: Object,
    isvc: InferenceService,
    message: str,
) -> Result:
    """Failed, ``DeploymentRefused``: the spec makes a Deployment the API server refuses."""
    status = InferenceServiceStatus.from_dict(isvc.status.to_dict())
    status.phase = PHASE_FAILED
    set_condition(status.conditions, CONDITION_READY, FALSE, REASON_DEPLOYMENT_REFUSED, message,
                  isvc.metadata.generation)  # fmt: skip
    if status_changed(isvc.status, status):
        isvc.status = status
        try:
            await client.update_status(InferenceService.resource(), isvc.to_dict())
        except (Conflict, NotFound):
            return Result(requeue=True)
        recorder.event(obj, "Warning", REASON_DEPLOYMENT_REFUSED, "Reconcile", message)
    return Result()
