"""Addressing API resources: group, version and plural name to URL paths.

A :class:`Resource` is what a request needs; a kind (``apiVersion`` + ``kind``) is what an object
says. :class:`~controlplane.runtime.discovery.ResourceMapper` turns one into the other; it lives
in its own module because it needs the client, and the client needs :class:`Resource`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource type: ``Resource("coordination.k8s.io", "v1", "leases", "Lease")``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def base(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object, or of one of its subresources."""
        if self.namespaced and namespace is None and name is not None:
            raise ValueError(
                f"{self.plural} is namespaced: a namespace is needed to address {name!r}"
            )
        parts = [self.base]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        if subresource is not None:
            if name is None:
                raise ValueError("a subresource needs an object name")
            parts.append(subresource)
        return "/".join(parts)


# Built-in resources the framework and its users need most; anything else goes through discovery.
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
JOBS = Resource("batch", "v1", "jobs", "Job")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io",
    "v1",
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    namespaced=False,
)
SELF_SUBJECT_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", namespaced=False
)
