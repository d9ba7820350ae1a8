"""An idle slot is given back (docs/modelpool.md, "Giving an idle slot back"), never a busy one,
and an InferenceService no pool lists scales to zero (docs/inferenceservice.md, "Scale to zero").

The operator runs under its ServiceAccount, the node stand-in plays the members as simulators,
and a ``controlplane router-proxy`` carries the requests, so the pool judges idleness on the
demand reports it really writes. Every test runs under the pool invariant monitor (never two
members of the pool running at once, settled at teardown). A stream that was cut would end
without its ``[DONE]`` (an ``upstream_disconnected`` error event through the proxy).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.local.system import RouterProxyProcess
from controlplane.runtime.client import KubeClient
from tests.e2e.bodies import router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.memberstreams import (
    STREAM_TOKENS,
    event_reasons,
    pod_names,
    ready_url,
    serve_pool_of_two,
    streaming,
)
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, isvc_body, start_proxies
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.anyio

POOL = ModelPool.resource()
ISVC = InferenceService.resource()
IDLE_AFTER = 5.0
#: Each simulated token takes 40 ms: a stream of 250 lasts about 10 s, twice ``idleAfter``.
SLOW_TOKEN_SECONDS = 0.04
#: The pool's swapBudget (``serve_pool_of_two``): a held request is answered within it.
BUDGET = 60.0
TIMEOUT = 60.0


async def status_of(admin: KubeClient, namespace: str) -> dict[str, Any]:
    return dict((await admin.get(POOL, "gpu-0", namespace)).get("status") or {})


async def ask(proxy: RouterProxyProcess, model: str) -> tuple[int, str, float]:
    """One request through the proxy: its status, the model that answered, how long it took."""
    started = time.monotonic()
    async with http_client(timeout=BUDGET + 30, trust_env=False) as http:
        reply = await http.post(f"{proxy.url}/v1/chat/completions", json=chat(model, max_tokens=4))
    answered = str(reply.json().get("model", "")) if reply.status_code == 200 else reply.text
    return reply.status_code, answered, time.monotonic() - started


async def test_a_released_pool_waits_for_its_stream_then_gives_the_slot_back_after_idle_after(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """``idleAfter: 5s``, ``idleAction: Release``, set while a 10 s stream is in flight: the
    resident keeps the slot for the whole stream (twice idleAfter), which ends whole; once the
    reports go quiet it is drained no sooner than idleAfter later, the pool is ``Idle`` with no
    resident and no pod (its default is not warmed again), and the next request is held and
    answered by the member brought back, within the pool's budget."""
    await serve_pool_of_two(cluster, admin, namespace, tmp_path, started,
                            token_seconds=SLOW_TOKEN_SECONDS)  # fmt: skip
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    async with streaming(proxy.url, "model-a") as (stream, ended):
        settings = {"idleAfter": f"{IDLE_AFTER:.0f}s", "idleAction": "Release"}
        await admin.patch(POOL, "gpu-0", {"spec": {"scheduling": settings}}, namespace)
        watched_from = time.monotonic()
        while not ended.is_set():
            status = await status_of(admin, namespace)
            assert status.get("reclaiming", []) == [], f"a busy resident given back: {status}"
            assert (status.get("phase"), status.get("residentMember")) == ("Ready", "a"), status
            assert await pod_names(admin, namespace, "a"), "a's pod went during its stream"
            await anyio.sleep(0.2)
        quiet_from = time.monotonic()
    assert quiet_from - watched_from > IDLE_AFTER, "the stream ended too soon to show anything"
    assert stream.whole, stream
    assert stream.tokens == STREAM_TOKENS, stream

    async def given_back() -> dict[str, Any] | None:
        status = await status_of(admin, namespace)
        if status.get("phase") != "Idle" or await pod_names(admin, namespace, "a"):
            return None
        return status

    idle = await eventually(given_back, timeout=TIMEOUT, what="the pool Idle, a's pod gone")
    assert time.monotonic() - quiet_from >= IDLE_AFTER, "given back before idleAfter of quiet"
    assert (idle.get("residentMember"), idle.get("residents", [])) == (None, []), idle
    assert idle.get("idleSince"), idle
    assert "Reclaimed" in await event_reasons(admin, namespace, "ModelPool", "gpu-0")
    await anyio.sleep(2.0)
    still = await status_of(admin, namespace)
    assert still.get("phase") == "Idle", f"the default was warmed again: {still}"
    assert not await pod_names(admin, namespace, "a")

    code, model, took = await ask(proxy, "model-a")
    assert (code, model) == (200, "model-a")
    assert took < BUDGET

    async def back() -> bool:
        # The answer can come before the pool's status names a resident (the proxy forwards
        # once the server answers: docs/router.md, "Ready when the server is").
        status = await status_of(admin, namespace)
        return (status.get("phase"), status.get("residentMember")) == ("Ready", "a")

    await eventually(back, timeout=TIMEOUT, what="a resident again")


async def test_an_idle_member_drains_back_to_the_default_and_a_request_meanwhile_is_answered(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """``idleAfter: 5s`` with the default ``idleAction`` (``Default``, the pool has a default):
    the default itself is never given back; a member a request brought up is, once quiet, and the
    pool swaps back to the default. A request for that member once the reclaim is published is
    answered within the pool's budget (by the member kept, or brought back)."""
    scheduling = {"idleAfter": f"{IDLE_AFTER:.0f}s"}
    await serve_pool_of_two(cluster, admin, namespace, tmp_path, started, scheduling=scheduling)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    await anyio.sleep(IDLE_AFTER + 3)
    status = await status_of(admin, namespace)
    assert (status.get("phase"), status.get("residentMember")) == ("Ready", "a"), status
    assert status.get("idleSince"), "the default's clock runs, and it stays"

    assert (await ask(proxy, "model-b"))[:2] == (200, "model-b")
    quiet_from = time.monotonic()

    async def reclaiming_b() -> dict[str, Any] | None:
        status = await status_of(admin, namespace)
        return status if "b" in status.get("reclaiming", []) else None

    await eventually(reclaiming_b, timeout=TIMEOUT, interval=0.05, what="b being given back")
    assert time.monotonic() - quiet_from >= IDLE_AFTER, "given back before idleAfter of quiet"
    code, model, took = await ask(proxy, "model-b")
    assert (code, model) == (200, "model-b"), "a request during the reclaim was refused"
    assert took < BUDGET

    async def back_to_default() -> dict[str, Any] | None:
        status = await status_of(admin, namespace)
        if (status.get("phase"), status.get("residentMember")) != ("Ready", "a"):
            return None
        return None if await pod_names(admin, namespace, "b") else status

    await eventually(
        back_to_default, timeout=TIMEOUT + IDLE_AFTER, what="the slot back to the default a"
    )
    assert "Reclaimed" in await event_reasons(admin, namespace, "ModelPool", "gpu-0")


async def test_a_standalone_service_scales_to_zero_and_its_next_request_is_held_and_answered(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """An InferenceService no pool lists, with ``spec.idleAfter: 5s``, behind a router: it
    serves, then, once the proxy's reports have gone quiet, is scaled to zero no sooner than
    idleAfter later (its pod gone, ``Stopped`` for reason ``Idle``); the next request is held by
    the proxy, brings it back, and is answered within the proxy's hold budget."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=1.0)
    body = isvc_body("solo", 1)
    body["spec"]["idleAfter"] = f"{IDLE_AFTER:.0f}s"
    await admin.create(ISVC, body, namespace)
    router = router_body("router", "unused")
    router["spec"]["backends"] = [{"name": "solo", "inferenceServiceRef": {"name": "solo"}}]
    await admin.create(ModelRouter.resource(), router, namespace)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)

    first = await ask(proxy, "solo")  # a standalone backend's model is its name
    assert first[0] == 200, first
    quiet_from = time.monotonic()

    async def at_zero() -> dict[str, Any] | None:
        found = await admin.get(ISVC, "solo", namespace)
        status = found.get("status") or {}
        if not status.get("scaledToZero") or await pod_names(admin, namespace, "solo"):
            return None
        ready = next(c for c in status.get("conditions", []) if c["type"] == "Ready")
        return status if (status.get("phase"), ready["reason"]) == ("Stopped", "Idle") else None

    status = await eventually(at_zero, timeout=TIMEOUT, what="solo scaled to zero")
    assert time.monotonic() - quiet_from >= IDLE_AFTER, "scaled to zero before idleAfter"
    assert status.get("idleSince"), status
    assert status.get("desiredReplicas") == 0, status

    code, model, took = await ask(proxy, "solo")
    assert (code, model) == (200, first[1]), "the request after a scale to zero"
    assert took < BUDGET
    back = (await admin.get(ISVC, "solo", namespace)).get("status") or {}
    assert back.get("phase") == "Ready", back
    assert not back.get("scaledToZero"), back


async def test_a_standalone_service_is_not_scaled_to_zero_under_a_stream_no_proxy_reported(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """The ``/slots`` gate holds even when the reports say quiet: a 10 s stream read straight
    from the service's endpoint (no router-proxy sees it, so no report counts it) outlasts
    ``idleAfter: 2s``; the service is published for scale to zero but its pod stays until the
    stream has ended whole, and only then goes."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=1.0,
               token_seconds=SLOW_TOKEN_SECONDS)  # fmt: skip
    await admin.create(ISVC, isvc_body("solo", 1), namespace)
    url = await eventually(
        lambda: ready_url(admin, namespace, "solo"), timeout=TIMEOUT, what="solo ready"
    )
    async with streaming(url, "model-solo") as (stream, ended):
        await admin.patch(ISVC, "solo", {"spec": {"idleAfter": "2s"}}, namespace)

        async def published() -> bool:
            found = await admin.get(ISVC, "solo", namespace)
            return bool((found.get("status") or {}).get("scaledToZero"))

        await eventually(published, timeout=TIMEOUT, what="solo published for scale to zero")
        while not ended.is_set():
            assert await pod_names(admin, namespace, "solo"), "its pod went during its stream"
            await anyio.sleep(0.2)
    assert stream.whole, stream
    assert stream.tokens == STREAM_TOKENS, stream

    async def gone() -> bool:
        return not await pod_names(admin, namespace, "solo")

    await eventually(gone, timeout=TIMEOUT, what="solo's pod gone once idle")
