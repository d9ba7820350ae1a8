"""Long streams against members, and what a test reads of a member while it changes: shared by the
day-2 tests (an edit, a node drain). A stream that was cut would end without its ``[DONE]``:
directly from the simulator as a broken connection, through a proxy as an
``upstream_disconnected`` error event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.streamread import Stream as Stream  # the tests read it from here
from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import ready_urls
from controlplane.runtime.objects import status_condition
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, EVENTS, PODS
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import LocalProcess, start_node
from tests.e2e.proxies import chat, isvc_body
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
#: Each simulated token takes 20 ms (the node stand-in's ``--token-seconds``): 250 last ~5 s.
TOKEN_SECONDS = 0.02
STREAM_TOKENS = 250


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
        http_client(timeout=120, trust_env=False) as http,
        anyio.create_task_group() as group,
    ):
        group.start_soon(read, http)
        await first.wait()
        assert stream.tokens, f"the stream never started: {stream.errors}"
        yield stream, ended
        await ended.wait()


async def condition(admin: KubeClient, namespace: str, name: str, type_: str) -> dict[str, Any]:
    return dict(status_condition(await admin.get(ISVC, name, namespace), type_) or {})


async def server_container(admin: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The server container of the member's Deployment, as last written."""
    deployment = await admin.get(DEPLOYMENTS, name, namespace)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


async def event_reasons(admin: KubeClient, namespace: str, kind: str, name: str) -> set[str]:
    events = (await admin.list(EVENTS, namespace)).items
    return {
        str(e.get("reason"))
        for e in events
        if (e.get("regarding") or {}).get("kind") == kind
        and (e.get("regarding") or {}).get("name") == name
    }


async def events_written(
    admin: KubeClient, namespace: str, kind: str, name: str, wanted: set[str]
) -> None:
    """Until every reason in ``wanted`` has an Event about ``kind``/``name``: the operator's
    recorder writes Events after the change they tell of, not with it."""

    async def written() -> bool:
        return wanted <= await event_reasons(admin, namespace, kind, name)

    await eventually(written, timeout=60, what=f"{sorted(wanted)} events of {kind} {name}")


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


async def serve_pool_of_two(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    workdir: Path,
    started: list[LocalProcess],
    *,
    token_seconds: float = TOKEN_SECONDS,
    scheduling: Mapping[str, str] | None = None,
) -> None:
    """A node (each load 1 s, each token ``token_seconds``), the pool ``gpu-0`` of ``a``
    (resident, once this returns) and ``b`` with a 60 s budget and ``scheduling``, and the router
    ``router``."""
    start_node(cluster, workdir, started, namespace=namespace, load_seconds=1.0,
               token_seconds=token_seconds)  # fmt: skip
    for name, replicas in (("a", 1), ("b", 0)):
        await admin.create(ISVC, isvc_body(name, replicas), namespace)
    pool = ModelPool.resource()
    body = pool_body("gpu-0", ("a", "b"), "a", "60s", scheduling=scheduling)
    await admin.create(pool, body, namespace)
    await admin.create(ModelRouter.resource(), router_body("router", "gpu-0"), namespace)

    async def settled() -> bool:
        status = (await admin.get(pool, "gpu-0", namespace)).get("status") or {}
        return status.get("residentMember") == "a" and status.get("phase") == "Ready"

    await eventually(settled, timeout=60, what="a resident and Ready")
