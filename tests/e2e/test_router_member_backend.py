"""A router backend that names a pool member is served through the pool (issue 46).

Router ``direct`` has one backend, ``direct-a``: an ``inferenceServiceRef`` to ``a``, the resident
of pool ``gpu-0``. Before issue 46 its proxy forwarded to ``a`` around the pool: no admission, no
demand report, no fence, so the pool drained or reclaimed a member that router fed. Here:

* the router's status says ``direct-a`` is served through ``gpu-0``;
* a stream through ``direct`` (12 s) is in flight when router ``router`` (a ``poolRef``) asks for
  ``b``; the pool closes admission to ``a`` for the swap, and a request for ``direct-a`` sent
  then is held by ``direct``'s proxy (not forwarded) while ``a`` drains: still unanswered while
  the stream runs (forwarded around the pool, ``a`` answered it at once);
* the stream ends whole; ``b`` is brought up and answers; the held request is then answered
  by ``a``, brought back for it (an ordinary swap, within the budget).

The operator runs under its ServiceAccount, the node stand-in plays the members, both proxies run
under a ServiceAccount bound to a Role of ``ROUTER_PROXY_RULES`` only; all under the pool
invariant monitor.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from controlplane.api.v1alpha1 import ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.memberstreams import STREAM_TOKENS, serve_pool_of_two, streaming
from tests.e2e.operator_process import LocalProcess, OperatorProcess, metric_sum
from tests.e2e.proxies import chat, proxy_kubeconfig, run_proxies
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.anyio

#: Each token 48 ms: the 250-token stream lasts about 12 s.
TOKEN_SECONDS = 0.048
#: b gets the turn within a second or two of being asked for, while the stream still runs.
SCHEDULING = {"minResidency": "1s", "maxWait": "2s"}
#: How long the request for direct-a must stay unanswered while a drains (forwarded around the
#: pool, a answered it in well under a second).
HELD_FOR = 2.0


def direct_router() -> dict[str, Any]:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "metadata": {"name": "direct"},
        "spec": {"backends": [{"name": "direct-a", "inferenceServiceRef": {"name": "a"}}]},
    }


async def test_a_member_named_by_inference_service_ref_is_served_through_its_pool(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    await serve_pool_of_two(
        cluster, admin, namespace, tmp_path, started,
        token_seconds=TOKEN_SECONDS, scheduling=SCHEDULING,
    )  # fmt: skip
    await admin.create(ModelRouter.resource(), direct_router(), namespace)

    async def shows_the_pool() -> bool:
        router = await admin.get(ModelRouter.resource(), "direct", namespace)
        return (router.get("status") or {}).get("backends") == [
            {"name": "direct-a", "pool": "gpu-0"}
        ]

    await eventually(shows_the_pool, timeout=30, what="status.backends naming gpu-0")

    kubeconfig = await proxy_kubeconfig(cluster, admin, namespace, tmp_path)
    (pooled,) = await run_proxies(kubeconfig, namespace, tmp_path, started, 1, prefix="pooled")
    (direct,) = await run_proxies(
        kubeconfig, namespace, tmp_path, started, 1, prefix="direct", router="direct"
    )
    pool = ModelPool.resource()

    async def closed_to_a() -> bool:
        status = (await admin.get(pool, "gpu-0", namespace)).get("status") or {}
        return "a" in (status.get("admissionClosed") or ())

    answers: dict[str, tuple[httpx.Response, float]] = {}
    async with (
        http_client(timeout=120) as http,
        streaming(direct.url, "direct-a") as (stream, ended),
        anyio.create_task_group() as group,
    ):

        async def ask(proxy_url: str, model: str) -> None:
            body = chat(model, max_tokens=4)
            answer = await http.post(f"{proxy_url}/v1/chat/completions", json=body)
            answers[model] = (answer, time.monotonic())

        group.start_soon(ask, pooled.url, "model-b")
        await eventually(closed_to_a, timeout=10, interval=0.05, what="admission to a closed")
        assert not ended.is_set(), "the stream ended before the swap began: make it longer"

        asked = time.monotonic()
        group.start_soon(ask, direct.url, "direct-a")

        async def held_here() -> bool:
            return await metric_sum(f"{direct.url}/metrics", "modelpool_held_requests") == 1

        await eventually(held_here, timeout=5, interval=0.05, what="the request for a held")
        await anyio.sleep(HELD_FOR - (time.monotonic() - asked))
        assert "direct-a" not in answers, "a request for a was forwarded while a drains"
        assert not ended.is_set(), "the stream ended before the hold was shown: make it longer"

        with anyio.fail_after(60):
            await ended.wait()
        stream_ended = time.monotonic()
    assert stream.whole, (stream.tokens, stream.finish_reason, stream.errors)
    assert stream.tokens == STREAM_TOKENS
    b_answer, b_at = answers["model-b"]
    a_answer, a_at = answers["direct-a"]
    assert b_answer.status_code == 200, b_answer.text
    assert a_answer.status_code == 200, a_answer.text
    assert a_at > stream_ended, "the request for a was answered while its drain waited"
    assert a_at > b_at, "a came back only after b had its turn"
