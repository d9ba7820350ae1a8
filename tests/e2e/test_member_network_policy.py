"""Each member's NetworkPolicy, as the operator process writes it to a real API server.

The local tier has no network plugin, so nothing here is enforced (the kind tier proves the
refusals: ``tests/e2e/test_kind_network_policy.py``); what is proved here is the object: written
with the selectors docs/network.md states, before the member's Deployment, under the operator's
own ServiceAccount (only the generated RBAC grants it networkpolicies), applied once and not again
while the member changes around it, garbage-collected with its InferenceService
(kube-controller-manager), and, with ``--member-network-policies=false``, never written and the
ones written before deleted (a user's own policy left alone).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, NETWORK_POLICIES
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import install
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_operator
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
TIMEOUT = 60.0


def isvc_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"model": {"name": name, "source": "/models/tiny.gguf"}, "replicas": 0, **spec},
    }


async def operator_with(
    cluster: TestCluster,
    admin: KubeClient,
    tmp_path: Path,
    started: list[LocalProcess],
    *args: str,
) -> OperatorProcess:
    """An operator process of this test's own (its own Lease), with ``args`` added."""
    await install(cluster)
    suffix = secrets.token_hex(3)
    return await start_operator(
        cluster, admin, tmp_path, f"netpol-{suffix}", f"netpol-op-{suffix}", started,
        extra_args=args,
    )  # fmt: skip


async def policy_of(admin: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await admin.get(NETWORK_POLICIES, name, namespace)
    except NotFound:
        return None


async def wait_policy(admin: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return await eventually(
        lambda: policy_of(admin, namespace, name), timeout=TIMEOUT, what=f"NetworkPolicy {name}"
    )


async def wait_no_policy(admin: KubeClient, namespace: str, name: str) -> None:
    async def gone() -> bool:
        return await policy_of(admin, namespace, name) is None

    await eventually(gone, timeout=TIMEOUT, what=f"NetworkPolicy {name} gone")


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


async def test_the_operator_writes_each_members_policy_once_and_it_goes_with_the_member(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    await operator_with(
        cluster, admin, tmp_path, started, "--member-network-policy-allow-namespace=monitoring"
    )
    created = await admin.create(ISVC, isvc_body("llama", port=9090), namespace)
    policy = await wait_policy(admin, namespace, "llama")

    (owner,) = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "InferenceService",
        created["metadata"]["uid"],
        True,
    )
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {ISVC_LABEL: "llama"}}
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9090}]
    assert rule["from"] == [
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "router-proxy",
                    "app.kubernetes.io/managed-by": "modelpool-operator",
                }
            }
        },
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}
            },
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "modelpool-operator"}},
        },
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]

    # It selects the pods the member's Deployment makes.
    async def deployment() -> dict[str, Any] | None:
        try:
            return await admin.get(DEPLOYMENTS, "llama", namespace)
        except NotFound:
            return None

    found = await eventually(deployment, timeout=TIMEOUT, what="the member's Deployment")
    assert selects(spec["podSelector"], found["spec"]["template"]["metadata"]["labels"])

    # The member changes (new arguments: its Deployment is applied again); its policy is not
    # written again: same resourceVersion, one apply in its managed fields.
    version = policy["metadata"]["resourceVersion"]
    generation = found["metadata"]["generation"]
    # A merge patch, as `kubectl patch` sends: a get-then-replace would race the operator's own
    # status writes to the member and fail with 409 for a reason that is not this test's.
    await admin.patch(ISVC, "llama", {"spec": {"args": ["--ctx-size", "2048"]}}, namespace)

    async def redeployed() -> bool:
        live = await deployment()
        return live is not None and live["metadata"]["generation"] > generation

    await eventually(redeployed, timeout=TIMEOUT, what="the Deployment applied again")
    again = await policy_of(admin, namespace, "llama")
    assert again is not None
    assert again["metadata"]["resourceVersion"] == version, "the policy was written again"

    # Deleting the member takes its policy along (the garbage collector, by ownerReference).
    await admin.delete(ISVC, "llama", namespace)
    await wait_no_policy(admin, namespace, "llama")


async def test_turned_off_the_operator_writes_none_and_deletes_the_ones_it_wrote(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    # A user's own policy, which the operator must never touch.
    users = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "users-own"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    await admin.create(NETWORK_POLICIES, users, namespace)
    on = await operator_with(cluster, admin, tmp_path, started)
    await admin.create(ISVC, isvc_body("written"), namespace)
    await wait_policy(admin, namespace, "written")
    on.stop(grace=15)
    started.remove(on)

    await operator_with(cluster, admin, tmp_path, started, "--member-network-policies=false")
    # The one written before is deleted; a new member gets none, yet its Deployment is written.
    await wait_no_policy(admin, namespace, "written")
    await admin.create(ISVC, isvc_body("open"), namespace)

    async def deployed() -> bool:
        try:
            await admin.get(DEPLOYMENTS, "open", namespace)
        except NotFound:
            return False
        return True

    await eventually(deployed, timeout=TIMEOUT, what="the Deployment of the new member")
    assert await policy_of(admin, namespace, "open") is None
    assert await policy_of(admin, namespace, "users-own") is not None
