"""The declared rules themselves: the activation Role is within the ClusterRole, no wildcards."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.controllers import rbac
from controlplane.runtime.rbac import PolicyRule, compact, uncovered

ALL_DECLARED = (
    rbac.OPERATOR_CLUSTER_RULES
    + rbac.LEADER_ELECTION_RULES
    + rbac.ACTIVATION_ROLE_RULES
    + rbac.ROUTER_PROXY_RULES
)


def test_the_activation_role_is_a_subset_of_the_operator_cluster_role() -> None:
    assert uncovered(rbac.OPERATOR_CLUSTER_RULES, rbac.ACTIVATION_ROLE_RULES) == []
    for rules in rbac.RUNTIME_ROLE_RULES.values():
        assert uncovered(rbac.OPERATOR_CLUSTER_RULES, rules) == []


def test_the_activation_role_is_what_the_design_lists() -> None:
    granted = {(p.resource, p.verb) for r in rbac.ACTIVATION_ROLE_RULES for p in r.permissions()}
    read = {"get", "list", "watch"}
    assert granted == (
        {("inferenceservices", v) for v in read}
        | {("leases", v) for v in read | {"create", "update", "patch", "delete"}}
        | {("modelpools", v) for v in read}
    )


def test_nobody_but_their_user_writes_inferenceservices() -> None:
    """Pools decide in their own status: neither the operator nor a proxy may write a member, so
    nothing they do can fight ``kubectl apply``, Helm or Argo CD over one."""
    for rules in (rbac.OPERATOR_CLUSTER_RULES, rbac.ROUTER_PROXY_RULES):
        permissions = [p for r in rules for p in r.permissions()]
        verbs = {p.verb for p in permissions if p.resource == "inferenceservices"}
        assert verbs == {"get", "list", "watch"}


def test_no_declared_rule_has_a_wildcard() -> None:
    assert not any(rule.has_wildcard() for rule in ALL_DECLARED)


def test_owners_add_up_to_the_cluster_rules() -> None:
    by_owner = [rule for rules in rbac.OPERATOR_CLUSTER_RULES_BY_OWNER.values() for rule in rules]
    assert uncovered(by_owner, rbac.OPERATOR_CLUSTER_RULES) == []
    assert uncovered(rbac.OPERATOR_CLUSTER_RULES, by_owner) == []


NAMES = st.sampled_from(["", "apps", "coordination.k8s.io"])
RESOURCES = st.sampled_from(["pods", "leases", "deployments", "pods/status"])
VERBS = st.sampled_from(["get", "list", "watch", "create", "update", "patch", "delete", "bind"])
RULES = st.builds(
    PolicyRule,
    st.lists(NAMES, min_size=1, max_size=2).map(tuple),
    st.lists(RESOURCES, min_size=1, max_size=2).map(tuple),
    st.lists(VERBS, min_size=1, max_size=4).map(tuple),
    st.lists(st.sampled_from(["a", "b"]), max_size=1).map(tuple),
)


@given(st.lists(RULES, max_size=6))
def test_compact_keeps_exactly_the_same_permissions(rules: list[PolicyRule]) -> None:
    compacted = compact(rules)
    assert uncovered(compacted, rules) == []
    assert uncovered(rules, compacted) == []
    keys = [(r.api_groups, r.resources, r.resource_names) for r in compacted]
    assert len(keys) == len(set(keys)), "one rule per group, resource and names"


def test_compact_orders_verbs_like_kubectl() -> None:
    (rule,) = compact(
        [PolicyRule(("",), ("pods",), ("delete", "get")), PolicyRule(("",), ("pods",), ("watch",))]
    )
    assert rule.verbs == ("get", "watch", "delete")
