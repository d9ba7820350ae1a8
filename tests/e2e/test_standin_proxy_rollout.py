"""A router-proxy pod deleted mid-stream under the node stand-in: the stream ends whole (issue 46).

``make dev`` runs the proxies as the stand-in's pods. The proxy drains itself on SIGTERM
(docs/router.md, "Stopping"; ``test_proxy_drain`` shows it with a proxy started by hand), but the
stand-in killed a Terminating pod's process 10 s after SIGTERM whatever the pod's grace period
said, so a ``kubectl delete pod`` (what a rollout or a drain does) still cut a stream after 10 s.
Here, through the router's local address, a 15 s stream is in flight when the proxy pod is
deleted 1 s into it (its grace period the router's default 600 s):

* a replacement pod is running beside the Terminating one while the stream is relayed (the
  stand-in's wait for the old process holds up no reconcile);
* the stream, which ends more than 10 s after the deletion, arrives whole with its ``[DONE]``;
* the old pod is gone once its process has exited, well within its grace period.

A ``kubectl drain`` of the node (no pod selector, as an administrator runs it) mid-stream evicts
the proxy pod and, once its pool has drained it, the resident's: the stream ends whole first.

The operator runs under its ServiceAccount; the node stand-in plays members and proxies, under
the pool invariant monitor.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import httpx
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import PODS
from controlplane.standin.builders import NODE_NAME
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.kubectl import kubectl
from tests.e2e.memberstreams import STREAM_TOKENS, streaming
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, isvc_body
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.anyio

#: Each token 60 ms: the 250-token stream lasts about 15 s, past the stand-in's old 10 s bound.
TOKEN_SECONDS = 0.06
TIMEOUT = 90.0
SELECTOR = "inference.modelpool.dev/modelrouter=router"


async def proxy_pods(admin: KubeClient, namespace: str) -> dict[str, bool]:
    """The router's proxy pods by name: whether each is Terminating."""
    pods = await admin.list(PODS, namespace, label_selector=SELECTOR)
    return {p["metadata"]["name"]: bool(p["metadata"].get("deletionTimestamp")) for p in pods.items}


async def serve_through_proxy_pods(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> str:
    """Pool ``gpu-0`` of ``a`` behind router ``router``, its proxies the stand-in's pods; the
    router's local address."""
    node = start_node(
        cluster, tmp_path, started, namespace=namespace, router_proxies=True,
        token_seconds=TOKEN_SECONDS,
    )  # fmt: skip
    await admin.create(InferenceService.resource(), isvc_body("a", 1), namespace)
    await admin.create(ModelPool.resource(), pool_body("gpu-0", ("a",), "a"), namespace)
    await admin.create(ModelRouter.resource(), router_body("router", "gpu-0"), namespace)

    async def address() -> str | None:
        return node.router_addresses().get(f"{namespace}/router")

    return await eventually(address, timeout=TIMEOUT, what="the router's local address")


async def test_a_proxy_pod_deleted_mid_stream_relays_the_stream_whole(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    url = await serve_through_proxy_pods(cluster, admin, namespace, tmp_path, started)

    async def one_ready_pod() -> str | None:
        pods = await proxy_pods(admin, namespace)
        return next(iter(pods)) if len(pods) == 1 else None

    old = await eventually(one_ready_pod, timeout=TIMEOUT, what="one proxy pod")
    async with streaming(url, "model-a") as (stream, ended):
        await anyio.sleep(1)
        await admin.delete(PODS, old, namespace)  # graceful: the pod's 600 s
        deleted = time.monotonic()

        async def replaced() -> bool:
            pods = await proxy_pods(admin, namespace)
            return pods.get(old) is True and any(not t for n, t in pods.items() if n != old)

        await eventually(replaced, timeout=30, what="a new proxy pod beside the Terminating one")
        assert not ended.is_set(), "the stream ended before the replacement: make it longer"
        with anyio.fail_after(60):
            await ended.wait()
        stream_ended = time.monotonic()
    assert stream.whole, (stream.tokens, stream.finish_reason, stream.errors)
    assert stream.tokens == STREAM_TOKENS
    assert stream_ended - deleted > 10, "the stream outlived the stand-in's old 10 s bound"

    async def old_gone() -> bool:
        return old not in await proxy_pods(admin, namespace)

    await eventually(old_gone, timeout=30, what="the old pod gone once its proxy exited")


async def test_kubectl_drain_of_the_node_mid_stream_leaves_the_stream_whole(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """``kubectl drain`` of the node as an administrator runs it (no pod selector) while a stream
    goes through the router's local address: the proxy pod's eviction is allowed (its budget
    lets one go) and it relays the stream to its end; the resident's is refused until its pool
    has drained it, after the stream; the drain then finishes, and uncordoned, the router serves
    again. The stand-in plays the one node, so the proxy's replacement waits for the uncordon."""
    url = await serve_through_proxy_pods(cluster, admin, namespace, tmp_path, started)
    drained: list[tuple[int, str, str]] = []
    try:
        async with streaming(url, "model-a") as (stream, ended), anyio.create_task_group() as tg:
            await anyio.sleep(1)

            async def drain() -> None:
                drained.append(await kubectl(
                    cluster, "drain", NODE_NAME, "--ignore-daemonsets", "--delete-emptydir-data",
                    f"--timeout={int(TIMEOUT)}s", check=False,
                ))  # fmt: skip

            tg.start_soon(drain)

            async def proxy_evicted() -> bool:
                return all((await proxy_pods(admin, namespace)).values())

            await eventually(proxy_evicted, timeout=30, what="the proxy pod evicted")
            assert not ended.is_set(), "the stream ended before the eviction: make it longer"
            with anyio.fail_after(60):
                await ended.wait()
            assert not drained, f"the drain ended while the stream was in flight: {drained}"
        assert stream.whole, (stream.tokens, stream.finish_reason, stream.errors)
        assert stream.tokens == STREAM_TOKENS
        ((code, out, err),) = drained
        assert code == 0, f"kubectl drain failed:\n{out}\n{err}"
        assert "evicted" in out + err, out + err
        assert all((await proxy_pods(admin, namespace)).values()), "a proxy left serving"
    finally:
        await kubectl(cluster, "uncordon", NODE_NAME, check=False)
    async with http_client(timeout=TIMEOUT, trust_env=False) as http:

        async def served() -> bool:
            try:
                reply = await http.post(f"{url}/v1/chat/completions", json=chat("model-a"))
            except httpx.TransportError:
                return False
            return reply.status_code == 200

        await eventually(served, timeout=TIMEOUT, what="the router serving again")
