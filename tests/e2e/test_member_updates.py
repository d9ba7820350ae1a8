"""An edit of a serving member goes through the idle gate (docs/inferenceservice.md, "Changing a
serving member"): a stream in flight ends whole, and the change reaches the Deployment once idle.

The operator runs under its ServiceAccount, the node stand-in plays the members as simulators
(each token 20 ms, so a 250-token stream lasts about 5 s), and, for the pool member, two
``controlplane router-proxy`` processes carry the requests. Every test runs under the pool
invariant monitor. A stream that was cut would end without its ``[DONE]``: directly from the
simulator as a broken connection, through a proxy as an ``upstream_disconnected`` error event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from controlplane.api.v1alpha1 import ModelPool
from controlplane.runtime.client import KubeClient
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
    server_container,
    streaming,
)
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, isvc_body, start_proxies
from tests.e2e.waiting import eventually

# Marked here, not only by conftest after collection: anyio must see the mark while pytest
# parametrizes, or the table's parameters are lost.
pytestmark = pytest.mark.anyio

POOL = ModelPool.resource()
TIMEOUT = 60.0
EDITED_ARGS = ["--parallel", "2", "--ctx-size", "4096"]
#: What a user changes of a serving member (a merge patch of its spec), and how the edit shows in
#: the server container of its Deployment.
EDITS: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = {
    "args": ({"args": EDITED_ARGS}, lambda server: "4096" in server["args"]),
    "image": ({"image": "llama-server:edited"}, lambda s: s["image"] == "llama-server:edited"),
    "pod": (
        {"pod": {"env": [{"name": "EDITED", "value": "1"}]}},
        lambda s: {"name": "EDITED", "value": "1"} in (s.get("env") or ()),
    ),
}


async def edit(admin: KubeClient, namespace: str, name: str, what: str = "args") -> dict[str, Any]:
    """What a user tuning the server does (a merge patch of ``spec``: :data:`EDITS`); returns
    the ``UpdatePending`` condition once it says the change waits."""
    await admin.patch(ISVC, name, {"spec": EDITS[what][0]}, namespace)

    async def waiting() -> dict[str, Any] | None:
        found = await condition(admin, namespace, name, "UpdatePending")
        return found if found.get("status") == "True" else None

    return await eventually(waiting, timeout=TIMEOUT, what=f"the edit of {name} pending")


async def changed_and_ready(
    admin: KubeClient, namespace: str, name: str, old: set[str], what: str = "args"
) -> bool:
    """The edit reached the Deployment, a new pod serves it, and nothing waits any more."""
    if not EDITS[what][1](await server_container(admin, namespace, name)):
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


@pytest.mark.parametrize("what", sorted(EDITS))
async def test_an_edit_of_a_busy_member_no_pool_lists_waits_for_its_stream_then_goes_in(
    what: str,
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
    before = await server_container(admin, namespace, "solo")
    old_pods = await pod_names(admin, namespace, "solo")

    async with streaming(url, "model-solo") as (stream, ended):
        pending = await edit(admin, namespace, "solo", what)
        assert pending["reason"] == "WaitingForIdle", pending
        assert "slot(s) processing" in pending["message"], pending
        assert not ended.is_set(), "the stream ended before the check: make it longer"
        assert await server_container(admin, namespace, "solo") == before, "applied while busy"
        assert await pod_names(admin, namespace, "solo") == old_pods
    assert stream.whole, stream
    assert stream.tokens == STREAM_TOKENS, stream

    await eventually(
        lambda: changed_and_ready(admin, namespace, "solo", old_pods, what),
        timeout=TIMEOUT,
        what="the edit in the Deployment and a new pod Ready",
    )
    await events_written(
        admin, namespace, "InferenceService", "solo", {"UpdatePending", "UpdateApplied"}
    )


@pytest.mark.parametrize("what", sorted(EDITS))
async def test_an_edit_of_a_pool_resident_under_load_is_carried_out_by_the_pools_drain(
    what: str,
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
    await serve_pool_of_two(cluster, admin, namespace, tmp_path, started)
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
        http_client(timeout=90, trust_env=False) as http,
        anyio.create_task_group() as group,
    ):
        group.start_soon(loop, http)
        async with streaming(streamer.url, "model-a") as (stream, ended):
            pending = await edit(admin, namespace, "a", what)
            assert pending["reason"] == "WaitingForPool", pending
            assert not ended.is_set(), "the stream ended before the check: make it longer"
            running = await server_container(admin, namespace, "a")
            assert not EDITS[what][1](running), "applied while busy"
        assert stream.whole, stream
        assert stream.tokens == STREAM_TOKENS, stream
        await eventually(
            lambda: changed_and_ready(admin, namespace, "a", old_pods, what),
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
