"""The operator's account under a reduced ClusterRole: what the RBAC escalation tests change.

The ClusterRole keeps the rules the operator holds only to grant them to router proxies apart
from its controllers' own rules (``PROXY_GRANT_RULES``); the tests remove exactly those, as an
administrator would, and expect router activation to be refused while pools go on working.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio

from controlplane.controllers.rbac import (
    OPERATOR_NAMESPACE,
    OPERATOR_SERVICE_ACCOUNT,
    PROXY_GRANT_RULES,
)
from controlplane.rbacmanifests.check import load_documents
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    SELF_SUBJECT_ACCESS_REVIEWS,
)
from tests.e2e.kubectl import MANIFESTS
from tests.e2e.waiting import eventually

OPERATOR = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
#: The generated ClusterRole and ClusterRoleBinding of the operator share this name.
OPERATOR_RBAC_NAME = "modelpool-operator"
TIMEOUT = 30.0


def without_grant_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rules`` (a ClusterRole's, as written) without the rules held only to grant proxies."""
    grants = [rule.to_manifest() for rule in PROXY_GRANT_RULES]
    kept = [rule for rule in rules if rule not in grants]
    assert len(kept) == len(rules) - len(grants), "the grant-only rules are rules of their own"
    return kept


async def operator_may(
    admin: KubeClient, namespace: str, verb: str, resource: str, group: str
) -> bool:
    """What the API server's authorizer says the operator's account may do, right now."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "resource": resource,
                "group": group,
            }
        },
    }
    async with KubeClient(admin.config.impersonating(OPERATOR)) as as_operator:
        answer = await as_operator.create(SELF_SUBJECT_ACCESS_REVIEWS, review)
    return bool(answer["status"].get("allowed"))


def committed(kind: str) -> dict[str, Any]:
    """The operator's ``kind`` object as ``manifests/rbac/`` writes it."""
    (found,) = [
        document
        for document in load_documents([MANIFESTS / "rbac"])
        if document["kind"] == kind and document["metadata"]["name"] == OPERATOR_RBAC_NAME
    ]
    return found


async def rebind(admin: KubeClient, role: str) -> None:
    """Point the operator's ClusterRoleBinding at ``role`` (roleRef is immutable: recreate it)."""
    binding = copy.deepcopy(committed("ClusterRoleBinding"))
    binding["roleRef"]["name"] = role
    with contextlib.suppress(NotFound):
        await admin.delete(CLUSTER_ROLE_BINDINGS, OPERATOR_RBAC_NAME)

    async def gone() -> bool:
        try:
            await admin.get(CLUSTER_ROLE_BINDINGS, OPERATOR_RBAC_NAME)
        except NotFound:
            return True
        return False

    await eventually(gone, what="the old binding to go")
    await admin.create(CLUSTER_ROLE_BINDINGS, binding)


@contextlib.asynccontextmanager
async def operator_without_grant_rules(admin: KubeClient, namespace: str) -> AsyncIterator[None]:
    """The operator's account bound to a copy of its ClusterRole without the grant-only rules,
    until the block ends; the committed binding is restored afterwards, whatever happens."""
    name = f"modelpool-operator-mutant-{secrets.token_hex(3)}"
    role = copy.deepcopy(committed("ClusterRole"))
    role["metadata"] = {"name": name}
    role["rules"] = without_grant_rules(role["rules"])
    await admin.create(CLUSTER_ROLES, role)
    (grant,) = PROXY_GRANT_RULES
    group, resource, verb = grant.api_groups[0], grant.resources[0], grant.verbs[0]
    try:
        await rebind(admin, name)

        async def reduced() -> bool:
            return not await operator_may(
                admin, namespace, verb, resource, group
            ) and await operator_may(admin, namespace, "watch", resource, group)

        await eventually(reduced, timeout=TIMEOUT, what="the authorizer to see the reduced role")
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await rebind(admin, committed("ClusterRoleBinding")["roleRef"]["name"])
            with contextlib.suppress(NotFound):
                await admin.delete(CLUSTER_ROLES, name)
