"""A pool with a slot server in a real cluster (docs/modelpool.md, "One slot server").

The local tier (``test_slot_server.py``) plays the slot server's pod with the node stand-in; only
a real kubelet shows that the Deployment the pool writes runs: the pod mounts each member's
weights from a claim (``pvc://``, one claim mounted once per member with a ``subPath``), the
image's router mode finds them in its models folder, the members' Services select the server's
pod, and the router's proxies reach it through them. Pool ``gpu`` has members ``a`` and ``b``
whose weights are two files of one filled claim, a slot server on the simulator image the kind
tier gives members, and router ``chat`` with two proxy replicas in front, asked from a pod through
the router's Service: ``a``, then ``b`` (a swap), then ``a`` again.

What must hold: each answer comes from the model asked; the slot server's pod is the same pod
(uid) throughout; no member pod ever exists (the invariant monitor watches member pods in watch
order, and is asked at the end); the members' own Deployments stay at 0; the members' phases say
which model the server holds.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.inferenceservice.status import REASON_LOADED, REASON_NOT_LOADED
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, PODS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import ROLLOUT_TIMEOUT, wait_available
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kindweights import copied_into_claim, filled_claim, remove_volume
from tests.e2e.test_kind_cluster import ask_in_cluster, chat_url, member, router
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

ISVCS = InferenceService.resource()
POOLS = ModelPool.resource()
POOL = "gpu"
MEMBERS = ("a", "b")


async def pool_status(admin: KubeClient, namespace: str) -> dict[str, Any]:
    return dict((await admin.get(POOLS, POOL, namespace)).get("status") or {})


async def slot_pod_uids(admin: KubeClient, namespace: str) -> list[str]:
    """The uids of the pool's slot server pods (one, if the server was never replaced)."""
    found = await admin.list(PODS, namespace, label_selector=f"{SLOT_SERVER_LABEL}={POOL}")
    return sorted(p["metadata"]["uid"] for p in found.items)


async def member_pods(admin: KubeClient, namespace: str) -> list[str]:
    """Every pod carrying a member's label: a slot server's members must never have one."""
    found = await admin.list(PODS, namespace, label_selector=ISVC_LABEL)
    return sorted(p["metadata"]["name"] for p in found.items)


async def member_replicas(admin: KubeClient, namespace: str, name: str) -> int:
    """The member's own Deployment's replicas (0 when it has none)."""
    try:
        found = await admin.get(DEPLOYMENTS, name, namespace)
    except NotFound:
        return 0
    return int((found.get("spec") or {}).get("replicas") or 0)


async def phases(admin: KubeClient, namespace: str) -> dict[str, tuple[str, str]]:
    """Each member's phase and its Ready condition's reason."""
    found: dict[str, tuple[str, str]] = {}
    for name in MEMBERS:
        status = (await admin.get(ISVCS, name, namespace)).get("status") or {}
        conditions = status.get("conditions") or ()
        ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        found[name] = (str(status.get("phase")), str(ready.get("reason")))
    return found


async def wait_loaded(admin: KubeClient, namespace: str, loaded: str) -> None:
    """Until the pool holds ``loaded`` (Ready) and the members' phases say so: ``loaded`` Ready
    in the slot server, the other not loaded."""
    (other,) = set(MEMBERS) - {loaded}
    wanted = {loaded: ("Ready", REASON_LOADED), other: ("Stopped", REASON_NOT_LOADED)}

    async def settled() -> bool:
        status = await pool_status(admin, namespace)
        if (status.get("residentMember"), status.get("phase")) != (loaded, "Ready"):
            return False
        return await phases(admin, namespace) == wanted

    await eventually(
        settled, timeout=ROLLOUT_TIMEOUT, what=f"{loaded} loaded in the slot server, {other} not"
    )


async def test_a_slot_server_swaps_models_in_one_pod_through_the_routers_service(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    assert cluster.image is not None
    assert cluster.sim_image is not None
    monitor = PoolInvariantMonitor(
        cluster.admin_config(), namespace, sample_processes=False
    ).start()
    try:
        sources = {
            "a": await filled_claim(admin, cluster, namespace),
            "b": await copied_into_claim(
                admin, cluster, namespace, "tiny-2.gguf", "models/tiny-2.gguf"
            ),
        }
        assert sources["a"] != sources["b"]
        for name in MEMBERS:
            await admin.create(ISVCS, member(name, cluster, "simulator", sources[name]), namespace)
        pool = pool_body(POOL, MEMBERS, default="a", swap_budget="180s",
                         scheduling={"minResidency": "0s"})  # fmt: skip
        # The simulator's router mode passes --sim-load-seconds on to each child: a load that
        # takes a moment, so the proxy really holds the request across the swap.
        pool["spec"]["slotServer"] = {
            "image": cluster.sim_image,
            "args": ["--sim-load-seconds", "1"],
        }
        await admin.create(POOLS, pool, namespace)
        body = router("chat", cluster.image, 2)
        body["spec"]["backends"] = [{"name": POOL, "poolRef": {"name": POOL}}]
        await admin.create(ModelRouter.resource(), body, namespace)
        await wait_available(admin, namespace, "chat", 2)
        await wait_loaded(admin, namespace, "a")
        server = await slot_pod_uids(admin, namespace)
        assert len(server) == 1, server

        url = chat_url(namespace)
        for step, model in enumerate(("a", "b", "a")):
            answer = await ask_in_cluster(cluster, namespace, f"ask-{step}-{model}", url, model)
            assert answer["status"] == 200, answer
            assert answer["body"]["model"] == model, answer
            await wait_loaded(admin, namespace, model)
            assert await slot_pod_uids(admin, namespace) == server, "the slot server was replaced"
            assert await member_pods(admin, namespace) == [], "a member ran in a pod of its own"
            for name in MEMBERS:
                assert await member_replicas(admin, namespace, name) == 0, name

        changes = [(c.old, c.new) for c in monitor.residency_changes(POOL)]
        assert changes[-2:] == [("a", "b"), ("b", "a")], changes
        # The watch delivers what it saw in order; a moment for its last events to arrive.
        await anyio.sleep(1)
        pod_entries = [e.describe() for e in list(monitor.timeline) if e.source == "pod"]
        assert pod_entries == [], f"the monitor saw member pods: {pod_entries}"
        assert monitor.running_members(POOL) == {}
        monitor.settle()
        monitor.check()
    finally:
        monitor.stop()
        with anyio.CancelScope(shield=True):
            await remove_volume(admin, namespace)
