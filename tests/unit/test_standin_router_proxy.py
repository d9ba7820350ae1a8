"""The node stand-in's builders for router-proxy Deployments, on the operator's own Deployment."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from controlplane.api.v1alpha1 import ModelRouter
from controlplane.controllers.modelrouter.desired import desired_deployment, desired_service
from controlplane.standin.builders import (
    MEMBER_LABEL,
    Backend,
    PodRole,
    deployment_status,
    endpoint_slices,
    loopback_name,
    max_replicas,
    new_pod,
    pod_env,
    pod_role,
    proxy_argv,
    service_account_of,
    template_hash,
    token_kubeconfig,
)


def router(replicas: int = 2) -> ModelRouter:
    return ModelRouter.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelRouter",
            "metadata": {"name": "chat", "namespace": "ml", "uid": "u-1", "generation": 2},
            "spec": {
                "backends": [{"name": "gpu-0", "poolRef": {"name": "gpu-0"}}],
                "defaultBackend": "gpu-0",
                "proxy": {"replicas": replicas},
            },
        }
    )


def proxy_deployment(replicas: int = 2) -> dict[str, Any]:
    found = desired_deployment(router(replicas), "modelpool.test/controlplane:dev")
    found["metadata"].update(uid="d-1", generation=3)
    return found


def test_the_operators_deployments_are_sorted_into_members_and_proxies() -> None:
    proxy = proxy_deployment()
    assert pod_role(proxy) is PodRole.ROUTER_PROXY
    assert max_replicas(PodRole.ROUTER_PROXY) is None
    assert max_replicas(PodRole.MEMBER) == 1
    member = proxy_deployment()
    member["spec"]["template"]["metadata"]["labels"][MEMBER_LABEL] = "llama"
    assert pod_role(member) is PodRole.MEMBER
    foreign = proxy_deployment()
    del foreign["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    assert pod_role(foreign) is None


def pod(suffix: str, ready: bool) -> dict[str, Any]:
    made = new_pod(proxy_deployment(), template_hash(proxy_deployment()), suffix)
    made["metadata"]["uid"] = f"p-{suffix}"
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    made["status"] = {"phase": "Running", "conditions": conditions}
    return made


def test_proxy_replicas_are_not_capped_in_the_deployment_status() -> None:
    found = proxy_deployment(replicas=2)
    hash_ = template_hash(found)
    one = deployment_status(found, [pod("a", True), pod("b", False)], hash_, cap=None)
    assert (one["replicas"], one["readyReplicas"], one["unavailableReplicas"]) == (2, 1, 1)
    assert {c["type"]: c["status"] for c in one["conditions"]}["Available"] == "False"
    both = deployment_status(found, [pod("a", True), pod("b", True)], hash_, cap=None)
    assert {c["type"]: c["status"] for c in both["conditions"]}["Available"] == "True"


def test_replicas_on_different_ports_get_one_slice_per_port() -> None:
    service = desired_service(router())
    service["metadata"]["uid"] = "s-1"
    container = proxy_deployment()["spec"]["template"]["spec"]["containers"][0]
    a, b = pod("a", True), pod("b", False)
    slices = endpoint_slices(
        service,
        container,
        [Backend(a, loopback_name(a), 40002, True), Backend(b, loopback_name(b), 40001, False)],
    )
    assert [s["metadata"]["name"] for s in slices] == ["chat-sim-40001", "chat-sim-40002"]
    assert [s["ports"] for s in slices] == [
        [{"name": "http", "port": 40001, "protocol": "TCP"}],
        [{"name": "http", "port": 40002, "protocol": "TCP"}],
    ]
    assert [s["endpoints"][0]["conditions"]["ready"] for s in slices] == [False, True]
    (single,) = endpoint_slices(service, container, [Backend(a, loopback_name(a), 40002, True)])
    assert single["metadata"]["name"] == "chat-sim"
    (empty,) = endpoint_slices(service, container, [])
    assert (empty["metadata"]["name"], empty["endpoints"]) == ("chat-sim", [])


def test_a_proxy_pod_runs_router_proxy_with_its_container_args_as_its_service_account() -> None:
    made = pod("a", False)
    container = made["spec"]["containers"][0]
    assert service_account_of(made) == "chat-proxy"
    argv = proxy_argv(container, made, kubeconfig=Path("/k"), port=4321, cache_dir=Path("/c"))
    assert argv[:3] == [sys.executable, "-m", "controlplane.cli"]
    assert argv[3:] == [
        "router-proxy", "--router", "chat", "--namespace", "ml",
        "--termination-grace-period=600",
        "--kubeconfig", "/k", "--identity", made["metadata"]["name"],
        "--bind-address", "127.0.0.1:4321", "--preflight-cache-dir", "/c",
    ]  # fmt: skip
    assert pod_env(made) == {"POD_NAME": made["metadata"]["name"], "POD_NAMESPACE": "ml"}
    assert service_account_of({"spec": {}}) == "default"


def test_the_token_kubeconfig_trusts_the_ca_or_says_it_does_not_verify() -> None:
    config = token_kubeconfig("https://127.0.0.1:6443", "/pki/ca.crt", "tok")
    assert config["users"] == [{"name": "service-account", "user": {"token": "tok"}}]
    cluster = config["clusters"][0]["cluster"]
    assert cluster == {"server": "https://127.0.0.1:6443", "certificate-authority": "/pki/ca.crt"}
    insecure = token_kubeconfig("https://x", None, "tok")["clusters"][0]["cluster"]
    assert insecure["insecure-skip-tls-verify"] is True
