"""Proof that the e2e tier talks to a real API server: behaviours a fake would not have."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from controlplane.runtime.client import KubeClient
from controlplane.runtime.discovery import ResourceMapper
from controlplane.runtime.errors import Conflict, Forbidden, NotFound
from controlplane.runtime.resources import (
    CONFIGMAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    LEASES,
    ROLE_BINDINGS,
    ROLES,
    SELF_SUBJECT_REVIEWS,
    SERVICE_ACCOUNTS,
    Resource,
)
from tests.e2e.clusters import TestCluster
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.any_cluster

ESCALATION_MESSAGE = "is attempting to grant RBAC permissions not currently held"


def _crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


async def test_custom_resource_definition_is_served(admin: KubeClient, namespace: str) -> None:
    group = f"e2e-{secrets.token_hex(3)}.modelpool.dev"
    await admin.create(CUSTOM_RESOURCE_DEFINITIONS, _crd(group))
    try:
        mapper = ResourceMapper(admin)
        widgets = await eventually(
            lambda: mapper.resource_for(f"{group}/v1", "Widget"), what="the CRD to be served"
        )
        assert widgets == Resource(group, "v1", "widgets", "Widget", namespaced=True)

        async def create_widget() -> dict[str, Any]:
            return await admin.create(
                widgets,
                {
                    "apiVersion": f"{group}/v1",
                    "kind": "Widget",
                    "metadata": {"name": "w"},
                    "spec": {"size": 3},
                },
                namespace,
            )

        # Discovery can lead the storage by a moment; creating is the real proof of serving.
        await eventually(create_widget, what="a Widget to be accepted")
        fetched = await admin.get(widgets, "w", namespace)
        assert fetched["spec"] == {"size": 3}
        assert fetched["metadata"]["uid"]
    finally:
        await admin.delete(CUSTOM_RESOURCE_DEFINITIONS, f"widgets.{group}")


async def test_stale_resource_version_is_a_conflict(admin: KubeClient, namespace: str) -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "pool-a", "namespace": namespace},
        "spec": {"holderIdentity": "replica-1", "leaseDurationSeconds": 15},
    }
    created = await admin.create(LEASES, lease)
    stale_version = created["metadata"]["resourceVersion"]

    renewed = {**created, "spec": {**created["spec"], "holderIdentity": "replica-2"}}
    updated = await admin.update(LEASES, renewed)
    assert updated["metadata"]["resourceVersion"] != stale_version

    late = {**created, "spec": {**created["spec"], "holderIdentity": "replica-3"}}
    with pytest.raises(Conflict) as raised:
        await admin.update(LEASES, late)
    assert raised.value.status_code == 409
    current = await admin.get(LEASES, "pool-a", namespace)
    assert current["spec"]["holderIdentity"] == "replica-2"


def _role(name: str, namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": rules,
    }


def _binding(name: str, namespace: str, role: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


LEASE_UPDATE = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["update"]}


async def test_role_escalation_is_refused_until_the_permission_is_held(
    admin: KubeClient, cluster: TestCluster, namespace: str
) -> None:
    account = "role-writer"
    user = f"system:serviceaccount:{namespace}:{account}"
    await admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": account}}, namespace)
    may_write_roles = [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["create"]}
    ]
    await admin.create(ROLES, _role("role-writer", namespace, may_write_roles))
    await admin.create(ROLE_BINDINGS, _binding("role-writer", namespace, "role-writer", account))

    wanted = _role("lease-updater", namespace, [LEASE_UPDATE])
    async with KubeClient(cluster.admin_config().impersonating(user)) as as_account:

        async def refused() -> Forbidden | None:
            try:
                await as_account.create(ROLES, wanted)
            except Forbidden as err:
                # Until the authorizer's cache sees the binding, the refusal is the plain one.
                return err if ESCALATION_MESSAGE in err.message else None
            raise AssertionError(
                "a Role granting leases/update was created by an account without it"
            )

        refusal = await eventually(refused, what="the escalation refusal")
        assert "leases" in refusal.message

        await admin.create(ROLES, _role("lease-holder", namespace, [LEASE_UPDATE]))
        await admin.create(
            ROLE_BINDINGS, _binding("lease-holder", namespace, "lease-holder", account)
        )
        created = await eventually(
            lambda: as_account.create(ROLES, wanted), what="the Role to be accepted once held"
        )
    assert created["rules"][0]["resources"] == ["leases"]


async def test_token_request_authenticates_as_the_service_account(
    admin: KubeClient, cluster: TestCluster, namespace: str
) -> None:
    await admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": "proxy"}}, namespace)
    answer = await admin.create(
        SERVICE_ACCOUNTS,
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": "proxy"},
            "spec": {"expirationSeconds": 600},
        },
        namespace,
        subresource="token",
    )
    token = answer["status"]["token"]
    config = cluster.admin_config().with_bearer_token(token)
    async with KubeClient(config) as as_account:
        review = await as_account.create(
            SELF_SUBJECT_REVIEWS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:proxy"
    assert f"system:serviceaccounts:{namespace}" in user["groups"]


async def test_deleting_an_owner_deletes_its_dependents(admin: KubeClient, namespace: str) -> None:
    owner = await admin.create(
        CONFIGMAPS, {"metadata": {"name": "owner"}, "data": {"k": "v"}}, namespace
    )
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    await admin.create(
        CONFIGMAPS, {"metadata": {"name": "dependent", "ownerReferences": [reference]}}, namespace
    )
    await admin.delete(CONFIGMAPS, "owner", namespace, propagation_policy="Background")

    async def dependent_gone() -> bool:
        try:
            await admin.get(CONFIGMAPS, "dependent", namespace)
        except NotFound:
            return True
        return False

    await eventually(dependent_gone, timeout=60, interval=0.5, what="the garbage collector")
