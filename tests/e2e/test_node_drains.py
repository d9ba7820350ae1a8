"""A node drain waits for idle (docs/inferenceservice.md, "Node drains"): evictions of a busy
member are refused by its PodDisruptionBudget, the cordon makes the operator move the member
through the idle gate, and a stream in flight ends whole.

As ``kubectl drain`` does: cordon the node (``spec.unschedulable``), then ask the Eviction API for
each pod, retrying a refusal. The node stand-in plays the one node; while it is cordoned it places
no new pod (a scheduler would leave it Pending), so each test uncordons it once the old pod is
gone, and always on the way out: the node is every test's on this control plane.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from controlplane.api.v1alpha1 import ModelPool
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL, slot_server_name
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound, TooManyRequests
from controlplane.runtime.resources import NODES, POD_DISRUPTION_BUDGETS, PODS
from controlplane.standin.builders import NODE_NAME
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.memberstreams import (
    ISVC,
    STREAM_TOKENS,
    TOKEN_SECONDS,
    condition,
    event_reasons,
    events_written,
    pod_names,
    ready_url,
    serve_pool_of_two,
    streaming,
)
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, isvc_body, start_proxies
from tests.e2e.test_slot_server import POOL_NAME, resident_is, setup_slot_pool
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.anyio

POOL = ModelPool.resource()
TIMEOUT = 60.0


@asynccontextmanager
async def uncordoned_after(admin: KubeClient) -> AsyncIterator[None]:
    """Whatever happens inside (a :func:`cordon` once the stream is busy), uncordoned after."""
    try:
        yield
    finally:
        await uncordon(admin)


async def cordon(admin: KubeClient) -> None:
    """The drain's first step."""
    await admin.patch(NODES, NODE_NAME, {"spec": {"unschedulable": True}})


async def uncordon(admin: KubeClient) -> None:
    """Cordon and any taint lifted (the stand-in's node has none of its own)."""
    await admin.patch(NODES, NODE_NAME, {"spec": {"unschedulable": None, "taints": None}})


async def evict(admin: KubeClient, namespace: str, pod: str) -> None:
    """One eviction, as ``kubectl drain`` asks for it."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    await admin.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body=body)


async def leaving(admin: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The ``UpdatePending`` condition once it says the pod leaves the cordoned node."""

    async def pending() -> dict[str, Any] | None:
        found = await condition(admin, namespace, name, "UpdatePending")
        message = str(found.get("message") or "")
        return found if found.get("status") == "True" and NODE_NAME in message else None

    return await eventually(pending, timeout=TIMEOUT, what=f"{name} pending off {NODE_NAME}")


async def assert_eviction_refused(admin: KubeClient, namespace: str, pods: set[str]) -> None:
    for pod in pods:
        with pytest.raises(TooManyRequests) as refused:
            await evict(admin, namespace, pod)
        assert "disruption budget" in str(refused.value), refused.value


async def ask_for_a(http: httpx.AsyncClient, url: str, answered: list[httpx.Response]) -> None:
    """One short request for a through the proxy at ``url``, sent during a drain (so held)."""
    body = chat("model-a", max_tokens=4)
    answered.append(await http.post(f"{url}/v1/chat/completions", json=body))


async def moved_off_and_back(admin: KubeClient, namespace: str, name: str, old: set[str]) -> None:
    """The old pod is gone while the node is still cordoned (the drain's eviction finds it no
    more); uncordoned, a new pod serves and nothing waits any more."""

    async def old_gone() -> bool:
        for pod in old:
            try:
                await evict(admin, namespace, pod)  # Terminating pods are "evicted" again
            except NotFound:
                continue
            return False
        return True

    await eventually(old_gone, timeout=TIMEOUT, what=f"{name}'s old pod gone")
    await uncordon(admin)

    async def back() -> bool:
        pods = await pod_names(admin, namespace, name)
        pending = await condition(admin, namespace, name, "UpdatePending")
        url = await ready_url(admin, namespace, name)
        return bool(pods) and not pods & old and url is not None and pending["status"] == "False"

    await eventually(back, timeout=TIMEOUT, what=f"a new pod of {name} serving")


async def test_a_drain_of_a_busy_member_no_pool_lists_waits_for_its_stream(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    start_node(cluster, tmp_path, started, namespace=namespace, token_seconds=TOKEN_SECONDS)
    await admin.create(ISVC, isvc_body("solo", 1), namespace)
    url = await eventually(
        lambda: ready_url(admin, namespace, "solo"), timeout=TIMEOUT, what="solo ready"
    )
    budget = await admin.get(POD_DISRUPTION_BUDGETS, "solo", namespace)
    assert budget["spec"]["maxUnavailable"] == 0, budget
    old_pods = await pod_names(admin, namespace, "solo")

    async with uncordoned_after(admin):
        async with streaming(url, "model-solo") as (stream, ended):
            await cordon(admin)
            pending = await leaving(admin, namespace, "solo")
            assert pending["reason"] == "WaitingForIdle", pending
            await assert_eviction_refused(admin, namespace, old_pods)
            assert not ended.is_set(), "the stream ended before the check: make it longer"
            assert await pod_names(admin, namespace, "solo") == old_pods, "moved while busy"
        assert stream.whole, stream
        assert stream.tokens == STREAM_TOKENS, stream
        await moved_off_and_back(admin, namespace, "solo", old_pods)
    await events_written(
        admin, namespace, "InferenceService", "solo", {"UpdatePending", "UpdateApplied"}
    )


async def test_a_drain_of_a_busy_pool_resident_waits_for_its_stream_and_holds_the_next_request(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Through a proxy: the drain waits (``WaitingForPool``), evictions are refused, admission to
    the resident closes, the stream ends whole, the pool releases the resident, and a request
    sent during the drain is held and answered by the resident's next pod."""
    await serve_pool_of_two(cluster, admin, namespace, tmp_path, started)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    old_pods = await pod_names(admin, namespace, "a")
    answered: list[httpx.Response] = []
    async with (
        uncordoned_after(admin),
        http_client(timeout=90, trust_env=False) as http,
        anyio.create_task_group() as group,
    ):
        async with streaming(proxy.url, "model-a") as (stream, ended):
            await cordon(admin)
            pending = await leaving(admin, namespace, "a")
            assert pending["reason"] == "WaitingForPool", pending
            await assert_eviction_refused(admin, namespace, old_pods)
            group.start_soon(ask_for_a, http, proxy.url, answered)
            assert not ended.is_set(), "the stream ended before the check: make it longer"
            assert await pod_names(admin, namespace, "a") == old_pods, "moved while busy"
        assert stream.whole, stream
        assert stream.tokens == STREAM_TOKENS, stream
        assert not answered, f"answered while the resident was being drained: {answered}"
        await moved_off_and_back(admin, namespace, "a", old_pods)
    (reply,) = answered
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "model-a"
    status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
    assert status.get("residentMember") == "a"
    assert "UpdatingMember" in await event_reasons(admin, namespace, "ModelPool", "gpu-0")


#: How a node is marked for emptying: ``kubectl drain``'s cordon, or a node autoscaler's taint.
MARKS = {
    "cordon": {"spec": {"unschedulable": True}},
    "karpenter-taint": {
        "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}
    },
}


@pytest.mark.parametrize("mark", sorted(MARKS))
async def test_a_drain_of_a_busy_slot_server_waits_for_its_stream_and_moves_the_server(
    mark: str,
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """The pool's slot server on a node being emptied (cordoned, or tainted by Karpenter): its
    budget refuses the eviction, the pool releases the resident through the fenced drain once
    the stream ended whole, deletes the server's pod with nothing loaded, and a request sent
    meanwhile is held and answered by the server's next pod."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=0.3,
               token_seconds=TOKEN_SECONDS)  # fmt: skip
    await setup_slot_pool(admin, namespace, tmp_path)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    budget = await admin.get(POD_DISRUPTION_BUDGETS, slot_server_name(POOL_NAME), namespace)
    assert budget["spec"]["maxUnavailable"] == 0, budget
    old = await slot_pod_names(admin, namespace)
    answered: list[httpx.Response] = []
    async with (
        uncordoned_after(admin),
        http_client(timeout=90, trust_env=False) as http,
        anyio.create_task_group() as group,
    ):
        async with streaming(proxy.url, "model-a") as (stream, ended):
            await admin.patch(NODES, NODE_NAME, MARKS[mark])
            await anyio.sleep(1.5)  # the pool has seen the node by now, and keeps the server
            await assert_eviction_refused(admin, namespace, old)
            group.start_soon(ask_for_a, http, proxy.url, answered)
            assert not ended.is_set(), "the stream ended before the check: make it longer"
            assert await slot_pod_names(admin, namespace) == old, "moved while busy"
        assert stream.whole, stream
        assert stream.tokens == STREAM_TOKENS, stream

        async def old_gone() -> bool:
            return not (await slot_pod_names(admin, namespace, live_only=False)) & old

        await eventually(old_gone, timeout=TIMEOUT, what="the server's old pod gone")
        assert not answered, f"answered while the server was moving: {answered}"
        await uncordon(admin)

        async def serving_again() -> bool:
            pods = await slot_pod_names(admin, namespace)
            return bool(pods) and not pods & old and await resident_is(admin, namespace, "a")

        await eventually(serving_again, timeout=TIMEOUT, what="a loaded in the server's next pod")
    (reply,) = answered
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "model-a"


async def slot_pod_names(admin: KubeClient, namespace: str, *, live_only: bool = True) -> set[str]:
    """The slot server's pods; ``live_only``: not those being deleted."""
    selector = f"{SLOT_SERVER_LABEL}={POOL_NAME}"
    found = (await admin.list(PODS, namespace, label_selector=selector)).items
    return {
        pod["metadata"]["name"]
        for pod in found
        if not (live_only and pod["metadata"].get("deletionTimestamp"))
    }
