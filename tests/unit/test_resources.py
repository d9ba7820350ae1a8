"""Resource addressing: the paths every request is built on."""

from __future__ import annotations

import pytest

from controlplane.runtime.resources import CLUSTER_ROLES, LEASES, PODS


def test_core_and_group_paths() -> None:
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert LEASES.path("ns", "l") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    assert LEASES.path() == "/apis/coordination.k8s.io/v1/leases"  # across namespaces
    assert (
        CLUSTER_ROLES.path(None, "admin") == "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin"
    )
    assert LEASES.api_version == "coordination.k8s.io/v1"
    assert PODS.api_version == "v1"


def test_namespaced_object_needs_a_namespace() -> None:
    with pytest.raises(ValueError, match="leases is namespaced"):
        LEASES.path(None, "l")


def test_subresource_needs_a_name() -> None:
    with pytest.raises(ValueError, match="subresource needs an object name"):
        PODS.path("ns", None, "status")
