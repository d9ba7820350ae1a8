"""What a ModelRouter reports: its phase, ``Available``, ``BackendsReady`` and ``Ready``.

Pure functions of the router, its proxy Deployment and its backends as the caches show them, kept
apart from the reconciler so that every rule is a row of a table
(``tests/unit/test_modelrouter_status.py``).

**Phase** (first rule that matches, :func:`compute_phase`):

1. Pending: a Deployment or Service of our names is controlled by something else (``NotOwned``).
2. Failed: writing the activation Role or RoleBinding was refused (``ActivationRBAC``).
3. Provisioning: the Deployment is not in the cache yet, or its status does not describe its
   current generation (``DeploymentCreating``, ``DeploymentNotObserved``).
4. Failed: its ``Progressing`` condition is False with ``ProgressDeadlineExceeded``.
5. Ready: its ``Available`` condition is True and every backend is ready; Degraded when available
   but some backend is not (``Available`` stays True: the proxy serves the others).
6. Degraded: not Available but some replica is (under strength); Provisioning otherwise.

**BackendsReady** (:func:`backends_ready`): True when every backend's object exists and is usable:
an InferenceService that is not ``Failed``; a ModelPool that is not ``Degraded`` (a cold pool, with
no resident, is ready: the proxy warms it on the first request). The message names the backends
that are not.

**Backends** (:func:`backend_paths`, ``status.backends[]``): each backend and the pool its
requests go through: a ``poolRef``'s pool, or, for an ``inferenceServiceRef`` naming an
InferenceService that a pool lists, the pool whose claim on it stands (the proxy routes it as that
pool's member: :mod:`controlplane.router.routing`); none for an InferenceService no pool lists.

**Ready** (:func:`router_ready`): the router can take traffic, the condition ``kubectl wait
--for=condition=Ready`` and Helm 4's ``--wait`` (kstatus) read. True (``Serving``) exactly when
``Available`` and ``BackendsReady`` are both True, so it agrees with the phase Ready. Otherwise
False, and the reason says which is missing: ``ProxyNotAvailable`` (checked first: without a proxy
no request is taken at all) or ``BackendsNotReady``; the message carries the failing condition's
reason and message, both when both fail. It is made from the two conditions written beside it, so
it never adds a status write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from controlplane.api.v1alpha1 import set_condition
from controlplane.api.v1alpha1.conditions import FALSE, TRUE
from controlplane.api.v1alpha1.inferenceservice import PHASE_FAILED as ISVC_PHASE_FAILED
from controlplane.api.v1alpha1.modelpool import PHASE_DEGRADED as POOL_PHASE_DEGRADED
from controlplane.api.v1alpha1.modelrouter import (
    CONDITION_AVAILABLE,
    CONDITION_BACKENDS_READY,
    CONDITION_READY,
    PHASE_DEGRADED,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_PROVISIONING,
    PHASE_READY,
    REASON_ACTIVATION_RBAC,
    BackendStatus,
    ModelRouter,
    ModelRouterStatus,
)
from controlplane.controllers.children import (
    PROGRESS_DEADLINE_EXCEEDED,
    REASON_DEPLOYMENT_CREATING,
    REASON_DEPLOYMENT_NOT_OBSERVED,
    REASON_NOT_OWNED,
    progress_deadline_exceeded,
)
from controlplane.controllers.modelrouter.desired import endpoint
from controlplane.runtime.errors import Forbidden
from controlplane.runtime.objects import status_condition

REASON_PROGRESS_DEADLINE: Final = PROGRESS_DEADLINE_EXCEEDED
REASON_PROXY_AVAILABLE: Final = "ProxyAvailable"
REASON_PROXY_UNDER_STRENGTH: Final = "ProxyUnderStrength"
REASON_PROXY_UNAVAILABLE: Final = "ProxyUnavailable"
REASON_BACKENDS_READY: Final = "BackendsReady"
REASON_BACKEND_MISSING: Final = "BackendMissing"
REASON_BACKEND_NOT_READY: Final = "BackendNotReady"
REASON_SERVING: Final = "Serving"
REASON_PROXY_NOT_AVAILABLE: Final = "ProxyNotAvailable"
REASON_BACKENDS_NOT_READY: Final = "BackendsNotReady"
#: Condition messages are capped by the API (32768); the server's refusal is kept well inside.
MAX_MESSAGE_LENGTH: Final = 4096


def activation_rbac_message(kind: str, name: str, err: Forbidden) -> str:
    """The ``ActivationRBAC`` message: which object was refused, and the server's own words
    (an escalation refusal lists the rules the operator does not hold)."""
    message = (
        f"writing the activation {kind} {name} was refused (403 {err.reason}); the operator's "
        f"ClusterRole must hold every rule it grants: {err.message}"
    )
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[: MAX_MESSAGE_LENGTH - 3] + "..."
    return message


@dataclass(frozen=True, slots=True)
class ConditionDecision:
    status: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PhaseDecision:
    """The phase and the ``Available`` condition that goes with it."""

    phase: str
    available: ConditionDecision


def backends_ready(
    router: ModelRouter,
    inference_service: Callable[[str], Mapping[str, Any] | None],
    pool: Callable[[str], Mapping[str, Any] | None],
) -> ConditionDecision:
    """``BackendsReady``: every backend exists and is usable (see the module docstring)."""
    missing: list[str] = []
    not_ready: list[str] = []
    for backend in router.spec.backends:
        if backend.inference_service_ref is not None:
            ref, kind, lookup = (
                backend.inference_service_ref.name or "",
                "InferenceService",
                (inference_service),
            )
            bad_phase = ISVC_PHASE_FAILED
        elif backend.pool_ref is not None:
            ref, kind, lookup, bad_phase = (
                backend.pool_ref.name or "",
                "ModelPool",
                pool,
                (POOL_PHASE_DEGRADED),
            )
        else:  # the API server refuses this; say so rather than crash
            missing.append(f"{backend.name} (no reference)")
            continue
        found = lookup(ref)
        if found is None:
            missing.append(f"{backend.name} ({kind} {ref} not found)")
        elif (found.get("status") or {}).get("phase") == bad_phase:
            not_ready.append(f"{backend.name} ({kind} {ref} is {bad_phase})")
    if missing:
        return ConditionDecision(FALSE, REASON_BACKEND_MISSING, "; ".join(missing + not_ready))
    if not_ready:
        return ConditionDecision(FALSE, REASON_BACKEND_NOT_READY, "; ".join(not_ready))
    return ConditionDecision(
        TRUE, REASON_BACKENDS_READY, f"{len(router.spec.backends)} backend(s) ready"
    )


def backend_paths(
    router: ModelRouter, member_pool: Callable[[str], str | None]
) -> list[BackendStatus]:
    """``status.backends``: each backend and the pool it is served through (module docstring);
    ``member_pool`` names the pool whose claim on an InferenceService stands."""
    paths: list[BackendStatus] = []
    for backend in router.spec.backends:
        if backend.pool_ref is not None:
            pool = backend.pool_ref.name
        elif backend.inference_service_ref is not None:
            pool = member_pool(backend.inference_service_ref.name or "")
        else:
            pool = None
        paths.append(BackendStatus(name=backend.name, pool=pool))
    return paths


def compute_phase(
    deployment: Mapping[str, Any] | None,
    backends: ConditionDecision,
    *,
    conflict: str | None = None,
    rbac_refusal: str | None = None,
) -> PhaseDecision:
    """The phase and ``Available``, by the rules in the module docstring (first match wins)."""
    if conflict is not None:
        return PhaseDecision(PHASE_PENDING, ConditionDecision(FALSE, REASON_NOT_OWNED, conflict))
    if rbac_refusal is not None:
        return PhaseDecision(
            PHASE_FAILED, ConditionDecision(FALSE, REASON_ACTIVATION_RBAC, rbac_refusal)
        )
    if deployment is None:
        return PhaseDecision(
            PHASE_PROVISIONING,
            ConditionDecision(
                FALSE, REASON_DEPLOYMENT_CREATING, "the proxy Deployment is being created"
            ),
        )
    status = deployment.get("status") or {}
    observed = status.get("observedGeneration")
    generation = (deployment.get("metadata") or {}).get("generation")
    if observed is None or (generation is not None and observed < generation):
        return PhaseDecision(
            PHASE_PROVISIONING,
            ConditionDecision(
                FALSE,
                REASON_DEPLOYMENT_NOT_OBSERVED,
                "no deployment controller has reported on the current proxy Deployment yet",
            ),
        )
    if (progressing := progress_deadline_exceeded(deployment)) is not None:
        message = str(progressing.get("message") or "the proxy Deployment made no progress")
        return PhaseDecision(
            PHASE_FAILED, ConditionDecision(FALSE, REASON_PROGRESS_DEADLINE, message)
        )
    available = int(status.get("availableReplicas") or 0)
    wanted = int((deployment.get("spec") or {}).get("replicas") or 0)
    counts = f"{available} of {wanted} proxy replica(s) available"
    condition = status_condition(deployment, "Available")
    if condition is not None and condition.get("status") == TRUE:
        phase = PHASE_READY if backends.status == TRUE else PHASE_DEGRADED
        return PhaseDecision(phase, ConditionDecision(TRUE, REASON_PROXY_AVAILABLE, counts))
    if available >= 1:
        return PhaseDecision(
            PHASE_DEGRADED, ConditionDecision(FALSE, REASON_PROXY_UNDER_STRENGTH, counts)
        )
    return PhaseDecision(
        PHASE_PROVISIONING, ConditionDecision(FALSE, REASON_PROXY_UNAVAILABLE, counts)
    )


def router_ready(available: ConditionDecision, backends: ConditionDecision) -> ConditionDecision:
    """``Ready``: ``Available`` and ``BackendsReady`` both True (see the module docstring)."""
    failing = [
        f"{name} is False ({condition.reason}: {condition.message})"
        for name, condition in (
            (CONDITION_AVAILABLE, available),
            (CONDITION_BACKENDS_READY, backends),
        )
        if condition.status != TRUE
    ]
    if available.status != TRUE:
        reason = REASON_PROXY_NOT_AVAILABLE
    elif backends.status != TRUE:
        reason = REASON_BACKENDS_NOT_READY
    else:
        return ConditionDecision(
            TRUE, REASON_SERVING, "the proxy is available and every backend is ready"
        )
    message = "; ".join(failing)
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[: MAX_MESSAGE_LENGTH - 3] + "..."
    return ConditionDecision(FALSE, reason, message)


def desired_status(
    router: ModelRouter,
    decision: PhaseDecision,
    backends: ConditionDecision,
    paths: list[BackendStatus] | None = None,
) -> ModelRouterStatus:
    """A copy of the current status with every field we own set; equal to it when nothing
    changed (``lastTransitionTime`` moves only when a condition's status flips)."""
    status = ModelRouterStatus.from_dict(router.status.to_dict())
    generation = router.metadata.generation
    status.phase = decision.phase
    status.endpoint = endpoint(router)
    status.observed_generation = generation
    if paths is not None:
        status.backends = paths
    available = decision.available
    set_condition(
        status.conditions,
        CONDITION_AVAILABLE,
        available.status,
        available.reason,
        available.message,
        generation,
    )
    set_condition(
        status.conditions,
        CONDITION_BACKENDS_READY,
        backends.status,
        backends.reason,
        backends.message,
        generation,
    )
    ready = router_ready(available, backends)
    set_condition(
        status.conditions, CONDITION_READY, ready.status, ready.reason, ready.message, generation
    )
    return status


def status_changed(current: ModelRouterStatus, wanted: ModelRouterStatus) -> bool:
    return bool(current.to_dict() != wanted.to_dict())
