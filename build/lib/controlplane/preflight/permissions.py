"""Which permissions each component checks, derived from the declarations that make the manifests.

There is no second list: the operator checks ``OPERATOR_CLUSTER_RULES`` cluster-wide and
``LEADER_ELECTION_RULES`` in its own namespace; a router-proxy replica checks
``ROUTER_PROXY_RULES`` in its own namespace. Whatever ``controlplane.controllers.rbac`` declares
today is what the preflight asks about, so the check cannot drift from the ClusterRole.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controlplane.controllers.rbac import (
    LEADER_ELECTION_RULES,
    OPERATOR_CLUSTER_RULES,
    ROUTER_PROXY_RULES,
)
from controlplane.runtime.rbac import Permission, PolicyRule


class Component(enum.StrEnum):
    """A process that runs the preflight at start."""

    OPERATOR = "operator"
    ROUTER_PROXY = "router-proxy"


@dataclass(frozen=True, slots=True)
class ScopedPermission:
    """One permission in one namespace, or in every namespace when ``namespace`` is None."""

    permission: Permission
    namespace: str | None

    def __str__(self) -> str:
        """kubectl style, with the scope: ``update leases.coordination.k8s.io in namespace x``."""
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.permission} {where}"

    def resource_attributes(self) -> dict[str, Any]:
        """The ``spec.resourceAttributes`` of a SelfSubjectAccessReview asking about it.

        RBAC spells subresources ``modelpools/status``; a review names them apart
        (``resource: modelpools, subresource: status``). A missing namespace asks about all
        namespaces, which is what a ClusterRole binding grants.
        """
        resource, _, subresource = self.permission.resource.partition("/")
        attributes: dict[str, Any] = {
            "group": self.permission.group,
            "resource": resource,
            "verb": self.permission.verb,
        }
        if subresource:
            attributes["subresource"] = subresource
        if self.permission.resource_name:
            attributes["name"] = self.permission.resource_name
        if self.namespace:
            attributes["namespace"] = self.namespace
        return attributes


def _scoped(rules: Iterable[PolicyRule], namespace: str | None) -> list[ScopedPermission]:
    return [ScopedPermission(p, namespace) for rule in rules for p in rule.permissions()]


def permissions_for(component: Component, namespace: str) -> tuple[ScopedPermission, ...]:
    """Every permission ``component`` running in ``namespace`` needs, once each, in order."""
    if not namespace:
        raise ValueError("the preflight needs the component's own namespace")
    if component is Component.OPERATOR:
        wanted = _scoped(OPERATOR_CLUSTER_RULES, None) + _scoped(LEADER_ELECTION_RULES, namespace)
    else:
        wanted = _scoped(ROUTER_PROXY_RULES, namespace)
    return tuple(dict.fromkeys(wanted))


def permission_set_digest(permissions: Iterable[ScopedPermission]) -> str:
    """A digest of the set (order-free): the cache key changes whenever the declarations do."""
    lines = sorted(
        "\t".join(
            (
                p.permission.group,
                p.permission.resource,
                p.permission.verb,
                p.permission.resource_name or "",
                p.namespace or "",
            )
        )
        for p in permissions
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()
