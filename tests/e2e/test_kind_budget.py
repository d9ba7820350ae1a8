"""Several residents within a budget in a real cluster (docs/modelpool.md, "Several residents").

The local tier shows the policy (``test_budget.py``); this shows the budget against a real
kubelet, deployment controller and Services: pool ``gpu`` has three simulator members and a
budget of two (``spec.capacity.members: 2``), behind a router with two proxy replicas, asked from
a pod through the router's Service. ``b`` comes up beside ``a`` (``a``'s pod untouched); ``c``
then takes the seat of one of them. The invariant monitor reads the member pods in watch order:
never three members with a pod not yet gone, Terminating ones included.
"""

from __future__ import annotations

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import PODS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import ROLLOUT_TIMEOUT, wait_available
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.test_kind_cluster import ask_in_cluster, chat_url, member, router
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

ISVCS = InferenceService.resource()
POOLS = ModelPool.resource()


async def residents(admin: KubeClient, namespace: str) -> list[str]:
    status = (await admin.get(POOLS, "gpu", namespace)).get("status") or {}
    return [str(m) for m in status.get("residents") or ()]


async def pods_of(admin: KubeClient, namespace: str, name: str) -> list[str]:
    selector = f"inference.modelpool.dev/inferenceservice={name}"
    found = await admin.list(PODS, namespace, label_selector=selector)
    return sorted(p["metadata"]["name"] for p in found.items)


async def test_a_budget_of_two_keeps_two_members_and_makes_room_for_a_third(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    assert cluster.image is not None
    monitor = PoolInvariantMonitor(
        cluster.admin_config(), namespace, sample_processes=False
    ).start()
    try:
        for name, seed in (("a", 1), ("b", 2), ("c", 1)):
            await admin.create(
                ISVCS, member(name, cluster, "simulator", f"/models/tiny-{seed}.gguf"), namespace
            )
        pool = pool_body("gpu", ("a", "b", "c"), default="a", swap_budget="180s",
                         scheduling={"minResidency": "0s"})  # fmt: skip
        pool["spec"]["capacity"] = {"members": 2}
        await admin.create(POOLS, pool, namespace)
        body = router("chat", cluster.image, 2)
        body["spec"]["backends"] = [{"name": "gpu", "poolRef": {"name": "gpu"}}]
        await admin.create(ModelRouter.resource(), body, namespace)
        await wait_available(admin, namespace, "chat", 2)

        async def only_a() -> bool:
            return await residents(admin, namespace) == ["a"]

        await eventually(only_a, timeout=ROLLOUT_TIMEOUT, what="a resident")
        url = chat_url(namespace)
        a_pods = await pods_of(admin, namespace, "a")
        answer = await ask_in_cluster(cluster, namespace, "ask-b", url, "b")
        assert answer["status"] == 200, answer
        assert answer["body"]["model"] == "b"

        async def a_and_b() -> bool:
            return await residents(admin, namespace) == ["a", "b"]

        await eventually(a_and_b, timeout=60, what="a and b resident together")
        assert await pods_of(admin, namespace, "a") == a_pods, "a was restarted for b"

        answer = await ask_in_cluster(cluster, namespace, "ask-c", url, "c")
        assert answer["status"] == 200, answer
        assert answer["body"]["model"] == "c"

        async def c_and_one_other() -> list[str] | None:
            found = await residents(admin, namespace)
            return found if "c" in found and len(found) == 2 else None

        kept = await eventually(c_and_one_other, timeout=60, what="c resident beside one other")
        (left,) = {"a", "b"} - set(kept)

        async def pod_gone() -> bool:
            return await pods_of(admin, namespace, left) == []

        await eventually(pod_gone, timeout=60, what=f"{left}'s pod gone")

        async def two_used() -> bool:
            status = (await admin.get(POOLS, "gpu", namespace)).get("status") or {}
            return status.get("budget") == {"capacity": "2", "used": "2"}

        # the evicted member's share counts until its Deployment, too, says 0 replicas
        await eventually(two_used, timeout=60, what="the budget showing 2 of 2 used")
        monitor.settle()
        monitor.check()
    finally:
        monitor.stop()
