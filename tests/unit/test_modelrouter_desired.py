"""What the ModelRouter controller wants: its six children, built from a spec."""

from __future__ import annotations

import copy
from typing import Any

from controlplane.api.v1alpha1 import ModelRouter
from controlplane.controllers.children import MANAGED_BY_LABEL, SPEC_HASH_ANNOTATION, needs_apply
from controlplane.controllers.modelrouter.desired import (
    API_KEYS_DIR,
    PROXY_PORT,
    ROUTER_LABEL,
    activation_rules,
    desired_deployment,
    desired_disruption_budget,
    desired_role,
    desired_role_binding,
    desired_service,
    desired_service_account,
    endpoint,
)
from controlplane.controllers.rbac import (
    OPERATOR_CLUSTER_RULES,
    OPERATOR_OWN_RULES,
    PROXY_GRANT_RULES,
    ROUTER_PROXY_RULES,
)
from controlplane.runtime.rbac import PolicyRule, compact, uncovered

OWNER = {
    "apiVersion": "inference.modelpool.dev/v1alpha1",
    "kind": "ModelRouter",
    "name": "chat",
    "uid": "u-1",
    "controller": True,
    "blockOwnerDeletion": True,
}

#: What the operator resolved as its own image (controlplane.operator.proxyimage).
OWN_IMAGE = "modelpool.test/controlplane:built-here"


def router(**proxy: Any) -> ModelRouter:
    return ModelRouter.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelRouter",
            "metadata": {"name": "chat", "namespace": "ml", "uid": "u-1", "generation": 2},
            "spec": {
                "backends": [{"name": "gpu-0", "poolRef": {"name": "gpu-0"}}],
                "defaultBackend": "gpu-0",
                "proxy": proxy,
            },
        }
    )


def all_children(r: ModelRouter) -> list[dict[str, Any]]:
    return [
        desired_service_account(r),
        desired_role(r),
        desired_role_binding(r),
        desired_deployment(r, OWN_IMAGE),
        desired_service(r),
        desired_disruption_budget(r),
    ]


def test_every_child_is_owned_labelled_and_named() -> None:
    names = [(c["kind"], c["metadata"]["name"]) for c in all_children(router())]
    assert names == [
        ("ServiceAccount", "chat-proxy"),
        ("Role", "chat-activation"),
        ("RoleBinding", "chat-activation"),
        ("Deployment", "chat-proxy"),
        ("Service", "chat"),
        ("PodDisruptionBudget", "chat-proxy"),
    ]
    for child in all_children(router()):
        meta = child["metadata"]
        assert meta["namespace"] == "ml"
        assert meta["ownerReferences"] == [OWNER]
        assert meta["labels"][MANAGED_BY_LABEL] == "modelpool-operator"
        assert meta["labels"][ROUTER_LABEL] == "chat"
        assert meta["labels"]["app.kubernetes.io/component"] == "router-proxy"
        assert SPEC_HASH_ANNOTATION in meta["annotations"]


def test_role_rules_are_the_router_proxy_rules() -> None:
    rules = desired_role(router())["rules"]
    assert rules == activation_rules()
    as_rules = [PolicyRule.from_manifest(rule) for rule in rules]
    # Exactly the same permissions, both ways.
    assert uncovered(as_rules, ROUTER_PROXY_RULES) == []
    assert uncovered(ROUTER_PROXY_RULES, as_rules) == []
    assert rules == [rule.to_manifest() for rule in compact(ROUTER_PROXY_RULES)]


def test_the_operator_holds_every_rule_it_grants_the_proxy() -> None:
    # Else the API server refuses the Role as an escalation (ActivationRBAC).
    assert uncovered(OPERATOR_CLUSTER_RULES, ROUTER_PROXY_RULES) == []


def test_the_operator_holds_only_to_grant_what_its_own_code_does_not_call() -> None:
    """PROXY_GRANT_RULES is exactly the part of the proxy's Role the controllers lack: nothing
    is held only to grant it that the operator needs anyway (removing it would blind a
    controller), and nothing the proxy needs is missing."""
    assert set(uncovered(OPERATOR_OWN_RULES, ROUTER_PROXY_RULES)) == {
        permission for rule in PROXY_GRANT_RULES for permission in rule.permissions()
    }


def test_role_binding_binds_the_role_to_the_proxy_account() -> None:
    binding = desired_role_binding(router())
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "chat-activation",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "chat-proxy", "namespace": "ml"}
    ]


def test_deployment_honours_replicas_and_runs_the_proxy() -> None:
    deployment = desired_deployment(router(replicas=3), OWN_IMAGE)
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    assert spec["selector"] == {"matchLabels": {ROUTER_LABEL: "chat"}}
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"][ROUTER_LABEL] == "chat"
    assert pod["serviceAccountName"] == "chat-proxy"
    (container,) = pod["containers"]
    assert container["image"] == OWN_IMAGE, "no image in the spec: the operator's own"
    assert container["args"] == [
        "router-proxy",
        "--router",
        "chat",
        "--namespace",
        "ml",
        "--termination-grace-period=600",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["XDG_CACHE_HOME"]["value"] == "/tmp/cache"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": PROXY_PORT}
    assert PROXY_PORT == 8000
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["emptyDir"]
    assert desired_deployment(router(), OWN_IMAGE)["spec"]["replicas"] == 1


def test_deployment_image_and_resources_from_the_spec() -> None:
    deployment = desired_deployment(
        router(image="example.test/proxy:1", resources={"limits": {"cpu": 1, "memory": "1Gi"}}),
        OWN_IMAGE,
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "example.test/proxy:1"
    assert container["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"}}
    (default,) = desired_deployment(router(), OWN_IMAGE)["spec"]["template"]["spec"]["containers"]
    assert default["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}


def test_service_is_port_80_to_http_and_endpoint_has_no_port() -> None:
    service = desired_service(router())
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {ROUTER_LABEL: "chat"}
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    assert endpoint(router()) == "http://chat.ml.svc"


def test_needs_apply_only_when_something_differs() -> None:
    wanted = desired_deployment(router(replicas=2), OWN_IMAGE)
    cached = copy.deepcopy(wanted)
    cached["metadata"]["resourceVersion"] = "7"
    cached["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"  # a server default
    cached["status"] = {"replicas": 2}
    assert not needs_apply(cached, wanted)
    assert needs_apply(cached, desired_deployment(router(replicas=3), OWN_IMAGE))
    assert needs_apply(None, wanted)
    role = desired_role(router())
    assert not needs_apply(copy.deepcopy(role), role)
    edited = copy.deepcopy(role)
    edited["rules"] = edited["rules"][:-1]
    assert needs_apply(edited, role)


def test_an_api_key_secret_is_mounted_read_only_and_named_to_the_proxy() -> None:
    body = router().to_dict()
    body["spec"]["auth"] = {"apiKeySecret": {"name": "chat-keys"}}
    pod = desired_deployment(ModelRouter.from_dict(body), OWN_IMAGE)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "api-keys", "secret": {"secretName": "chat-keys"}} in pod["volumes"]
    assert {
        "name": "api-keys",
        "mountPath": API_KEYS_DIR,
        "readOnly": True,
    } in container["volumeMounts"]
    assert container["args"][-1] == f"--api-keys-dir={API_KEYS_DIR}"

    open_pod = desired_deployment(router(), OWN_IMAGE)["spec"]["template"]["spec"]
    assert [v["name"] for v in open_pod["volumes"]] == ["tmp"]
    assert not any(a.startswith("--api-keys-dir") for a in open_pod["containers"][0]["args"])


def test_a_stop_never_takes_every_replica_and_has_the_routers_grace_period() -> None:
    """One new replica Ready before an old one stops (a 1-replica router included), and the
    grace period the router asks for both on the pod and told to the proxy, so the proxy's own
    drain ends before the kubelet's SIGKILL."""
    for replicas in (1, 3):
        spec = desired_deployment(router(replicas=replicas), OWN_IMAGE)["spec"]
        assert spec["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
        }
    pod = desired_deployment(router(terminationGracePeriodSeconds=90), OWN_IMAGE)["spec"][
        "template"
    ]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 90
    (container,) = pod["containers"]
    assert "--termination-grace-period=90" in container["args"]
    default = desired_deployment(router(), OWN_IMAGE)["spec"]["template"]["spec"]
    assert default["terminationGracePeriodSeconds"] == 600
    probe = container["readinessProbe"]
    # seen unready within the proxy's 5 s endpoint-propagation delay
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 5


def test_the_disruption_budget_evicts_one_proxy_at_a_time_and_is_owned() -> None:
    budget = desired_disruption_budget(router(replicas=1))
    assert budget["apiVersion"] == "policy/v1"
    assert budget["kind"] == "PodDisruptionBudget"
    assert budget["metadata"]["name"] == "chat-proxy"
    assert budget["metadata"]["namespace"] == "ml"
    assert budget["metadata"]["ownerReferences"] == [OWNER]
    assert budget["metadata"]["labels"][ROUTER_LABEL] == "chat"
    assert budget["spec"] == {
        "selector": {"matchLabels": {ROUTER_LABEL: "chat"}},
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    assert budget["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
