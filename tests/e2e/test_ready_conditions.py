"""``kubectl wait --for=condition=Ready`` on pools and routers, against a real API server.

What the two ``Ready`` conditions mean (docs/modelpool.md and docs/modelrouter.md, "Ready"): a
pool is Ready while it can serve or hold-and-serve a request, cold and mid-swap included, and not
while a member is missing; a router is Ready when its proxy is available and every backend is
ready. The waits are the kubectl built with the control plane, as a user or a script runs it; the
operator runs under its own ServiceAccount; the node stand-in gives members pods backed by
simulators. Nothing is asserted on timing beyond generous deadlines.
"""

from __future__ import annotations

from typing import Any

from controlplane.runtime.client import KubeClient
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import kubectl
from tests.e2e.operator_process import NodeStandInProcess, OperatorProcess
from tests.e2e.test_modelpool import (
    ISVC,
    POOL,
    TIMEOUT,
    condition,
    isvc_body,
    node,  # noqa: F401  (the fixture)
    recorded,
    settled,
    take_lease,
    wait_pool,
)
from tests.e2e.test_modelrouter import ROUTERS, mark_available
from tests.e2e.waiting import eventually

Object = dict[str, Any]
#: How long a wait that must not succeed is given: long enough for the operator to have acted.
REFUSED_WAIT = "3s"


async def wait_for(cluster: TestCluster, namespace: str, target: str, wanted: str = "Ready") -> str:
    """``kubectl wait --for=condition=<wanted>`` on ``target``; fails the test if it times out."""
    _, out, _ = await kubectl(
        cluster, "wait", f"--for=condition={wanted}", f"--timeout={TIMEOUT:.0f}s",
        "-n", namespace, target,
    )  # fmt: skip
    return out


async def wait_refused(cluster: TestCluster, namespace: str, target: str) -> None:
    """``kubectl wait --for=condition=Ready`` on ``target`` times out (exit status not 0)."""
    code, out, err = await kubectl(
        cluster, "wait", "--for=condition=Ready", f"--timeout={REFUSED_WAIT}",
        "-n", namespace, target, check=False,
    )  # fmt: skip
    assert code != 0, f"kubectl wait said {target} is Ready:\n{out}{err}"
    assert "timed out" in err, err


def ready_of(obj: Object) -> tuple[str, str, str]:
    found = condition(obj, "Ready")
    assert found["observedGeneration"] == obj["metadata"]["generation"], found
    return found["status"], found["reason"], found["message"]


async def router_ready(
    admin: KubeClient, namespace: str, name: str, status: str, reason: str
) -> Object:
    async def reached() -> Object | None:
        found = await admin.get(ROUTERS, name, namespace)
        conditions = (found.get("status") or {}).get("conditions") or ()
        ready = next((c for c in conditions if c["type"] == "Ready"), None)
        return found if ready and (ready["status"], ready["reason"]) == (status, reason) else None

    return await eventually(reached, timeout=TIMEOUT, what=f"{name} Ready={status} {reason}")


async def test_a_pool_is_ready_for_kubectl_wait_and_stays_ready_through_a_swap(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,  # noqa: F811
) -> None:
    for name in ("a", "b"):
        await admin.create(ISVC, isvc_body(name), namespace)
    await admin.create(POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
    assert "condition met" in await wait_for(cluster, namespace, "mpool/gpu")
    pool = await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
    status, reason, _ = ready_of(pool)
    assert (status, reason) == ("True", "AcceptingRequests")
    before = condition(pool, "Ready")

    # A swap a -> b (the test holds the Lease, as the activator would): every status the pool
    # went through says Ready, the same condition, its transition time unmoved.
    async with recorded(admin, namespace) as events:
        await take_lease(admin, namespace, "gpu", target="b")
        await wait_pool(admin, namespace, "gpu", settled("b"), "b to be resident")
    versions = [o for kind, _, o in events if kind == "pool" and o["metadata"]["name"] == "gpu"]
    phases = [(o.get("status") or {}).get("phase") for o in versions]
    assert "Swapping" in phases, phases
    for version in versions:
        assert condition(version, "Ready") == before, (version["status"]["phase"], phases)
    assert "condition met" in await wait_for(cluster, namespace, "mpool/gpu")


async def test_a_pool_with_a_missing_member_is_not_ready_and_says_which(
    cluster: TestCluster, admin: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await admin.create(ISVC, isvc_body("x"), namespace)
    await admin.create(POOL, pool_body("broken", ["x", "ghost"]), namespace)
    await wait_for(cluster, namespace, "mpool/broken", "Ready=False")
    await wait_refused(cluster, namespace, "mpool/broken")
    pool = await admin.get(POOL, "broken", namespace)
    status, reason, message = ready_of(pool)
    assert (status, reason) == ("False", "MembersNotFound")
    assert "ghost" in message
    assert pool["status"]["phase"] == "Degraded"

    # Once the member exists the pool can be granted: Ready, although cold (no default).
    await admin.create(ISVC, isvc_body("ghost"), namespace)
    await wait_for(cluster, namespace, "mpool/broken")
    pool = await admin.get(POOL, "broken", namespace)
    assert ready_of(pool)[:2] == ("True", "AcceptingRequests")
    assert pool["status"]["phase"] == "Pending", "a cold pool is Ready, not resident"


async def test_a_router_is_ready_once_its_proxy_is_available_and_its_pool_exists(
    cluster: TestCluster, admin: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await admin.create(ROUTERS, router_body("edge", "gpu"), namespace)
    # No pod runs the proxy here: not available, and its pool does not exist either.
    router = await router_ready(admin, namespace, "edge", "False", "ProxyNotAvailable")
    _, _, message = ready_of(router)
    assert "Available is False" in message
    assert "BackendsReady is False (BackendMissing" in message
    await wait_refused(cluster, namespace, "mr/edge")

    # The proxy available (as a deployment controller would report it): only the pool is missing.
    await mark_available(admin, namespace, "edge-proxy")
    router = await router_ready(admin, namespace, "edge", "False", "BackendsNotReady")
    assert "ModelPool gpu not found" in ready_of(router)[2]
    await wait_refused(cluster, namespace, "mr/edge")

    await admin.create(ISVC, isvc_body("a"), namespace)
    await admin.create(POOL, pool_body("gpu", ["a"]), namespace)
    assert "condition met" in await wait_for(cluster, namespace, "mr/edge")
    router = await admin.get(ROUTERS, "edge", namespace)
    assert ready_of(router)[:2] == ("True", "Serving")
    assert router["status"]["phase"] == "Ready"
