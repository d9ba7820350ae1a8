"""Every change of a pool's slot server goes through the resident's idle gate (docs/modelpool.md,
"Turning the slot server on or off"; issue 46): turned on, turned off, its pod changed, or a
refused pool that asks for one. A long stream through a router-proxy is in flight during each
change and must end whole (every token and its ``[DONE]``).

The operator runs under its ServiceAccount; the node stand-in plays the member pods and the slot
server (the simulator's router mode, a child process per loaded model), each token 20 ms, so a
250-token stream lasts about 5 s. Every test runs under the pool invariant monitor, which counts
a member pod's server and a slot server's child alike: a member's pod beside the slot server's
loaded model is two residents, a violation, as is any second member.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import ModelPool, ModelRouter
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL, slot_server_name
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, PODS, SERVICES
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.memberstreams import ISVC, STREAM_TOKENS, TOKEN_SECONDS, pod_names, streaming
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, start_proxies
from tests.e2e.test_slot_server import (
    MODELS,
    POOL_NAME,
    create_member,
    loaded_models,
    member_body,
    setup_slot_pool,
    slot_pods,
    slot_url,
)
from tests.e2e.test_standin_pods import node_folder
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.anyio

POOL = ModelPool.resource()
TIMEOUT = 60.0


async def pool_status(admin: KubeClient, namespace: str, name: str = POOL_NAME) -> dict[str, Any]:
    return dict((await admin.get(POOL, name, namespace)).get("status") or {})


async def replicas(admin: KubeClient, namespace: str, name: str) -> int | None:
    try:
        found = await admin.get(DEPLOYMENTS, name, namespace)
    except NotFound:
        return None
    return int((found.get("spec") or {}).get("replicas") or 0)


async def exists(admin: KubeClient, resource: Any, namespace: str, name: str) -> bool:
    try:
        await admin.get(resource, name, namespace)
    except NotFound:
        return False
    return True


async def absent(admin: KubeClient, resource: Any, namespace: str, name: str) -> bool:
    return not await exists(admin, resource, namespace, name)


async def answered_by(proxy_url: str, model: str) -> str:
    async with http_client(timeout=TIMEOUT, trust_env=False) as http:
        reply = await http.post(f"{proxy_url}/v1/chat/completions", json=chat(model, max_tokens=4))
        assert reply.status_code == 200, reply.text
        return str(reply.json()["model"])


def patching(
    admin: KubeClient, namespace: str, spec: dict[str, Any]
) -> Callable[[], Awaitable[object]]:
    """A merge patch of the pool's ``spec``, as ``kubectl patch mpool --type merge`` makes."""
    return lambda: admin.patch(POOL, POOL_NAME, {"spec": spec}, namespace)


async def a_resident_as(admin: KubeClient, namespace: str, runtime: str) -> bool:
    """a is the Ready resident, its members running as ``runtime`` (``status.runtime``)."""
    status = await pool_status(admin, namespace)
    return (
        status.get("runtime") == runtime
        and status.get("residentMember") == "a"
        and status.get("phase") == "Ready"
    )


async def mid_stream(
    url: str, change: Callable[[], Awaitable[object]], meanwhile: Callable[[], Awaitable[None]]
) -> None:
    """A 250-token stream to ``model-a`` through the proxy at ``url``: ``change`` is made once it
    streams, ``meanwhile`` checked 1.5 s later while it still streams, and it must end whole."""
    async with streaming(url, "model-a") as (stream, ended):
        await change()
        await anyio.sleep(1.5)
        assert not ended.is_set(), "the stream ended before the check: make it longer"
        await meanwhile()
    assert stream.whole, stream
    assert stream.tokens == STREAM_TOKENS, stream


async def serve_pods_pool(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Members a and b with their weights on the node (what a slot server can mount), in pool
    ``gpu-0`` without a slot server (each member in a pod of its own), a resident; router
    ``router``."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=0.3,
               token_seconds=TOKEN_SECONDS)  # fmt: skip
    for name in ("a", "b"):
        await create_member(admin, namespace, tmp_path, name)
    body = pool_body(POOL_NAME, ("a", "b"), "a", "120s", scheduling={"minResidency": "0s"})
    await admin.create(POOL, body, namespace)
    await admin.create(ModelRouter.resource(), router_body("router", POOL_NAME), namespace)

    async def settled() -> bool:
        status = await pool_status(admin, namespace)
        return status.get("residentMember") == "a" and status.get("phase") == "Ready"

    await eventually(settled, timeout=TIMEOUT, what="a resident in its own pod")


async def test_turning_the_slot_server_on_mid_stream_waits_for_the_resident_then_loads_it(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """``kubectl patch mpool gpu-0 -p '{"spec":{"slotServer":{}}}'`` while a stream to the
    resident is in flight: the resident's pod keeps serving it (its Deployment stays at 1), no
    slot server is created meanwhile, the stream ends whole, and only then is the pod drained and
    the resident loaded in the new server (``status.runtime`` SlotServer) and answering."""
    await serve_pods_pool(cluster, admin, namespace, tmp_path, started)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    old_pods = await pod_names(admin, namespace, "a")
    assert old_pods

    async def resident_kept() -> None:
        assert await replicas(admin, namespace, "a") == 1, "the resident was stopped mid-stream"
        assert await pod_names(admin, namespace, "a") == old_pods
        assert (await pool_status(admin, namespace)).get("runtime") == "Pods"
        assert not await exists(admin, DEPLOYMENTS, namespace, slot_server_name(POOL_NAME)), (
            "the slot server was created beside the resident's pod"
        )

    await mid_stream(proxy.url, patching(admin, namespace, {"slotServer": {}}), resident_kept)
    await eventually(
        lambda: a_resident_as(admin, namespace, "SlotServer"),
        timeout=TIMEOUT,
        what="a resident in the slot server",
    )
    assert await pod_names(admin, namespace, "a") == set(), "a's own pod still runs"
    assert await replicas(admin, namespace, "a") == 0
    async with http_client(timeout=TIMEOUT) as http:
        url = await slot_url(admin, namespace)
        assert await loaded_models(http, url) == {"model-a": "loaded", "model-b": "unloaded"}
    assert await answered_by(proxy.url, "model-a") == "model-a"


async def test_turning_the_slot_server_off_mid_stream_drains_and_removes_it_first(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """``spec.slotServer`` removed while a stream to the model loaded in it is in flight: the
    stream ends whole, the model is unloaded once idle, the server's Deployment, Service and pod
    are gone, and only then does the resident's own pod start (``status.runtime`` Pods) and
    answer. Never two residents: the monitor counts the server's child and the member's pod."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=0.3,
               token_seconds=TOKEN_SECONDS)  # fmt: skip
    await setup_slot_pool(admin, namespace, tmp_path)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)

    async def server_kept() -> None:
        assert await pod_names(admin, namespace, "a") == set(), "a's pod started mid-stream"
        assert await slot_pods(admin, namespace), "the slot server went mid-stream"

    await mid_stream(proxy.url, patching(admin, namespace, {"slotServer": None}), server_kept)
    await eventually(
        lambda: a_resident_as(admin, namespace, "Pods"),
        timeout=TIMEOUT,
        what="a resident in its own pod",
    )
    assert await pod_names(admin, namespace, "a")
    server = slot_server_name(POOL_NAME)
    assert not await exists(admin, DEPLOYMENTS, namespace, server), "the slot server was kept"
    assert not await exists(admin, SERVICES, namespace, server)
    assert await slot_pods(admin, namespace) == []
    assert await answered_by(proxy.url, "model-a") == "model-a"


#: What changes the slot server's pod: an edit of ``spec.slotServer``, or a member added (its
#: weights are one more mount).
SERVER_CHANGES = ("args", "member-added")


@pytest.mark.parametrize("change", SERVER_CHANGES)
async def test_a_change_of_the_slot_servers_pod_mid_stream_waits_for_the_stream(
    change: str,
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """The server's pod must change while a stream to its loaded model is in flight: the pod is
    kept until the stream ended whole, then replaced with nothing loaded, and the resident is
    loaded again in the new pod and answers."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=0.3,
               token_seconds=TOKEN_SECONDS)  # fmt: skip
    await setup_slot_pool(admin, namespace, tmp_path)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    server = await slot_pods(admin, namespace)
    spec: dict[str, Any] = {"slotServer": {"args": ["--parallel", "3"]}}
    if change == "member-added":
        weights = node_folder(tmp_path, f"{MODELS}/c.gguf")
        weights.write_bytes(b"weights the simulator's router plays")
        body = member_body("c")
        body["spec"]["replicas"] = 0  # no pod of its own before it joins
        await admin.create(ISVC, body, namespace)
        pool = await admin.get(POOL, POOL_NAME, namespace)
        spec = {"members": [*pool["spec"]["members"], {"inferenceServiceRef": {"name": "c"}}]}

    async def server_kept() -> None:
        assert await slot_pods(admin, namespace) == server, "the server's pod was replaced"

    await mid_stream(proxy.url, patching(admin, namespace, spec), server_kept)

    async def replaced_and_serving() -> bool:
        status = await pool_status(admin, namespace)
        pods = await slot_pods(admin, namespace)
        return (
            bool(pods)
            and not set(pods) & set(server)
            and status.get("residentMember") == "a"
            and status.get("phase") == "Ready"
        )

    await eventually(replaced_and_serving, timeout=TIMEOUT, what="a loaded in the new server")
    assert await answered_by(proxy.url, "model-a") == "model-a"


async def test_a_refused_slot_server_pool_changes_nothing_while_the_resident_streams(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """A second pool with ``slotServer: {}`` lists the first pool's resident mid-stream: it is
    refused (``MemberInAnotherPool``), no slot server of its own is created, and the resident's
    pod, Deployment and stream are untouched: the stream ends whole and the pod is the same."""
    await serve_pods_pool(cluster, admin, namespace, tmp_path, started)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    old_pods = await pod_names(admin, namespace, "a")
    body = pool_body("a-slot", ("a",), "a", "120s")
    body["spec"]["slotServer"] = {}

    async def refused() -> bool:
        conditions = (await pool_status(admin, namespace, "a-slot")).get("conditions") or ()
        return any(c.get("reason") == "MemberInAnotherPool" for c in conditions)

    async def create_refused() -> None:
        await admin.create(POOL, body, namespace)
        await eventually(refused, timeout=TIMEOUT, what="a-slot refused")

    async def resident_kept() -> None:
        # What a refused pool would do, it would have done by now (1.5 s after it was refused).
        assert await replicas(admin, namespace, "a") == 1, "the refused pool stopped a"
        assert await pod_names(admin, namespace, "a") == old_pods

    await mid_stream(proxy.url, create_refused, resident_kept)
    for resource in (DEPLOYMENTS, SERVICES):
        assert not await exists(admin, resource, namespace, slot_server_name("a-slot")), (
            "a refused pool made a slot server"
        )
    found = await admin.list(PODS, namespace, label_selector=f"{SLOT_SERVER_LABEL}=a-slot")
    assert not found.items
    assert await pod_names(admin, namespace, "a") == old_pods
    assert await answered_by(proxy.url, "model-a") == "model-a"
    # Gone, so that the monitor's settle check judges a by the pool that holds it.
    await admin.delete(POOL, "a-slot", namespace)
    await eventually(
        lambda: absent(admin, POOL, namespace, "a-slot"), timeout=TIMEOUT, what="a-slot gone"
    )
