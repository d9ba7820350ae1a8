"""The ModelRouter controller in the operator process, against a real API server.

The operator runs as a separate process under its own ServiceAccount, bound only by the generated
RBAC manifests, so the activation Role it writes passes the API server's escalation check for
real. Nothing plays the proxy's pods here: where a test needs the proxy Deployment available, it
writes the Deployment's status itself, as a deployment controller would. kube-controller-manager's
garbage collector makes ownerReferences cascade. No timing is asserted beyond generous deadlines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.api.v1alpha1 import InferenceService, ModelRouter
from controlplane.controllers.rbac import (
    ROUTER_PROXY_RULES,
)
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Invalid, NotFound
from controlplane.runtime.rbac import compact
from controlplane.runtime.resources import (
    DEPLOYMENTS,
    EVENTS,
    POD_DISRUPTION_BUDGETS,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    SERVICES,
)
from tests.e2e.operator_process import OperatorProcess
from tests.e2e.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
ROUTERS = ModelRouter.resource()
ISVC = InferenceService.resource()
TIMEOUT = 30.0


def sample_router(**proxy: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(
        (REPO / "manifests" / "samples" / "modelrouter.yaml").read_text()
    )
    body["spec"]["proxy"].update(proxy)
    return body


def isvc_router(name: str, isvc: str) -> dict[str, Any]:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "metadata": {"name": name},
        "spec": {"backends": [{"name": "solo", "inferenceServiceRef": {"name": isvc}}]},
    }


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for found in (obj.get("status") or {}).get("conditions") or ():
        if found["type"] == type_:
            return dict(found)
    return None


async def wait_router(
    admin: KubeClient, namespace: str, name: str, phase: str, **conditions: str
) -> dict[str, Any]:
    """The router once its phase is ``phase`` and each named condition has the given reason."""

    async def reached() -> dict[str, Any] | None:
        found = await admin.get(ROUTERS, name, namespace)
        if (found.get("status") or {}).get("phase") != phase:
            return None
        for type_, reason in conditions.items():
            if (condition(found, type_) or {}).get("reason") != reason:
                return None
        return found

    return await eventually(reached, timeout=TIMEOUT, what=f"{name} to be {phase} {conditions}")


async def mark_available(admin: KubeClient, namespace: str, name: str) -> None:
    """Write the Deployment status a deployment controller would once every replica is up."""
    deployment = await admin.get(DEPLOYMENTS, name, namespace)
    replicas = deployment["spec"]["replicas"]
    deployment["status"] = {
        "observedGeneration": deployment["metadata"]["generation"],
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": "rolled out",
            },
        ],
    }
    await admin.update_status(DEPLOYMENTS, deployment)


async def children(admin: KubeClient, namespace: str, router: str) -> list[dict[str, Any]]:
    return [
        await admin.get(SERVICE_ACCOUNTS, f"{router}-proxy", namespace),
        await admin.get(ROLES, f"{router}-activation", namespace),
        await admin.get(ROLE_BINDINGS, f"{router}-activation", namespace),
        await admin.get(DEPLOYMENTS, f"{router}-proxy", namespace),
        await admin.get(SERVICES, router, namespace),
        await admin.get(POD_DISRUPTION_BUDGETS, f"{router}-proxy", namespace),
    ]


async def test_sample_router_gets_its_six_children_and_provisions(
    admin: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    created = await admin.create(ROUTERS, sample_router(replicas=3), namespace)
    name = created["metadata"]["name"]
    found = await eventually(
        lambda: children(admin, namespace, name), timeout=TIMEOUT, what="the router's children"
    )
    owner = {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "name": name,
        "uid": created["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for child in found:
        assert child["metadata"]["ownerReferences"] == [owner], child["kind"]
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "modelpool-operator"
    account, role, binding, deployment, service, budget = found
    assert role["rules"] == [rule.to_manifest() for rule in compact(ROUTER_PROXY_RULES)]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["containers"][0]["args"] == [
        "router-proxy",
        "--router",
        name,
        "--namespace",
        namespace,
        "--termination-grace-period=600",  # the API server's default for the field
    ]
    assert service["spec"]["ports"][0]["port"] == 80
    # A stop never takes every replica: one new Ready before one old stops, one evicted at a time.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert pod["terminationGracePeriodSeconds"] == 600
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"

    # No pod runs the proxy here: Provisioning; the pool it names does not exist.
    router = await wait_router(
        admin, namespace, name, "Provisioning", BackendsReady="BackendMissing"
    )
    assert router["status"]["endpoint"] == f"http://{name}.{namespace}.svc"
    assert router["status"]["observedGeneration"] == router["metadata"]["generation"]

    # Available, but a backend is missing: Degraded, with Available True.
    await mark_available(admin, namespace, f"{name}-proxy")
    router = await wait_router(admin, namespace, name, "Degraded", Available="ProxyAvailable")
    assert (condition(router, "Available") or {})["status"] == "True"

    # A spec change reaches the Deployment (replicas honoured as is).
    await admin.patch(
        ROUTERS,
        name,
        {"spec": {"proxy": {"replicas": 5}}},
        namespace,
    )

    async def scaled() -> bool:
        return bool(
            (await admin.get(DEPLOYMENTS, f"{name}-proxy", namespace))["spec"]["replicas"] == 5
        )

    await eventually(scaled, timeout=TIMEOUT, what="the Deployment to follow spec.proxy.replicas")

    # The grace period reaches the pod and the proxy's flag; below the minimum is refused.
    await admin.patch(
        ROUTERS, name, {"spec": {"proxy": {"terminationGracePeriodSeconds": 120}}}, namespace
    )

    async def grace_followed() -> bool:
        deployment = await admin.get(DEPLOYMENTS, f"{name}-proxy", namespace)
        pod = deployment["spec"]["template"]["spec"]
        return bool(
            pod["terminationGracePeriodSeconds"] == 120
            and "--termination-grace-period=120" in pod["containers"][0]["args"]
        )

    await eventually(grace_followed, timeout=TIMEOUT, what="the grace period to reach the pod")
    with pytest.raises(Invalid, match="terminationGracePeriodSeconds"):
        await admin.patch(
            ROUTERS, name, {"spec": {"proxy": {"terminationGracePeriodSeconds": 5}}}, namespace
        )


async def test_router_becomes_ready_when_its_backend_appears_and_the_proxy_is_available(
    admin: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await admin.create(ROUTERS, isvc_router("edge", "solo"), namespace)
    await wait_router(admin, namespace, "edge", "Provisioning", BackendsReady="BackendMissing")
    # The InferenceService watch maps to the router: BackendsReady flips without a router edit.
    isvc = {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "solo"},
        "spec": {"model": {"name": "tiny", "source": "/models/tiny.gguf"}, "replicas": 0},
    }
    await admin.create(ISVC, isvc, namespace)
    await wait_router(admin, namespace, "edge", "Provisioning", BackendsReady="BackendsReady")
    await mark_available(admin, namespace, "edge-proxy")
    ready = await wait_router(
        admin,
        namespace,
        "edge",
        "Ready",
        Available="ProxyAvailable",
        BackendsReady="BackendsReady",
    )
    assert (condition(ready, "Available") or {})["status"] == "True"


async def test_deleting_the_router_cascades(
    admin: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await admin.create(ROUTERS, isvc_router("gone", "nothing"), namespace)
    await eventually(
        lambda: children(admin, namespace, "gone"), timeout=TIMEOUT, what="the children"
    )
    await admin.delete(ROUTERS, "gone", namespace)

    async def all_gone() -> bool:
        for resource, child in (
            (SERVICE_ACCOUNTS, "gone-proxy"),
            (ROLES, "gone-activation"),
            (ROLE_BINDINGS, "gone-activation"),
            (DEPLOYMENTS, "gone-proxy"),
            (SERVICES, "gone"),
            (POD_DISRUPTION_BUDGETS, "gone-proxy"),
        ):
            try:
                await admin.get(resource, child, namespace)
            except NotFound:
                continue
            return False
        return True

    await eventually(all_gone, timeout=60, what="the garbage collector to delete the children")


# -- the escalation path ---------------------------------------------------------------------------


async def test_activation_rbac_refused_marks_the_router_failed(
    admin: KubeClient, namespace: str, operator: OperatorProcess, reduced_operator: None
) -> None:
    await admin.create(ROUTERS, isvc_router("denied", "solo"), namespace)
    router = await wait_router(admin, namespace, "denied", "Failed", Available="ActivationRBAC")
    available = condition(router, "Available") or {}
    assert available["status"] == "False"
    assert "leases" in available["message"], available["message"]
    assert "denied-activation" in available["message"]
    with pytest.raises(NotFound):
        await admin.get(ROLES, "denied-activation", namespace)
    with pytest.raises(NotFound):  # no proxy is started without its RBAC
        await admin.get(DEPLOYMENTS, "denied-proxy", namespace)
    # The ServiceAccount is written before the Role; nothing else of the router exists.
    await admin.get(SERVICE_ACCOUNTS, "denied-proxy", namespace)

    async def warned() -> bool:
        events = await admin.list(EVENTS, namespace)
        return any(
            e.get("type") == "Warning"
            and e.get("reason") == "ActivationRBAC"
            and e["regarding"]["name"] == "denied"
            for e in events.items
        )

    await eventually(warned, timeout=TIMEOUT, what="a Warning event naming ActivationRBAC")
