"""The activation Role is within the operator's ClusterRole, as the API server judges it.

Everything here acts as the operator's own ServiceAccount (impersonated by the admin), bound only
by the generated manifests: never as ``system:masters``, which the escalation check exempts. The
mutation case closes the loop with ``make check-rbac``: the ClusterRole without its leases rule
is refused by the API server and by the offline check, both naming leases.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from controlplane.controllers.rbac import (
    ACTIVATION_ROLE_RULES,
    OPERATOR_NAMESPACE,
    OPERATOR_SERVICE_ACCOUNT,
)
from controlplane.rbacmanifests.check import Declarations, check, load_documents
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Forbidden, NotFound
from controlplane.runtime.rbac import PolicyRule, compact
from controlplane.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    ROLES,
    SELF_SUBJECT_REVIEWS,
)
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import kubectl
from tests.e2e.waiting import eventually

pytestmark = [pytest.mark.any_cluster, pytest.mark.cluster_install]

REPO = Path(__file__).resolve().parents[2]
ESCALATION = "is attempting to grant RBAC permissions not currently held"
OPERATOR = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"


def activation_role(namespace: str, rules: tuple[PolicyRule, ...]) -> dict[str, Any]:
    """The Role the ModelRouter controller writes for a router's proxy."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "chat-activation", "namespace": namespace},
        "rules": [rule.to_manifest() for rule in compact(rules)],
    }


def activation_binding(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "chat-activation", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "chat-activation",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "chat-proxy", "namespace": namespace}],
    }


async def refusal(client: KubeClient, role: dict[str, Any]) -> Forbidden | None:
    """The escalation refusal, or None while the authorizer has not caught up (plain 403)."""
    try:
        await client.create(ROLES, role)
    except Forbidden as err:
        return err if ESCALATION in err.message else None
    raise AssertionError(f"a Role beyond the grants was created: {role['rules']}")


async def test_operator_account_creates_the_activation_role_and_nothing_beyond(
    cluster: TestCluster, namespace: str
) -> None:
    await kubectl(cluster, "apply", "-f", "manifests/default/namespace.yaml")
    await kubectl(cluster, "apply", "-k", "manifests/rbac")
    async with KubeClient(cluster.admin_config().impersonating(OPERATOR)) as operator:
        review = await operator.create(
            SELF_SUBJECT_REVIEWS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == OPERATOR
        assert "system:masters" not in review["status"]["userInfo"].get("groups", [])

        role = activation_role(namespace, ACTIVATION_ROLE_RULES)
        created = await eventually(
            lambda: operator.create(ROLES, role), what="the activation Role, as the operator"
        )
        assert created["rules"] == role["rules"]
        await operator.create(ROLE_BINDINGS, activation_binding(namespace))

        beyond = activation_role(
            namespace, (*ACTIVATION_ROLE_RULES, PolicyRule(("",), ("secrets",), ("get",)))
        )
        beyond["metadata"]["name"] = "chat-beyond"
        refused = await eventually(lambda: refusal(operator, beyond), what="an escalation refusal")
        assert "secrets" in refused.message


@dataclass
class Mutant:
    """An identity bound to the mutated ClusterRole, and the documents that bind it."""

    user: str
    account: str
    namespace: str
    documents: list[dict[str, Any]]


@pytest.fixture
async def mutant(admin: KubeClient, namespace: str) -> AsyncIterator[Mutant]:
    """A copy of the committed ClusterRole without its leases rule, bound to a test account."""
    name = f"mutant-{secrets.token_hex(3)}"
    (committed,) = [
        d for d in load_documents([REPO / "manifests" / "rbac"]) if d["kind"] == "ClusterRole"
    ]
    role = copy.deepcopy(committed)
    role["metadata"] = {"name": name}
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["leases"]]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    await admin.create(CLUSTER_ROLES, role)
    await admin.create(CLUSTER_ROLE_BINDINGS, binding)
    yield Mutant(f"system:serviceaccount:{namespace}:{name}", name, namespace, [role, binding])
    with anyio.CancelScope(shield=True):
        for resource in (CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES):
            with contextlib.suppress(NotFound):
                await admin.delete(resource, name)


async def test_without_the_leases_rule_the_server_and_the_check_both_refuse(
    cluster: TestCluster, mutant: Mutant
) -> None:
    async with KubeClient(cluster.admin_config().impersonating(mutant.user)) as operator:
        role = activation_role(mutant.namespace, ACTIVATION_ROLE_RULES)
        refused = await eventually(lambda: refusal(operator, role), what="an escalation refusal")
    assert "leases" in refused.message

    bound_to_test_account = Declarations(namespace=mutant.namespace, service_account=mutant.account)
    findings = check(mutant.documents, bound_to_test_account)
    assert any(f.problem == "escalation" and "leases" in f.message for f in findings)
