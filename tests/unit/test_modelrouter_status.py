"""The ModelRouter phase table, BackendsReady, Ready, and the ActivationRBAC message from a 403."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.api.v1alpha1 import ModelRouter
from controlplane.api.v1alpha1.conditions import find_condition
from controlplane.controllers.modelrouter.status import (
    ConditionDecision,
    activation_rbac_message,
    backend_paths,
    backends_ready,
    compute_phase,
    desired_status,
    router_ready,
    status_changed,
)
from controlplane.runtime.errors import Forbidden

READY = ConditionDecision("True", "BackendsReady", "1 backend(s) ready")
NOT_READY = ConditionDecision("False", "BackendMissing", "gpu-0 (ModelPool gpu-0 not found)")
ESCALATION = (
    'roles.rbac.authorization.k8s.io "chat-activation" is forbidden: user '
    '"system:serviceaccount:modelpool-system:modelpool-operator" (groups=[...]) is attempting to '
    "grant RBAC permissions not currently held:\n"
    '{APIGroups:["coordination.k8s.io"], Resources:["leases"], Verbs:["get" "list" "watch"]}'
)


def router(status: dict[str, Any] | None = None) -> ModelRouter:
    return ModelRouter.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelRouter",
            "metadata": {"name": "chat", "namespace": "ml", "uid": "u-1", "generation": 4},
            "spec": {
                "backends": [
                    {"name": "gpu-0", "poolRef": {"name": "gpu-0"}},
                    {"name": "solo", "inferenceServiceRef": {"name": "solo"}},
                ]
            },
            "status": status or {},
        }
    )


def deployment(
    *,
    observed: int | None = 1,
    generation: int = 1,
    available: bool | None = None,
    available_replicas: int = 0,
    deadline: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {"availableReplicas": available_replicas}
    if observed is not None:
        status["observedGeneration"] = observed
    conditions = []
    if available is not None:
        conditions.append({"type": "Available", "status": "True" if available else "False"})
    if deadline:
        conditions.append(
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "too slow",
            }
        )
    status["conditions"] = conditions
    return {"metadata": {"generation": generation}, "spec": {"replicas": 2}, "status": status}


@pytest.mark.parametrize(
    ("kwargs", "backends", "phase", "available", "reason"),
    [
        (
            {"deployment": None, "conflict": "a Service named chat ..."},
            READY,
            "Pending",
            "False",
            "NotOwned",
        ),
        (
            {"deployment": None, "rbac_refusal": "refused"},
            READY,
            "Failed",
            "False",
            "ActivationRBAC",
        ),
        ({"deployment": None}, READY, "Provisioning", "False", "DeploymentCreating"),
        (
            {"deployment": deployment(observed=None)},
            READY,
            "Provisioning",
            "False",
            "DeploymentNotObserved",
        ),
        (
            {"deployment": deployment(observed=1, generation=2, available=True)},
            READY,
            "Provisioning",
            "False",
            "DeploymentNotObserved",
        ),
        (
            {"deployment": deployment(deadline=True)},
            READY,
            "Failed",
            "False",
            "ProgressDeadlineExceeded",
        ),
        (
            {"deployment": deployment(available=True, available_replicas=2)},
            READY,
            "Ready",
            "True",
            "ProxyAvailable",
        ),
        (
            {"deployment": deployment(available=True, available_replicas=2)},
            NOT_READY,
            "Degraded",
            "True",
            "ProxyAvailable",
        ),
        (
            {"deployment": deployment(available=False, available_replicas=1)},
            READY,
            "Degraded",
            "False",
            "ProxyUnderStrength",
        ),
        (
            {"deployment": deployment(available=False)},
            READY,
            "Provisioning",
            "False",
            "ProxyUnavailable",
        ),
    ],
)
def test_phase_table(
    kwargs: dict[str, Any], backends: ConditionDecision, phase: str, available: str, reason: str
) -> None:
    decision = compute_phase(kwargs.pop("deployment"), backends, **kwargs)
    assert (decision.phase, decision.available.status, decision.available.reason) == (
        phase,
        available,
        reason,
    )


def test_backends_ready_looks_each_reference_up() -> None:
    pools: dict[str, dict[str, Any]] = {"gpu-0": {"status": {"phase": "Ready"}}}
    isvcs: dict[str, dict[str, Any]] = {"solo": {"status": {"phase": "Stopped"}}}
    ready = backends_ready(router(), isvcs.get, pools.get)
    assert (ready.status, ready.reason) == ("True", "BackendsReady")

    pools["gpu-0"] = {"status": {"phase": "Degraded"}}
    degraded = backends_ready(router(), isvcs.get, pools.get)
    assert (degraded.status, degraded.reason) == ("False", "BackendNotReady")
    assert "ModelPool gpu-0 is Degraded" in degraded.message

    nothing: dict[str, dict[str, Any]] = {}
    missing = backends_ready(router(), nothing.get, pools.get)
    assert (missing.status, missing.reason) == ("False", "BackendMissing")
    assert "InferenceService solo not found" in missing.message

    pools["gpu-0"] = {}  # a pool never reconciled (cold) is not held against the router
    isvcs["solo"] = {"status": {"phase": "Failed"}}
    failed = backends_ready(router(), isvcs.get, pools.get)
    assert failed.reason == "BackendNotReady"
    assert "solo" in failed.message


def test_activation_rbac_message_carries_the_servers_rules() -> None:
    err = Forbidden(403, "Forbidden", ESCALATION)
    message = activation_rbac_message("Role", "chat-activation", err)
    assert "Role chat-activation" in message
    assert "leases" in message
    assert "coordination.k8s.io" in message
    long = activation_rbac_message("Role", "r", Forbidden(403, "Forbidden", "x" * 100_000))
    assert len(long) <= 4096


def test_status_written_only_when_it_changes() -> None:
    r = router()
    decision = compute_phase(None, READY, rbac_refusal=ESCALATION)
    wanted = desired_status(r, decision, READY)
    assert status_changed(r.status, wanted)
    assert wanted.phase == "Failed"
    assert wanted.endpoint == "http://chat.ml.svc"
    assert wanted.observed_generation == 4
    available = find_condition(wanted.conditions, "Available")
    assert available is not None
    assert (available.status, available.reason) == ("False", "ActivationRBAC")
    assert "leases" in (available.message or "")
    again = router(wanted.to_dict())
    assert not status_changed(again.status, desired_status(again, decision, READY))


AVAILABLE = ConditionDecision("True", "ProxyAvailable", "2 of 2 proxy replica(s) available")
UNAVAILABLE = ConditionDecision("False", "ProxyUnavailable", "0 of 2 proxy replica(s) available")


@pytest.mark.parametrize(
    ("available", "backends", "status", "reason", "words"),
    [
        (AVAILABLE, READY, "True", "Serving", ()),
        (UNAVAILABLE, READY, "False", "ProxyNotAvailable", ("Available", "ProxyUnavailable")),
        (AVAILABLE, NOT_READY, "False", "BackendsNotReady", ("BackendMissing", "gpu-0")),
        # both missing: the proxy is named first, the message tells both
        (
            UNAVAILABLE,
            NOT_READY,
            "False",
            "ProxyNotAvailable",
            ("ProxyUnavailable", "BackendsReady is False", "gpu-0"),
        ),
    ],
)
def test_ready_is_available_and_backends_ready(
    available: ConditionDecision,
    backends: ConditionDecision,
    status: str,
    reason: str,
    words: tuple[str, ...],
) -> None:
    ready = router_ready(available, backends)
    assert (ready.status, ready.reason) == (status, reason)
    for word in words:
        assert word in ready.message


def test_ready_is_written_beside_the_conditions_it_is_made_of_and_agrees_with_the_phase() -> None:
    r = router()
    available = deployment(available=True, available_replicas=2)
    for decision, backends in (
        (compute_phase(None, READY, rbac_refusal=ESCALATION), READY),
        (compute_phase(available, NOT_READY), NOT_READY),
        (compute_phase(available, READY), READY),
    ):
        wanted = desired_status(r, decision, backends)
        ready = find_condition(wanted.conditions, "Ready")
        assert ready is not None
        assert ready.observed_generation == 4
        assert (ready.status == "True") == (wanted.phase == "Ready"), wanted.phase
        r = router(wanted.to_dict())
    # the same inputs again: nothing to write, Ready included
    assert not status_changed(r.status, desired_status(r, decision, READY))


def test_backends_name_the_pool_each_is_served_through() -> None:
    # "solo" names an InferenceService: through the pool that holds it when a pool lists it.
    held = backend_paths(router(), lambda member: "gpu-1" if member == "solo" else None)
    assert [(b.name, b.pool) for b in held] == [("gpu-0", "gpu-0"), ("solo", "gpu-1")]
    alone = backend_paths(router(), lambda _: None)
    assert [(b.name, b.pool) for b in alone] == [("gpu-0", "gpu-0"), ("solo", None)]
    status = desired_status(router(), compute_phase(None, READY), READY, held)
    assert status.to_dict()["backends"] == [
        {"name": "gpu-0", "pool": "gpu-0"},
        {"name": "solo", "pool": "gpu-1"},
    ]
