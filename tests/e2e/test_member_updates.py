"""An edit of a serving member goes through the idle gate (docs/inferenceservice.md, "Changing a
serving member"): a stream in flight ends whole, and the change reaches the Deployment once idle.

The operator runs under its ServiceAccount, the node stand-in plays the members as simulators
(each token 20 ms, so a 250-token stream lasts about 5 s), and, for the pool member, two
``controlplane router-proxy`` processes carry the requests. Every test runs under the pool
invariant monitor. A stream that was cut would end without its ``[DONE]``: directly from the
simulator as a broken connection, through a proxy as an ``upstream_disconnected`` error event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import ready_urls
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, EVENTS, PODS
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, isvc_body, start_proxies
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
ROUTER = ModelRouter.resource()
TIMEOUT = 60.0
TOKEN_SECONDS = 0.02
STREAM_TOKENS = 250
EDITED_ARGS = ["--parallel", "2", "--ctx-size", "4096"]


@dataclass
class Stream:
    """A streamed chat completion read to its end: what arrived, and how it ended."""

    tokens: int = 0
    finish_reason: str | None = None
    done: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def whole(self) -> bool:
        return self.done and self.finish_reason == "length" and not self.errors

    def read(self, line: str) -> None:
        if not line.startswith("data: "):
            return
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            self.done = True
            return
        event = json.loads(data)
        if "error" in event:
            self.errors.append(str(event["error"]))
            return
        for choice in event.get("choices") or ():
            if (choice.get("delta") or {}).get("content"):
                self.tokens += 1
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


@asynccontextmanager
async def streaming(url: str, model: str) -> AsyncIterator[tuple[Stream, anyio.Event]]:
    """A long stream from ``url``, entered once its first token arrived (its slot is busy); the
    rest is read in the background, and the event is set when it has ended, however it ended."""
    stream = Stream()
    ended = anyio.Event()
    first = anyio.Event()
    body = chat(model, stream=True, max_tokens=STREAM_TOKENS, ignore_eos=True)

    async def read(http: httpx.AsyncClient) -> None:
        try:
            async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                assert response.status_code == 200, await response.aread()
                async for line in response.aiter_lines():
                    stream.read(line)
                    if stream.tokens:
                        first.set()
        except httpx.HTTPError as err:
            stream.errors.append(f"{type(err).__name__}: {err}")
        finally:
            first.set()
            ended.set()

    async with (
        httpx.AsyncClient(timeout=120, trust_env=False) as http,
        anyio.create_task_group() as group,
    ):
        group.start_soon(read, http)
        await first.wait()
        assert stream.tokens, f"the stream never started: {stream.errors}"
        yield stream, ended
        await ended.wait()


async def condition(admin: KubeClient, namespace: str, name: str, type_: str) -> dict[str, Any]:
    found = await admin.get(ISVC, name, namespace)
    conditions = (found.get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c.get("type") == type_), {})


async def server_args(admin: KubeClient, namespace: str, name: str) -> list[str]:
    deployment = await admin.get(DEPLOYMENTS, name, namespace)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


async def event_reasons(admin: KubeClient, namespace: str, kind: str, name: str) -> set[str]:
    events = (await admin.list(EVENTS, namespace)).items
    return {
        str(e.get("reason"))
        for e in events
        if (e.get("regarding") or {}).get("kind") == kind
        and (e.get("regarding") or {}).get("name") == name
    }


async def pod_names(admin: KubeClient, namespace: str, member: str) -> set[str]:
    pods = await admin.list(
        PODS, namespace, label_selector=f"inference.modelpool.dev/inferenceservice={member}"
    )
    return {p["metadata"]["name"] for p in pods.items if not p["metadata"].get("deletionTimestamp")}


async def ready_url(admin: KubeClient, namespace: str, service: str) -> str | None:
    slices = await admin.list(
        ENDPOINT_SLICES, namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    urls = ready_urls(slices.items)
    return urls[0] if urls else None


async def edit_args(admin: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """What a user tuning the server does (a merge patch of ``spec.args``); returns the
    ``UpdatePending`` condition once it says the change waits."""
    await admin.patch(ISVC, name, {"spec": {"args": EDITED_ARGS}}, namespace)

    async def waiting() -> dict[str, Any] | None:
        found = await condition(admin, namespace, name, "UpdatePending")
        return found if found.get("status") == "True" else None

    return await eventually(waiting, timeout=TIMEOUT, what=f"the edit of {name} pending")


async def changed_and_ready(admin: KubeClient, namespace: str, name: str, old: set[str]) -> bool:
    """The edit reached the Deployment, a new pod serves it, and nothing waits any more."""
    if "4096" not in await server_args(admin, namespace, name):
        return False
    found = await admin.get(ISVC, name, namespace)
    pending = await condition(admin, namespace, name, "UpdatePending")
    pods = await pod_names(admin, namespace, name)
    return (
        (found.get("status") or {}).get("phase") == "Ready"
        and pending.get("status") == "False"
        and bool(pods)
        and not pods & old
    )


async def test_an_edit_of_a_busy_member_no_pool_lists_waits_for_its_stream_then_goes_in(
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
    before = await server_args(admin, namespace, "solo")
    old_pods = await pod_names(admin, namespace, "solo")

    async with streaming(url, "model-solo") as (stream, ended):
        pending = await edit_args(admin, namespace, "solo")
        assert pending["reason"] == "WaitingForIdle", pending
        assert "slot(s) processing" in pending["message"], pending
        assert not ended.is_set(), "the stream ended before the check: make it longer"
        assert await server_args(admin, namespace, "solo") == before, "applied while busy"
        assert await pod_names(admin, namespace, "solo") == old_pods
    assert stream.whole, stream
    assert stream.tokens == STREAM_TOKENS, stream

    await eventually(
        lambda: changed_and_ready(admin, namespace, "solo", old_pods),
        timeout=TIMEOUT,
        what="the edit in the Deployment and a new pod Ready",
    )
    reasons = await event_reasons(admin, namespace, "InferenceService", "solo")
    assert {"UpdatePending", "UpdateApplied"} <= reasons, reasons


async def test_an_edit_of_a_pool_resident_under_load_is_carried_out_by_the_pools_drain(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """A long stream and a steady loop of short requests for the resident, through two proxies:
    the edit waits (``WaitingForPool``), admission to the resident closes on both proxies, the
    stream ends whole, the pool drains the resident and grants it again with the edited pod, and
    every request held meanwhile is answered by the new pod, within the pool's budget."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=1.0,
               token_seconds=TOKEN_SECONDS)  # fmt: skip
    for name, replicas in (("a", 1), ("b", 0)):
        await admin.create(ISVC, isvc_body(name, replicas), namespace)
    await admin.create(POOL, pool_body("gpu-0", ("a", "b"), "a", "60s"), namespace)
    await admin.create(ROUTER, router_body("router", "gpu-0"), namespace)

    async def settled() -> bool:
        status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
        return status.get("residentMember") == "a" and status.get("phase") == "Ready"

    await eventually(settled, timeout=TIMEOUT, what="a resident and Ready")
    streamer, looper = await start_proxies(cluster, admin, namespace, tmp_path, started, 2)
    old_pods = await pod_names(admin, namespace, "a")
    answers: list[tuple[int, float, str]] = []
    stop = anyio.Event()

    async def loop(http: httpx.AsyncClient) -> None:
        while not stop.is_set():
            asked = time.monotonic()
            reply = await http.post(
                f"{looper.url}/v1/chat/completions", json=chat("model-a", max_tokens=4)
            )
            model = reply.json().get("model", "") if reply.status_code == 200 else reply.text
            answers.append((reply.status_code, time.monotonic() - asked, str(model)))

    async with (
        httpx.AsyncClient(timeout=90, trust_env=False) as http,
        anyio.create_task_group() as group,
    ):
        group.start_soon(loop, http)
        async with streaming(streamer.url, "model-a") as (stream, ended):
            pending = await edit_args(admin, namespace, "a")
            assert pending["reason"] == "WaitingForPool", pending
            assert not ended.is_set(), "the stream ended before the check: make it longer"
            assert "4096" not in await server_args(admin, namespace, "a"), "applied while busy"
        assert stream.whole, stream
        assert stream.tokens == STREAM_TOKENS, stream
        await eventually(
            lambda: changed_and_ready(admin, namespace, "a", old_pods),
            timeout=TIMEOUT,
            what="the edit in a's Deployment and a new pod of a Ready",
        )
        await anyio.sleep(1.0)  # the loop goes on against the new pod
        stop.set()

    refused = [a for a in answers if a[0] != 200 or a[2] != "model-a"]
    assert not refused, f"requests refused or answered by the wrong model: {refused[:5]}"
    held = [waited for _, waited, _ in answers if waited > 1.0]
    assert held, "no request was held: admission to the resident stayed open"
    assert max(waited for _, waited, _ in answers) < 60, "a request waited past the pool's budget"
    status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
    assert status.get("residentMember") == "a"
    assert "UpdatingMember" in await event_reasons(admin, namespace, "ModelPool", "gpu-0")
