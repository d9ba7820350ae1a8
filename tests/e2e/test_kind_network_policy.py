"""The closed network, enforced: in the kind tier a NetworkPolicy implementation runs (kube-router's
network policy controller, ``hack/kind-network-policies.yaml``; the node's bridge CNI enforces
nothing), so the policies the operator writes and installs are obeyed.

A pool of two simulator members behind a router: a plain pod of the members' namespace is refused
on the resident member's port (through its Service and at its pod's address), while it reaches the
router and the operator's metrics port; a pod that carries the router-proxy's labels reaches the
member, so what refuses is the policy and not the port; the operator's health port admits nobody
from the pod network; and a request through the router swaps the pool, so the proxies reach the
members and the operator's idle probe on ``/slots`` still passes. The test fails, never skips,
when the enforcement is not running.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import NETWORK_POLICIES, PODS, Resource
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import OPERATOR_LABEL, ROLLOUT_TIMEOUT, wait_available
from tests.e2e.kubectl import kubectl
from tests.e2e.test_kind_cluster import ask_in_cluster, member, router
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

DAEMON_SETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
#: The enforcer the kind tier installs (tests/e2e/clusters.py, ``enforce_network_policies``).
ENFORCER_NAMESPACE, ENFORCER = "kube-system", "kube-router"
ENFORCER_TIMEOUT = 120.0
#: The simulator members' port (the InferenceService default).
MEMBER_PORT = 8080
#: The router-proxy pods' labels that members' policies admit (docs/network.md).
PROXY_LABELS = "app.kubernetes.io/name=router-proxy,app.kubernetes.io/managed-by=modelpool-operator"

#: How long a pod that should be let through keeps trying: the enforcer admits a new pod's address
#: only once it has handled the pod's event, which a probe run at the container's start can beat
#: (seconds under load). A pod that should be refused tries once.
ADMISSION_PATIENCE = 60

#: Run in a pod: for each ``HOST:PORT/PATH``, connect (5 s), send a GET and read the status line;
#: the first argument is how many seconds to keep trying a target that does not answer.
PROBE = """
import json, socket, sys, time
patience, targets = float(sys.argv[1]), sys.argv[2:]
found = {}
for target in targets:
    address, _, path = target.partition("/")
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + patience
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(f"GET /{path} HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n".encode())
                conn.settimeout(10)
                head = conn.recv(64).decode(errors="replace").split("\\r\\n")[0]
                found[target] = "answered " + head
        except TimeoutError:
            found[target] = "timed out"
        except ConnectionRefusedError:
            found[target] = "refused"
        except OSError as err:
            found[target] = f"failed: {err}"
        if found[target].startswith("answered") or time.monotonic() >= deadline:
            break
        time.sleep(1)
print(json.dumps(found))
"""


async def wait_enforcement(admin: KubeClient) -> None:
    """Fail (never skip) unless the enforcer's DaemonSet has every pod Ready."""

    async def ready() -> bool:
        found = await admin.get(DAEMON_SETS, ENFORCER, ENFORCER_NAMESPACE)
        status = found.get("status") or {}
        wanted = int(status.get("desiredNumberScheduled") or 0)
        return wanted > 0 and int(status.get("numberReady") or 0) == wanted

    try:
        await eventually(ready, timeout=ENFORCER_TIMEOUT, interval=1, what="the enforcer Ready")
    except AssertionError as err:
        pytest.fail(
            f"NetworkPolicies are not enforced in this cluster: DaemonSet "
            f"{ENFORCER_NAMESPACE}/{ENFORCER} is not Ready ({err}); nothing would refuse a "
            "connection, so this test cannot prove the closed network (docs/network.md)"
        )


async def probe_from_pod(
    cluster: TestCluster,
    namespace: str,
    name: str,
    targets: list[str],
    labels: str = "",
    patience: float = 0,
) -> dict[str, str]:
    """What a pod of ``namespace`` (with ``labels``) gets from each target, trying one that does
    not answer for ``patience`` seconds."""
    assert cluster.image is not None
    await kubectl(
        cluster, "-n", namespace, "run", name, f"--image={cluster.image}",
        *([f"--labels={labels}"] if labels else []),
        "--restart=Never", "--image-pull-policy=Never", "--command", "--",
        "python", "-c", PROBE, str(patience), *targets,
    )  # fmt: skip
    await kubectl(
        cluster, "-n", namespace, "wait", f"pod/{name}", "--timeout=120s",
        "--for=jsonpath={.status.phase}=Succeeded",
    )  # fmt: skip
    _, out, _ = await kubectl(cluster, "-n", namespace, "logs", f"pod/{name}")
    return dict(json.loads(out.strip().splitlines()[-1]))


async def pod_ip(admin: KubeClient, namespace: str, selector: str) -> str:
    async def found() -> str | None:
        pods = await admin.list(PODS, namespace, label_selector=selector)
        running = [p for p in pods.items if (p.get("status") or {}).get("phase") == "Running"]
        return str(running[0]["status"]["podIP"]) if running else None

    return await eventually(found, timeout=ROLLOUT_TIMEOUT, what=f"a pod of {selector}")


async def test_only_proxies_and_the_operator_reach_a_member(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    await wait_enforcement(admin)
    for name, seed in (("a", 1), ("b", 2)):
        body = member(name, cluster, "simulator", f"/models/tiny-{seed}.gguf")
        await admin.create(InferenceService.resource(), body, namespace)
    await admin.create(ModelPool.resource(), pool_body("gpu", ("a", "b"), "a", "180s"), namespace)
    body = router("chat", cluster.image, 1)
    body["spec"]["backends"] = [{"name": "gpu", "poolRef": {"name": "gpu"}}]
    await admin.create(ModelRouter.resource(), body, namespace)
    await wait_available(admin, namespace, "chat", 1)

    async def ready(name: str) -> bool:
        found = await admin.get(InferenceService.resource(), name, namespace)
        return (found.get("status") or {}).get("phase") == "Ready"

    await eventually(lambda: ready("a"), timeout=ROLLOUT_TIMEOUT, what="member a Ready")

    async def policy() -> dict[str, Any] | None:
        try:
            return await admin.get(NETWORK_POLICIES, "a", namespace)
        except NotFound:
            return None

    await eventually(policy, timeout=ROLLOUT_TIMEOUT, what="member a's NetworkPolicy")
    member_ip = await pod_ip(admin, namespace, f"{ISVC_LABEL}=a")
    operator_ip = await pod_ip(admin, OPERATOR_NAMESPACE, OPERATOR_LABEL)
    by_service = f"a.{namespace}.svc:{MEMBER_PORT}/slots"
    by_address = f"{member_ip}:{MEMBER_PORT}/slots"
    routers = f"chat.{namespace}.svc:80/healthz"
    metrics = f"{operator_ip}:8080/metrics"
    health = f"{operator_ip}:8081/healthz"

    plain = await probe_from_pod(
        cluster, namespace, "plain", [by_service, by_address, routers, metrics, health]
    )
    print(f"a plain pod of the members' namespace: {json.dumps(plain, indent=1)}")
    # The pod's network works: the router and the operator's metrics answer it...
    assert plain[routers].startswith("answered HTTP/1.1 200"), plain
    assert plain[metrics].startswith("answered HTTP/1.1 200"), plain
    # ...but the member's port does not, by name or by address, nor the operator's health port.
    # (kube-router rejects: "refused"; an implementation that drops makes it "timed out".)
    for target in (by_service, by_address, health):
        assert plain[target] in ("refused", "timed out"), (target, plain)

    # The same pod with the proxies' labels is let through: the policy refuses, not the port.
    alike = await probe_from_pod(
        cluster, namespace, "proxy-alike", [by_service], PROXY_LABELS, ADMISSION_PATIENCE
    )
    assert alike[by_service].startswith("answered HTTP/1.1 200"), alike

    # Through the router: the proxy reaches a, then b after a swap whose drain passed the
    # operator's idle probe on a's /slots.
    url = f"http://chat.{namespace}.svc/v1/chat/completions"
    warm = await ask_in_cluster(cluster, namespace, "warm", url, "a")
    assert warm["status"] == 200, warm
    cold = await ask_in_cluster(cluster, namespace, "cold", url, "b")
    assert cold["status"] == 200, cold
    assert cold["body"]["model"] == "b"

    async def resident_b() -> bool:
        found = await admin.get(ModelPool.resource(), "gpu", namespace)
        return (found.get("status") or {}).get("residentMember") == "b"

    await eventually(resident_b, timeout=ROLLOUT_TIMEOUT, what="b resident")
