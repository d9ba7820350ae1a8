"""The kind tier: the operator and the router-proxies run in a real cluster, from the image built
here, under their own ServiceAccounts, with a real kubelet, deployment controller and Services.

What only a cluster shows: the image starts as the non-root user the manifests demand; the
activation Role the in-cluster operator writes passes the API server's escalation check for its
real identity; taking the rule held only to grant proxies Leases out of the *installed*
ClusterRole turns a new router ``Available=False`` (``ActivationRBAC``, naming the rule) while a
working router keeps its three proxy replicas and the pool controller its own leases rule, and
putting it back heals the new router without restarting the operator; the proxy's ServiceAccount
is refused what it was never given; no component logs ``forbidden`` on the happy path; a request
sent from a pod through the router's Service (three proxy replicas) swaps a pool whose members run
the simulator image, or the real llama-server image, under the pool invariant monitor reading
pods.
"""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.rbac import OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Forbidden, NotFound
from controlplane.runtime.resources import (
    CLUSTER_ROLES,
    DEPLOYMENTS,
    LEASES,
    PODS,
    ROLES,
    SECRETS,
)
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import (
    OPERATOR_LABEL,
    ROLLOUT_TIMEOUT,
    available_proxies,
    leader_pod,
    logs,
    operator_pods,
    wait_available,
)
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kubectl import KIND_OPERATOR_REPLICAS, kubectl
from tests.e2e.operator_rbac import operator_may, without_grant_rules
from tests.e2e.test_modelrouter import condition, wait_router
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

ROUTERS = ModelRouter.resource()
ISVCS = InferenceService.resource()


def router(name: str, image: str | None, replicas: int) -> dict[str, Any]:
    """A router in front of one (absent) InferenceService: its proxies run all the same. With
    no ``image`` they run the operator's own (the image built here, loaded into the node)."""
    proxy: dict[str, Any] = {"replicas": replicas}
    if image is not None:
        proxy["image"] = image
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "metadata": {"name": name},
        "spec": {
            "backends": [{"name": "solo", "inferenceServiceRef": {"name": "solo"}}],
            "proxy": proxy,
        },
    }


async def refused(client: KubeClient, call: Any) -> bool:
    """Whether the API server answers ``call`` with 403 for this client's identity."""
    try:
        await call(client)
    except Forbidden:
        return True
    return False


async def test_the_operator_runs_in_the_cluster_from_the_image_as_its_non_root_user(
    admin: KubeClient, cluster: TestCluster, operator_pod: str
) -> None:
    # Both replicas (the leader and the standby) run the image as the non-root user, and Ready:
    # a standby's caches sync before it campaigns.
    pods = await operator_pods(admin)
    assert len(pods) == KIND_OPERATOR_REPLICAS, pods
    assert operator_pod in pods, pods
    for name in pods:
        pod = await admin.get(PODS, name, OPERATOR_NAMESPACE)
        (container,) = pod["spec"]["containers"]
        assert container["image"] == cluster.image
        assert pod["spec"]["serviceAccountName"] == OPERATOR_SERVICE_ACCOUNT
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] is True, name
        _, uid, _ = await kubectl(cluster, "-n", OPERATOR_NAMESPACE, "exec", name, "--", "id", "-u")
        assert uid.strip() == "65532"
    # The category answers (kubectl exits non-zero on an unknown resource type).
    await kubectl(cluster, "get", "modelpool-all", "-A")
    # The leader (the Lease's holder) says so; the standby only campaigns.
    _, leader, _ = await kubectl(
        cluster, "-n", OPERATOR_NAMESPACE, "logs", operator_pod, "--tail=-1"
    )
    assert "acquired lease" in leader


async def test_the_happy_path_logs_no_refusal(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    assert cluster.image is not None
    with contextlib.suppress(NotFound):
        await admin.delete(ROUTERS, "happy", namespace)
    # No image named: the proxies run the operator's own, read from its Pod.
    await admin.create(ROUTERS, router("happy", None, 2), namespace)
    await wait_available(admin, namespace, "happy", 2)
    deployment = await admin.get(DEPLOYMENTS, "happy-proxy", namespace)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == cluster.image
    proxies = await logs(cluster, namespace, "inference.modelpool.dev/modelrouter=happy")
    assert proxies.strip(), "the proxies wrote nothing to their logs"
    operator = await logs(cluster, OPERATOR_NAMESPACE, OPERATOR_LABEL)
    for component, text in (("router-proxy", proxies), ("operator", operator)):
        assert "forbidden" not in text.lower(), f"{component} logged forbidden:\n{text[-2000:]}"


async def test_activation_rbac_follows_the_installed_cluster_role_without_a_restart(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    assert cluster.image is not None
    await admin.create(ROUTERS, router("working", cluster.image, 3), namespace)
    await wait_available(admin, namespace, "working", 3)
    account = f"system:serviceaccount:{namespace}:working-proxy"
    async with KubeClient(admin.config.impersonating(account)) as proxy:
        # The proxy's identity may read its pools' Leases, and nothing it was not given.
        await proxy.list(LEASES, namespace)
        assert await refused(proxy, lambda c: c.list(SECRETS, namespace))
        assert await refused(proxy, lambda c: c.list(ISVCS, "default"))
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "grab"}, "rules": []}  # fmt: skip
        assert await refused(proxy, lambda c: c.create(ROLES, role, namespace))

    installed = await admin.get(CLUSTER_ROLES, "modelpool-operator")
    reduced = copy.deepcopy(installed)
    reduced["rules"] = without_grant_rules(reduced["rules"])
    await admin.update(CLUSTER_ROLES, reduced)
    try:
        await admin.create(ROUTERS, router("denied", cluster.image, 1), namespace)
        denied = await wait_router(admin, namespace, "denied", "Failed", Available="ActivationRBAC")
        message = (condition(denied, "Available") or {}).get("message", "")
        assert "leases" in message, message
        # The router that was working keeps its three proxies while the other is refused, and
        # the pool controller keeps its own leases rule: a watch it renews is still allowed.
        assert await available_proxies(admin, namespace, "working") == 3
        assert await operator_may(admin, namespace, "watch", "leases", "coordination.k8s.io")
    finally:
        with anyio.CancelScope(shield=True):
            restored = await admin.get(CLUSTER_ROLES, "modelpool-operator")
            restored["rules"] = installed["rules"]
            await admin.update(CLUSTER_ROLES, restored)
    # Restored: the refused router heals by the operator's own retries, no restart.
    await wait_available(admin, namespace, "denied", 1)
    pod = await admin.get(PODS, operator_pod, OPERATOR_NAMESPACE)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert await leader_pod(admin) == operator_pod, "the leader changed"


def member(name: str, cluster: TestCluster, server: str, source: str) -> dict[str, Any]:
    """A member whose pod runs ``server`` from its image with the operator's llama-server
    arguments: the simulator, or the real llama-server serving a tiny model the image carries."""
    real = server == "llama-server"
    image = cluster.llama_image if real else cluster.sim_image
    assert image is not None
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": name, "source": source},
            "image": image,
            "args": ["--threads", "1"] if real else ["--sim-load-seconds", "2"],
        },
    }


CLIENT = """
import json, sys, httpx
body = {"model": sys.argv[2], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
answer = httpx.post(sys.argv[1], json=body, timeout=240)
print(json.dumps({"status": answer.status_code, "body": answer.json()}))
"""


async def ask_in_cluster(
    cluster: TestCluster, namespace: str, name: str, url: str, model: str
) -> dict[str, Any]:
    """One chat completion sent from a pod in the cluster (through Services, as a client's)."""
    assert cluster.image is not None
    await kubectl(
        cluster, "-n", namespace, "run", name, f"--image={cluster.image}",
        "--restart=Never", "--image-pull-policy=Never", "--command", "--",
        "python", "-c", CLIENT, url, model,
    )  # fmt: skip
    await kubectl(
        cluster, "-n", namespace, "wait", f"pod/{name}", "--timeout=300s",
        "--for=jsonpath={.status.phase}=Succeeded",
    )  # fmt: skip
    _, out, _ = await kubectl(cluster, "-n", namespace, "logs", f"pod/{name}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def chat_url(namespace: str) -> str:
    """Router ``chat``'s chat completions, as a pod of the cluster reaches it (its Service)."""
    return f"http://chat.{namespace}.svc/v1/chat/completions"


async def wait_resident(admin: KubeClient, namespace: str, name: str) -> None:
    """Until pool ``gpu`` says ``name`` holds its slot."""

    async def resident() -> bool:
        found = await admin.get(ModelPool.resource(), "gpu", namespace)
        return (found.get("status") or {}).get("residentMember") == name

    await eventually(resident, timeout=ROLLOUT_TIMEOUT, what=f"{name} resident")


async def pool_behind_router(
    admin: KubeClient,
    cluster: TestCluster,
    namespace: str,
    *,
    proxies: int,
    server: str = "simulator",
    swap_budget: str = "180s",
    b_load_seconds: int | None = None,
    token_seconds: float | None = None,
) -> None:
    """Members ``a`` and ``b`` in pool ``gpu`` (``a`` by default) behind router ``chat`` with
    ``proxies`` proxy replicas, returning once they are Available and ``a`` is resident; with
    ``b_load_seconds``, ``b`` (a simulator) takes that long to load, so its swap lasts; with
    ``token_seconds``, each simulator generates one token in that time (a long stream lasts)."""
    assert cluster.image is not None
    for name, seed in (("a", 1), ("b", 2)):
        body = member(name, cluster, server, f"/models/tiny-{seed}.gguf")
        if name == "b" and b_load_seconds is not None:
            body["spec"]["args"] = ["--sim-load-seconds", str(b_load_seconds)]
        if token_seconds is not None:
            body["spec"]["args"] += ["--sim-token-seconds", str(token_seconds)]
        await admin.create(ISVCS, body, namespace)
    pool = pool_body("gpu", ("a", "b"), default="a", swap_budget=swap_budget)
    await admin.create(ModelPool.resource(), pool, namespace)
    body = router("chat", cluster.image, proxies)
    body["spec"]["backends"] = [{"name": "gpu", "poolRef": {"name": "gpu"}}]
    await admin.create(ROUTERS, body, namespace)
    await wait_available(admin, namespace, "chat", proxies)
    await wait_resident(admin, namespace, "a")


async def test_a_request_through_the_routers_service_swaps_simulator_members(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    await swap_through_the_service(admin, cluster, namespace, "simulator")


async def test_a_request_through_the_routers_service_swaps_real_llama_server_members(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    await swap_through_the_service(admin, cluster, namespace, "llama-server")


async def swap_through_the_service(
    admin: KubeClient, cluster: TestCluster, namespace: str, member_server: str
) -> None:
    """A pool of two members behind a router with three proxy replicas: a request for the parked
    member, sent from a pod through the router's Service, is held, the pool drains the resident
    through the idle gate and brings the target up, and the target answers; the invariant monitor
    watches the member pods in watch order throughout."""
    assert cluster.image is not None
    monitor = PoolInvariantMonitor(
        cluster.admin_config(), namespace, sample_processes=False
    ).start()
    try:
        await pool_behind_router(admin, cluster, namespace, proxies=3, server=member_server)
        url = chat_url(namespace)
        warm = await ask_in_cluster(cluster, namespace, "warm", url, "a")
        assert warm["status"] == 200, warm
        cold = await ask_in_cluster(cluster, namespace, "cold", url, "b")
        assert cold["status"] == 200, cold
        assert cold["body"]["model"] == "b"
        await wait_resident(admin, namespace, "b")
        assert [(c.old, c.new) for c in monitor.residency_changes("gpu")][-1] == ("a", "b")
        # At most one member's pod at any instant (watch order), and settled: b's pod alone.
        monitor.settle()
        monitor.check()
    finally:
        monitor.stop()
