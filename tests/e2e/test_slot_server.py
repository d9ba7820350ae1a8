"""A pool with a slot server, end to end (docs/modelpool.md, "One slot server").

The operator runs under its ServiceAccount; the node stand-in plays the pool's slot server (the
simulator's llama.cpp router mode, a child process per loaded model) and a router-proxy forwards
requests. Members ``a`` and ``b`` read their weights from node files (``file://``). Every test runs
under the pool invariant monitor, which counts the slot server's children as the members whose
model they serve: at no instant are two loaded.

What the tests hold the pool to: a swap loads and unloads in one long-lived server (no member pod,
the server's pod never replaced); a model with requests in flight is never unloaded (its request
finishes whole, the drain waits on ``/slots?model=``); the members' phases follow the server.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from controlplane.api.v1alpha1.activation import new_pool_lease
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL, slot_server_name
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import MEMBER_PORT_NAME, SERVICE_NAME_LABEL, ready_urls
from controlplane.runtime.resources import ENDPOINT_SLICES, LEASES, PODS
from controlplane.scheduling.policy import Settings, wait_bound
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import start_proxies
from tests.e2e.test_scheduling import (
    ISVC,
    POOL,
    ROUTER,
    SWAP_ALLOWANCE,
    TIMEOUT,
    ask,
    three_teams_for,
)
from tests.e2e.test_standin_pods import node_folder
from tests.e2e.waiting import eventually

#: Where the test puts the members' weights on the node.
MODELS = "/var/lib/modelpool/test-models"
POOL_NAME = "gpu-0"
SCHEDULING = {"maxWait": "15s", "minResidency": "3s"}
SETTINGS = Settings(max_wait=15, min_residency=3)


def member_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"model": {"name": f"model-{name}", "source": f"file://{MODELS}/{name}.gguf"}},
    }


async def create_member(admin: KubeClient, namespace: str, tmp_path: Path, name: str) -> None:
    """Member ``name`` whose weights are a file on the node (what a slot server mounts)."""
    weights = node_folder(tmp_path, f"{MODELS}/{name}.gguf")
    weights.parent.mkdir(parents=True, exist_ok=True)
    weights.write_bytes(b"weights the simulator's router plays")
    await admin.create(ISVC, member_body(name), namespace)


async def setup_slot_pool(
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    members: tuple[str, ...] = ("a", "b"),
    scheduling: dict[str, str] | None = None,
) -> None:
    """Members a and b (weights on the node), pool ``gpu-0`` with a slot server (a warmed as the
    default), router ``router``; returns once a is loaded and the pool Ready."""
    for name in members:
        await create_member(admin, namespace, tmp_path, name)
    body = pool_body(
        POOL_NAME, list(members), "a", "120s", scheduling=scheduling or {"minResidency": "0s"}
    )
    body["spec"]["slotServer"] = {"args": ["--parallel", "2"]}
    await admin.create(POOL, body, namespace)
    await admin.create(ROUTER, router_body("router", POOL_NAME), namespace)
    await eventually(lambda: resident_is(admin, namespace, "a"), timeout=TIMEOUT, what="a loaded")


async def resident_is(admin: KubeClient, namespace: str, member: str) -> bool:
    status = (await admin.get(POOL, POOL_NAME, namespace)).get("status") or {}
    return status.get("residentMember") == member and status.get("phase") == "Ready"


async def slot_url(admin: KubeClient, namespace: str) -> str:
    """The slot server's address, from its Service's EndpointSlice."""
    selector = f"{SERVICE_NAME_LABEL}={slot_server_name(POOL_NAME)}"
    slices = (await admin.list(ENDPOINT_SLICES, namespace, label_selector=selector)).items
    (url,) = ready_urls(slices, MEMBER_PORT_NAME)
    return url


async def loaded_models(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    listed = (await http.get(f"{url}/models")).json()["data"]
    return {m["id"]: m["status"]["value"] for m in listed}


async def slot_pods(admin: KubeClient, namespace: str) -> list[str]:
    found = await admin.list(PODS, namespace, label_selector=f"{SLOT_SERVER_LABEL}={POOL_NAME}")
    return sorted(p["metadata"]["uid"] for p in found.items)


async def member_pods(admin: KubeClient, namespace: str) -> list[str]:
    found = await admin.list(
        PODS, namespace, label_selector="inference.modelpool.dev/inferenceservice"
    )
    return sorted(p["metadata"]["name"] for p in found.items)


async def phase_of(admin: KubeClient, namespace: str, member: str) -> tuple[str, str]:
    status = (await admin.get(ISVC, member, namespace)).get("status") or {}
    ready = next(c for c in status.get("conditions") or () if c["type"] == "Ready")
    return str(status.get("phase")), str(ready["reason"])


async def test_a_swap_loads_and_unloads_in_one_server_and_starts_no_pod(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """b is asked for while a is loaded: the proxy holds the request, the pool unloads a (idle)
    and loads b in the same server, and the request is answered by b. No member pod ever runs,
    the server's pod is the one that was there, and the members' phases say where each is."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=0.3)
    await setup_slot_pool(admin, namespace, tmp_path)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    server = await slot_pods(admin, namespace)
    url = await slot_url(admin, namespace)
    async with http_client(timeout=TIMEOUT) as http:
        assert await loaded_models(http, url) == {"model-a": "loaded", "model-b": "unloaded"}
        a = await ask(http, proxy, "model-a")
        assert (a.status, a.answered_by) == (200, "model-a"), a
        b = await ask(http, proxy, "model-b")
        assert (b.status, b.answered_by) == (200, "model-b"), b
        await eventually(lambda: resident_is(admin, namespace, "b"), timeout=10, what="b resident")
        assert await loaded_models(http, url) == {"model-a": "unloaded", "model-b": "loaded"}
        back = await ask(http, proxy, "model-a")
        assert (back.status, back.answered_by) == (200, "model-a"), back
    assert await slot_pods(admin, namespace) == server, "the slot server's pod was replaced"
    assert await member_pods(admin, namespace) == [], "a member ran in a pod of its own"

    async def phases() -> bool:
        return (await phase_of(admin, namespace, "a"), await phase_of(admin, namespace, "b")) == (
            ("Ready", "LoadedInSlotServer"),
            ("Stopped", "NotLoaded"),
        )

    await eventually(phases, timeout=10, what="a Ready in the slot server, b not loaded")


async def test_a_model_with_a_request_in_flight_is_not_unloaded_until_it_is_answered(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """A long request to a is in flight when an intent names b (written here, as a driver
    would): the pool closes admission to a and waits (the fenced drain: the proxy reports the
    request in flight on a; or, had it not, ``SwapDeferred`` ``PodsBusy`` from
    ``/slots?model=model-a``) until a has answered it in full, and only then is b loaded. An unload
    that did not wait would kill a's child mid-answer (a 502)."""
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=0.3, token_seconds=0.05
    )
    await setup_slot_pool(admin, namespace, tmp_path)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    url = await slot_url(admin, namespace)
    seen: list[tuple[float, str, dict[str, str]]] = []

    async def watch() -> None:
        async with http_client(timeout=5) as http:
            while True:
                status = (await admin.get(POOL, POOL_NAME, namespace)).get("status") or {}
                deferred = next(
                    (
                        c["reason"]
                        for c in status.get("conditions") or ()
                        if c["type"] == "SwapDeferred" and c["status"] == "True"
                    ),
                    "",
                )
                if "a" in (status.get("admissionClosed") or ()):
                    deferred = deferred or "AdmissionClosed"
                seen.append((time.monotonic(), deferred, await loaded_models(http, url)))
                await anyio.sleep(0.1)

    async with (
        http_client(timeout=TIMEOUT) as http,
        anyio.create_task_group() as group,
    ):
        group.start_soon(watch)

        async def intent_soon() -> None:
            await anyio.sleep(0.8)
            await admin.create(
                LEASES, new_pool_lease(namespace, POOL_NAME, "test", "b", 60), namespace
            )

        group.start_soon(intent_soon)
        a = await ask(http, proxy, "model-a", max_tokens=80, ignore_eos=True)  # 4 s of tokens
        await eventually(lambda: resident_is(admin, namespace, "b"), timeout=10, what="b loaded")
        group.cancel_scope.cancel()
    assert (a.status, a.answered_by) == (200, "model-a"), a
    waited = [at for at, reason, _ in seen if reason in ("PodsBusy", "AdmissionClosed")]
    assert waited, "the drain never waited"
    assert min(waited) < a.ended, "the drain did not wait while a's request was in flight"
    b_loaded = [at for at, _, models in seen if models.get("model-b") in ("loading", "loaded")]
    assert b_loaded, "b was never seen loading"
    assert min(b_loaded) >= a.ended - 0.2, "b was loaded while a's request was in flight"
    assert all(list(m.values()).count("unloaded") >= 1 for _, _, m in seen), "two models loaded"


async def test_three_teams_share_the_slot_server_and_every_request_meets_its_bound(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Three teams, one per model, ask with short pauses through two proxies for 30 s, all three
    models sharing one server that holds one at a time: every request is answered by the model it
    asked for, each within the scheduler's bound, no team is starved, and the monitor never sees
    two models loaded. The server's pod is never replaced."""
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=0.5, token_seconds=0.02
    )
    await setup_slot_pool(admin, namespace, tmp_path, ("a", "b", "c"), SCHEDULING)
    server = await slot_pods(admin, namespace)
    proxies = await start_proxies(cluster, admin, namespace, tmp_path, started, 2)
    bound = wait_bound(SETTINGS, members=3, drain=2.0, swap=SWAP_ALLOWANCE)
    await three_teams_for(proxies, 30.0, bound)
    assert await slot_pods(admin, namespace) == server, "the slot server's pod was replaced"
    assert await member_pods(admin, namespace) == [], "a member ran in a pod of its own"
