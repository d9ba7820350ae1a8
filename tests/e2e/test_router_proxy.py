"""The router-proxy process against a real API server, the operator and the node stand-in.

The operator runs under its ServiceAccount (pool controller), the node stand-in plays the kubelet
(simulators behind EndpointSlices), and one or two ``controlplane router-proxy`` processes run
under a ServiceAccount bound by the test to a Role made of ``ROUTER_PROXY_RULES`` only. The pool
has members a (model ``model-a``, resident) and b (``model-b``); the ModelRouter has one
``poolRef`` backend. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.api.v1alpha1.activation import pool_lease_name
from controlplane.local.system import RouterProxyProcess
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, LEASES
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import (
    LocalProcess,
    OperatorProcess,
    metric_sum,
    start_node,
)
from tests.e2e.proxies import chat, isvc_body, start_proxies
from tests.e2e.test_modelpool import as_written, recorded, rv, slots
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
ROUTER = ModelRouter.resource()
TIMEOUT = 60.0
PROXY_ACCOUNT = "e2e-router-proxy"
Object = dict[str, Any]


async def setup_pool(
    admin: KubeClient, namespace: str, budget: str, b_load_seconds: float | None = None
) -> None:
    """Members a (resident) and b, pool ``gpu-0`` and router ``router``, settled."""
    await admin.create(ISVC, isvc_body("a", 1), namespace)
    await admin.create(ISVC, isvc_body("b", 0, b_load_seconds), namespace)
    await admin.create(POOL, pool_body("gpu-0", ("a", "b"), "a", budget), namespace)
    await admin.create(ROUTER, router_body("router", "gpu-0"), namespace)

    async def resident_a() -> bool:
        status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
        return status.get("residentMember") == "a" and status.get("phase") == "Ready"

    await eventually(resident_a, timeout=TIMEOUT, what="a resident and Ready")


async def lease_holder(admin: KubeClient, namespace: str) -> str | None:
    try:
        lease = await admin.get(LEASES, pool_lease_name("gpu-0"), namespace)
    except NotFound:
        return None
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def test_fast_path_swap_coalescing_streaming_and_errors(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=1.5, token_seconds=0.05
    )
    await setup_pool(admin, namespace, "60s")
    one, two = await start_proxies(cluster, admin, namespace, tmp_path, started, 2)
    async with http_client(timeout=90) as http:
        # The resident member: the fast path, no Lease written.
        answer = await http.post(f"{one.url}/v1/chat/completions", json=chat("model-a"))
        assert answer.status_code == 200, answer.text
        assert await lease_holder(admin, namespace) is None

        # Malformed and unknown: OpenAI-style errors.
        bad = await http.post(f"{one.url}/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400
        assert bad.json()["error"]["type"] == "invalid_request_error"
        unknown = await http.post(f"{one.url}/v1/chat/completions", json=chat("gpt-9"))
        assert unknown.status_code == 404
        assert set(unknown.json()["error"]) == {"message", "type", "code"}

        # b on both replicas at once: held, one swap, every request answered by b.
        answers: list[httpx.Response] = []

        async def ask(proxy: RouterProxyProcess) -> None:
            answers.append(
                await http.post(f"{proxy.url}/v1/chat/completions", json=chat("model-b"))
            )

        async with anyio.create_task_group() as group:
            for proxy in (one, two, one, two):
                group.start_soon(ask, proxy)
        assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]

        # Held requests go to b once it answers /health; residentMember follows b's Ready.
        async def b_resident() -> bool:
            pool = await admin.get(POOL, "gpu-0", namespace)
            return (pool.get("status") or {}).get("residentMember") == "b"

        await eventually(b_resident, timeout=TIMEOUT, what="b resident after the swap")

        async def released() -> bool:
            return await lease_holder(admin, namespace) == ""

        await eventually(released, timeout=TIMEOUT, what="the Lease released after the swap")
        counts = [
            await metric_sum(f"{p.url}/metrics", "modelpool_swaps_total", pool="gpu-0", to="b")
            for p in (one, two)
        ]
        assert sorted(counts) == [0.0, 1.0], counts

        # A streamed completion passes through chunk by chunk (b is now resident: fast path).
        arrivals: list[float] = []
        async with http.stream(
            "POST",
            f"{two.url}/v1/chat/completions",
            json=chat("model-b", stream=True, max_tokens=12),
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for line in stream.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    arrivals.append(time.monotonic())
        assert len(arrivals) >= 3
        assert arrivals[-1] - arrivals[0] > 0.1  # tokens came over time, not in one buffer


async def test_a_member_slower_than_the_budget_is_reached_by_honouring_retry_after(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Budget 2 s, load 6 s: each 503 says when to come back, the swap lingers for that retry, and
    a client that honours ``Retry-After`` gets its answer from the model it asked for."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=6, token_seconds=0.05)
    await setup_pool(admin, namespace, "2s")
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    answers = []
    async with http_client(timeout=30) as http:
        for _ in range(6):
            answer = await http.post(f"{proxy.url}/v1/chat/completions", json=chat("model-b"))
            answers.append(answer)
            if answer.status_code != 503:
                break
            assert answer.json()["error"]["code"] == "pool_activation_timeout"
            await anyio.sleep(int(answer.headers["Retry-After"]))
    assert answers[0].status_code == 503
    assert answers[-1].status_code == 200, answers[-1].text
    assert answers[-1].json()["model"] == "model-b"
    assert "releasing the intent" not in proxy.output()  # never abandoned

    async def counted_once() -> bool:  # the swap ends (and counts) once the pool names b resident
        return await metric_sum(f"{proxy.url}/metrics", "modelpool_swaps_total") == 1.0

    await eventually(counted_once, timeout=10, what="the swap counted once")


async def test_a_swap_nobody_comes_back_for_is_abandoned_released_and_undone_by_the_pool(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """The proxy only releases the Lease; the pool falls back to its resident a and releases b
    itself (b is loading, not serving: at once). Nobody writes b."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=1, token_seconds=0.05)
    await setup_pool(admin, namespace, "2s", b_load_seconds=60)
    created_b = await admin.get(ISVC, "b", namespace)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    async with recorded(admin, namespace) as events:
        async with http_client(timeout=30) as http:
            answer = await http.post(f"{proxy.url}/v1/chat/completions", json=chat("model-b"))
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) >= 1
        assert answer.json()["error"]["code"] == "pool_activation_timeout"

        async def withdrawn() -> bool:
            pool = await admin.get(POOL, "gpu-0", namespace)
            status = pool.get("status") or {}
            deployment_b = await admin.get(DEPLOYMENTS, "b", namespace)
            return (
                await lease_holder(admin, namespace) == ""
                and slots(pool) == {"a": "Granted", "b": "Released"}
                and (status.get("phase"), status.get("residentMember")) == ("Ready", "a")
                and deployment_b["spec"]["replicas"] == 0
            )

        await eventually(withdrawn, timeout=TIMEOUT, what="the Lease released, the pool back to a")
    assert "swap to b abandoned; releasing the intent" in proxy.output()
    assert await metric_sum(f"{proxy.url}/metrics", "modelpool_swaps_total") == 0.0

    # What the pool did, in etcd's order: it granted b and b's Deployment was raised (b loaded);
    # once the intent was gone it released b itself and b's Deployment went back to 0.
    pools = [o for k, _, o in events if k == "pool" and o["metadata"]["name"] == "gpu-0"]
    deployments_b = [o for k, _, o in events if k == "deployment" and o["metadata"]["name"] == "b"]
    granted = next(rv(o) for o in pools if slots(o).get("b") == "Granted")
    up = next(rv(o) for o in deployments_b if o["spec"]["replicas"] == 1)
    released = next(rv(o) for o in pools if rv(o) > up and slots(o).get("b") == "Released")
    down = next(rv(o) for o in deployments_b if rv(o) > up and o["spec"]["replicas"] == 0)
    assert granted < up < released < down
    for obj in (o for k, _, o in events if k == "isvc" and o["metadata"]["name"] == "b"):
        assert as_written(obj) == as_written(created_b), "b was written"


async def test_sigterm_mid_swap_answers_the_held_request_503_and_claims_nothing_more(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """A held client used to be cut off at the server's graceful deadline with no answer, while
    the held requests started new swap drivers in the cancelled task group."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=1, token_seconds=0.05)
    await setup_pool(admin, namespace, "60s", b_load_seconds=30)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    answers: list[httpx.Response] = []
    async with (
        http_client(timeout=30) as http,
        anyio.create_task_group() as group,
    ):

        async def ask() -> None:
            answers.append(
                await http.post(f"{proxy.url}/v1/chat/completions", json=chat("model-b"))
            )

        for _ in range(3):
            group.start_soon(ask)

        async def claimed() -> bool:
            return await lease_holder(admin, namespace) == proxy.identity

        await eventually(claimed, timeout=TIMEOUT, what="the proxy to claim the pool's Lease")
        proxy.popen.send_signal(signal.SIGTERM)
    assert [a.status_code for a in answers] == [503] * 3, [a.text for a in answers]
    assert {a.json()["error"]["code"] for a in answers} == {"proxy_stopping"}
    assert all(int(a.headers["Retry-After"]) >= 1 for a in answers)
    assert proxy.popen.wait(timeout=30) == 0
    assert await lease_holder(admin, namespace) == "", "the stopping replica left its claim"
    assert proxy.output().count("claimed the Lease for b") == 1
