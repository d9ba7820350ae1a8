"""Day-2 operations on a real cluster, under the pool invariant monitor (member pods watched).

A node drain waits for idle (docs/inferenceservice.md, "Node drains"): ``kubectl drain`` of the
node of a busy pool resident, while a stream is generating through the router's Service, waits
until the stream has ended whole, and the pool serves again afterwards. Only in kind: the Eviction
API's refusal by the member's PodDisruptionBudget (computed by the real disruption controller),
the drain's own retry loop, and the scheduler keeping the next pod off the cordoned node are real
here. The cluster has one node, so the drain is limited to the resident's pods
(``--pod-selector``: the operator, the proxies and the client stay), and the pool serves again
once the node is uncordoned.

A rollout of the router's proxies (``kubectl rollout restart``) while a stream goes through the
router's Service leaves the stream whole: the old proxy drains itself (docs/router.md).

An idle pool gives its slot back (docs/modelpool.md, "Giving an idle slot back") and the next
request through the router's Service brings its member back: the real kubectl shows the ``Idle``
column.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.inferenceservice import CONDITION_UPDATE_PENDING
from controlplane.api.v1alpha1.inferenceservice import update_pending as pending_update
from controlplane.controllers.modelrouter.desired import ROUTER_LABEL, proxy_name
from controlplane.runtime.client import KubeClient
from controlplane.runtime.objects import status_condition
from controlplane.runtime.resources import PODS
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import ROLLOUT_TIMEOUT, wait_available
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kindstreams import start_stream, stream_end, whole
from tests.e2e.kubectl import kubectl
from tests.e2e.test_kind_cluster import ask_in_cluster, chat_url, pool_behind_router
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

MEMBER_LABEL = "inference.modelpool.dev/inferenceservice"
#: 400 tokens of 50 ms: a stream of about 20 s, well past the drain's first eviction.
TOKEN_SECONDS = 0.05
STREAM_TOKENS = 400


async def member_pods(admin: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    found = await admin.list(PODS, namespace, label_selector=f"{MEMBER_LABEL}={name}")
    return [p for p in found.items if not p["metadata"].get("deletionTimestamp")]


async def update_pending(admin: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The ``UpdatePending`` condition while it is True, read as the product reads it."""
    found = await admin.get(InferenceService.resource(), name, namespace)
    if not pending_update(found):
        return None
    return dict(status_condition(found, CONDITION_UPDATE_PENDING) or {})


async def test_kubectl_drain_of_a_busy_residents_node_waits_for_its_stream(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    monitor = PoolInvariantMonitor(
        cluster.admin_config(), namespace, sample_processes=False
    ).start()
    node = None
    try:
        await pool_behind_router(admin, cluster, namespace, proxies=1, token_seconds=TOKEN_SECONDS)
        url = chat_url(namespace)
        await start_stream(cluster, namespace, "long", url, "a", STREAM_TOKENS)
        (pod,) = await member_pods(admin, namespace, "a")
        node = pod["spec"]["nodeName"]
        drained: dict[str, Any] = {}

        async def drain() -> None:
            drained["result"] = await kubectl(
                cluster, "drain", node, f"--pod-selector={MEMBER_LABEL}=a",
                f"--timeout={int(ROLLOUT_TIMEOUT)}s", check=False,
            )  # fmt: skip

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(drain)
            pending = await eventually(
                lambda: update_pending(admin, namespace, "a"), timeout=60, what="a pending a move"
            )
            assert pending["reason"] == "WaitingForPool", pending
            assert node in pending["message"], pending
            assert not drained, f"the drain ended while a served a stream: {drained}"
            end = await stream_end(cluster, namespace, "long")
            assert whole(end, STREAM_TOKENS), end
        code, out, err = drained["result"]
        assert code == 0, f"kubectl drain failed:\n{out}\n{err}"
        assert pod["metadata"]["name"] in out + err, out + err
        uids = {p["metadata"]["uid"] for p in await member_pods(admin, namespace, "a")}
        assert pod["metadata"]["uid"] not in uids, "the old pod is still there"
    finally:
        if node is not None:
            await kubectl(cluster, "uncordon", node, check=False)
    try:
        again = await ask_in_cluster(cluster, namespace, "after", url, "a")
        assert again["status"] == 200, again
        assert again["body"]["model"] == "a"
        monitor.settle()
        monitor.check()
    finally:
        monitor.stop()


async def proxy_pods(admin: KubeClient, namespace: str, router: str) -> list[dict[str, Any]]:
    selector = f"{ROUTER_LABEL}={router}"
    return list((await admin.list(PODS, namespace, label_selector=selector)).items)


async def test_a_rollout_of_the_proxies_mid_stream_leaves_the_stream_whole(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    """``kubectl rollout restart`` of the router's proxies while a stream goes through its
    Service: the new proxy comes up first (``maxSurge: 1``, ``maxUnavailable: 0``), the old one
    stops being Ready but relays the stream to its end (its grace period is the ModelRouter's,
    600 s by default), and the router serves through the new one after."""
    await pool_behind_router(admin, cluster, namespace, proxies=1, token_seconds=TOKEN_SECONDS)
    url = chat_url(namespace)
    (old,) = await proxy_pods(admin, namespace, "chat")
    await start_stream(cluster, namespace, "long", url, "a", STREAM_TOKENS)
    await kubectl(
        cluster, "-n", namespace, "rollout", "restart", f"deployment/{proxy_name('chat')}"
    )

    async def old_stopping() -> bool:
        pods = {p["metadata"]["uid"]: p for p in await proxy_pods(admin, namespace, "chat")}
        found = pods.get(old["metadata"]["uid"])
        return found is None or bool(found["metadata"].get("deletionTimestamp"))

    await eventually(old_stopping, timeout=ROLLOUT_TIMEOUT, what="the old proxy stopping")
    _, phase, _ = await kubectl(
        cluster, "-n", namespace, "get", "pod/long", "-o", "jsonpath={.status.phase}"
    )
    assert phase == "Running", f"the stream ended before the old proxy was stopped: {phase}"
    end = await stream_end(cluster, namespace, "long")
    assert whole(end, STREAM_TOKENS), end
    await wait_available(admin, namespace, "chat", 1)
    uids = {p["metadata"]["uid"] for p in await proxy_pods(admin, namespace, "chat")}
    assert old["metadata"]["uid"] not in uids, "the old proxy is still there"
    again = await ask_in_cluster(cluster, namespace, "after", url, "a")
    assert again["status"] == 200, again


async def test_an_idle_pool_gives_its_slot_back_and_the_next_request_brings_it_back(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    """``idleAfter: 5s`` with ``Release`` on a pool behind the router's Service: once nothing is
    asked, the resident's pod goes and the pool is ``Idle`` (shown by ``kubectl get -o wide``'s
    ``Idle`` column); a request sent from a pod through the Service is held and answered by the
    member brought back. The invariant monitor watches the member pods throughout."""
    monitor = PoolInvariantMonitor(
        cluster.admin_config(), namespace, sample_processes=False
    ).start()
    try:
        await pool_behind_router(admin, cluster, namespace, proxies=1)
        idle = {"spec": {"scheduling": {"idleAfter": "5s", "idleAction": "Release"}}}
        await admin.patch(ModelPool.resource(), "gpu", idle, namespace)

        async def given_back() -> bool:
            pool = await admin.get(ModelPool.resource(), "gpu", namespace)
            phase = (pool.get("status") or {}).get("phase")
            return phase == "Idle" and not await member_pods(admin, namespace, "a")

        await eventually(given_back, timeout=ROLLOUT_TIMEOUT, what="pool gpu Idle, a's pod gone")
        _, shown, _ = await kubectl(cluster, "-n", namespace, "get", "mpool", "gpu", "-o", "wide")
        header, row = shown.splitlines()[:2]
        assert "IDLE" in header.split(), shown
        assert "Idle" in row.split(), shown

        back = await ask_in_cluster(cluster, namespace, "after-idle", chat_url(namespace), "a")
        assert back["status"] == 200, back
        assert back["body"]["model"] == "a"
        monitor.settle()
        monitor.check()
    finally:
        monitor.stop()
