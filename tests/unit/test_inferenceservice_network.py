"""Who may reach a member: the NetworkPolicy each InferenceService owns, and the flags behind it."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.controllers.children import SPEC_HASH_ANNOTATION, needs_apply
from controlplane.controllers.inferenceservice.desired import (
    ISVC_LABEL,
    desired_deployment,
)
from controlplane.controllers.inferenceservice.network import (
    MemberNetworkPolicy,
    desired_network_policy,
    parse_labels,
)
from controlplane.controllers.modelpool.slotserver import (
    desired_slot_deployment,
    member_service_selector,
)
from controlplane.controllers.modelrouter.desired import PROXY_NAME
from controlplane.controllers.modelrouter.desired import child_labels as proxy_pod_labels
from controlplane.operator import command


def isvc(**spec: Any) -> InferenceService:
    return InferenceService.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1"},
            "spec": {"model": {"name": "llama-3-8b", "source": "/m/llama.gguf"}, **spec},
        }
    )


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A ``matchLabels``-only selector against a label set (what the policy's selectors use)."""
    assert set(selector) == {"matchLabels"}, "only matchLabels is expected here"
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_the_policy_selects_exactly_the_members_pods_and_is_owned_like_its_service() -> None:
    member = isvc()
    policy = desired_network_policy(member, MemberNetworkPolicy())
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["kind"] == "NetworkPolicy"
    assert (policy["metadata"]["name"], policy["metadata"]["namespace"]) == ("llama", "ml")
    (owner,) = policy["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == ("u-1", True, True)
    pod_labels = desired_deployment(member)["spec"]["template"]["metadata"]["labels"]
    assert matches(policy["spec"]["podSelector"], pod_labels)
    assert not matches(policy["spec"]["podSelector"], {ISVC_LABEL: "other"})
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_only_the_members_port_is_opened_and_only_to_proxies_and_the_operator() -> None:
    policy = desired_network_policy(isvc(port=9000), MemberNetworkPolicy())
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9000}]
    proxies, operator = rule["from"]
    # The router's proxy pods of the member's own namespace (no namespaceSelector), by the
    # labels the ModelRouter controller gives them.
    assert set(proxies) == {"podSelector"}
    assert matches(proxies["podSelector"], proxy_pod_labels("chat"))
    assert not matches(proxies["podSelector"], {"app.kubernetes.io/name": "client"})
    assert proxies["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == PROXY_NAME
    # The operator's pods, in the operator's namespace only.
    assert operator == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "modelpool-system"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "modelpool-operator"}},
    }


def test_a_slot_server_members_policy_guards_the_server_its_service_selects_on_its_named_port() -> (
    None
):
    """A member a pool serves from its slot server has no pod of its own: its policy stands in
    front of the server (the same selector as its Service), on the server's named port, which is
    the pool's and may differ from the member's ``spec.port``."""
    server = desired_slot_deployment(slot_pool(), [])["spec"]["template"]["metadata"]["labels"]
    selector = member_service_selector("gpu-0")
    policy = desired_network_policy(isvc(port=9000), MemberNetworkPolicy(), selector)
    assert matches(policy["spec"]["podSelector"], server)
    assert not matches(policy["spec"]["podSelector"], {ISVC_LABEL: "llama"})
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "http"}]
    assert (
        rule["from"]
        == desired_network_policy(isvc(), MemberNetworkPolicy())["spec"]["ingress"][0]["from"]
    )


def slot_pool() -> ModelPool:
    return ModelPool.from_dict(
        {
            "metadata": {"name": "gpu-0", "namespace": "ml", "uid": "p-1"},
            "spec": {"members": [{"inferenceServiceRef": {"name": "llama"}}], "slotServer": {}},
        }
    )


def test_the_operator_peer_follows_its_namespace_and_labels_and_scrapers_are_added() -> None:
    rules = MemberNetworkPolicy(
        operator_namespace="ops",
        operator_pod_labels=(("app", "op"), ("tier", "cp")),
        allow_namespaces=("monitoring", "audit", "monitoring"),
    )
    (rule,) = desired_network_policy(isvc(), rules)["spec"]["ingress"]
    _, operator, *extra = rule["from"]
    assert operator["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ops"}
    assert operator["podSelector"]["matchLabels"] == {"app": "op", "tier": "cp"}
    # Every pod of each allowed namespace, once each, in a stable order.
    assert extra == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "audit"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]


def test_the_policy_is_applied_once_and_again_only_when_what_is_wanted_changes() -> None:
    rules = MemberNetworkPolicy()
    wanted = desired_network_policy(isvc(), rules)
    stored = copy.deepcopy(wanted)
    stored["metadata"].update(resourceVersion="7", uid="p-1", generation=1)
    assert not needs_apply(stored, desired_network_policy(isvc(), rules)), "applied every time"
    moved = desired_network_policy(isvc(port=9000), rules)
    assert needs_apply(stored, moved)
    scraped = desired_network_policy(isvc(), MemberNetworkPolicy(allow_namespaces=("mon",)))
    assert needs_apply(stored, scraped)
    # A peer taken away shows only in the hash.
    wider = desired_network_policy(isvc(), MemberNetworkPolicy(allow_namespaces=("mon",)))
    narrowed = desired_network_policy(isvc(), rules)
    assert (
        wider["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        != narrowed["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    )
    assert needs_apply(wider, narrowed)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"operator_namespace": "Ops"}, "'Ops' is not a namespace name"),
        ({"allow_namespaces": ("monitoring", "-x")}, "'-x' is not a namespace name"),
        ({"operator_pod_labels": ()}, "would select every pod"),
        ({"operator_pod_labels": (("app", "bad value"),)}, "'bad value' (of label app)"),
        ({"operator_pod_labels": (("a b", "x"),)}, "'a b' is not a label key"),
    ],
)
def test_bad_settings_are_refused_naming_what_is_wrong(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        MemberNetworkPolicy(**fields)


def test_labels_parse_from_the_flag_and_bad_parts_are_named() -> None:
    assert parse_labels("app.kubernetes.io/name=op, tier=") == (
        ("app.kubernetes.io/name", "op"),
        ("tier", ""),
    )
    with pytest.raises(ValueError, match="expected KEY=VALUE, got 'tier'"):
        parse_labels("app=op,tier")


def parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    command.add_arguments(parser)
    return parser.parse_args(list(args))


def test_the_operator_flags_default_to_on_and_reach_the_settings() -> None:
    settings = command.settings_from(parse())
    assert settings.member_network_policies is True
    assert settings.member_network_policy_operator_labels == (
        ("app.kubernetes.io/name", "modelpool-operator"),
    )
    assert settings.member_network_policy_allow_namespaces == ()
    settings = command.settings_from(
        parse(
            "--member-network-policies=false",
            "--member-network-policy-operator-labels=app=op",
            "--member-network-policy-allow-namespace=monitoring",
            "--member-network-policy-allow-namespace=audit",
        )
    )
    assert settings.member_network_policies is False
    assert settings.member_network_policy_operator_labels == (("app", "op"),)
    assert settings.member_network_policy_allow_namespaces == ("monitoring", "audit")


@pytest.mark.parametrize(
    "args",
    [
        ("--member-network-policies=maybe",),
        ("--member-network-policy-allow-namespace=Monitoring",),
        ("--member-network-policy-operator-labels=app",),
    ],
)
def test_bad_flags_are_refused(args: tuple[str, ...]) -> None:
    with pytest.raises(argparse.ArgumentError):
        parse(*args)
