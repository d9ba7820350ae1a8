"""The KV cache carried across a swap (``spec.kvCache``), against a real API server.

The operator runs as its own process under its ServiceAccount; the node stand-in plays the node
(readiness gates and hostPath volumes as a kubelet honours them) with simulators whose slot
save/restore answer as llama-server's do and whose cached prompt prefix shows in
``timings.cache_n`` / ``prompt_n``. The tests play the activator through the pool's Lease, as
``test_modelpool`` does; the pool invariant monitor watches every test (``start_node``).

Orderings are proven from resourceVersions, never from clocks; nothing is asserted on timing.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import EVENTS, PODS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.kubectl import kubectl
from tests.e2e.operator_process import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    metric_sum,
    start_node,
    stopped_at_exit,
)
from tests.e2e.test_modelpool import (
    ISVC,
    LOAD_SECONDS,
    POOL,
    TIMEOUT,
    TOKEN_SECONDS,
    isvc_body,
    isvc_phase,
    ready_url,
    recorded,
    rv,
    settled,
    take_lease,
    wait_pool,
)
from tests.e2e.waiting import eventually

Object = dict[str, Any]
GATE = "inference.modelpool.dev/kv-cache-restored"
#: A prompt long enough that a cache hit is unmistakable: 40 tokens (36 words and 4 markers).
PROMPT = "the quick brown fox jumps over the lazy dog " * 4
PROMPT_TOKENS = 40
#: Where the stand-in keeps a hostPath ``/P``: ``LOG_DIR/hostpath/P`` (NodeSettings.host_root).
DEFAULT_HOST_PATH = "var/lib/modelpool/kv-cache"


@pytest.fixture
def node(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[NodeStandInProcess]:
    started: list[LocalProcess]
    with stopped_at_exit() as started:
        yield start_node(
            cluster,
            tmp_path,
            started,
            namespace=namespace,
            load_seconds=LOAD_SECONDS,
            token_seconds=TOKEN_SECONDS,
        )


def kv_member(name: str, **kv_cache: Any) -> Object:
    body = isvc_body(name)
    body["spec"]["kvCache"] = {"enabled": True, **kv_cache}
    return body


async def setup_pool(admin: KubeClient, namespace: str, a: Object, b: Object) -> None:
    """Members ``a`` and ``b`` in pool ``gpu`` (default a), waited until a is resident."""
    await admin.create(ISVC, a, namespace)
    await admin.create(ISVC, b, namespace)
    await admin.create(POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
    await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")


async def swap_to(admin: KubeClient, namespace: str, member: str) -> None:
    await take_lease(admin, namespace, "gpu", target=member)
    await wait_pool(admin, namespace, "gpu", settled(member), f"{member} to be resident")
    await isvc_phase(admin, namespace, member, "Ready")


async def ask(admin: KubeClient, namespace: str, member: str) -> dict[str, Any]:
    """The long prompt to ``member``'s ready endpoint; returns the answer's ``timings``."""
    url = await ready_url(admin, namespace, member)
    body = {"model": member, "messages": [{"role": "user", "content": PROMPT}]}
    async with http_client(timeout=30, trust_env=False) as http:
        response = await http.post(f"{url}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == member
    timings: dict[str, Any] = response.json()["timings"]
    return timings


async def kv_status(admin: KubeClient, namespace: str, name: str) -> Object:
    found: Object = ((await admin.get(ISVC, name, namespace)).get("status") or {}).get(
        "kvCache"
    ) or {}
    return found


async def events_for(admin: KubeClient, namespace: str, name: str, reason: str) -> list[Object]:
    async def found() -> list[Object] | None:
        items = (await admin.list(EVENTS, namespace)).items
        hits = [e for e in items if e["regarding"]["name"] == name and e["reason"] == reason]
        return hits or None

    return await eventually(found, timeout=TIMEOUT, what=f"a {reason} event on {name}")


async def kv_operations(
    operator: OperatorProcess, namespace: str, name: str, **labels: str
) -> float:
    return await metric_sum(operator.metrics_url, "modelpool_kv_cache_operations_total",
                            namespace=namespace, inferenceservice=name, **labels)  # fmt: skip


def conditions(pod: Object) -> dict[str, Object]:
    return {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or ()}


def status_of(pod: Object, type_: str) -> str | None:
    return (conditions(pod).get(type_) or {}).get("status")


async def test_an_enabled_member_comes_back_with_its_kv_cache_and_is_ready_only_after_it(
    admin: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,
    cluster: TestCluster,
) -> None:
    await setup_pool(admin, namespace, kv_member("a"), isvc_body("b"))
    (pod_a,) = (await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}=a")).items
    assert conditions(pod_a)[GATE]["reason"] == "NothingToRestore", "a first start: no cache"
    cold = await ask(admin, namespace, "a")
    assert (cold["prompt_n"], cold["cache_n"]) == (PROMPT_TOKENS, 0)

    async with recorded(admin, namespace) as down:
        await swap_to(admin, namespace, "b")  # a saves its slot before it is scaled down
    saved = (await kv_status(admin, namespace, "a"))["lastSave"]
    save_recorded = [
        o for k, _, o in down if k == "isvc" and o["metadata"]["name"] == "a"
        and ((o.get("status") or {}).get("kvCache") or {}).get("lastSave")
    ]  # fmt: skip
    a_terminating = [
        o for k, _, o in down if k == "pod" and o["metadata"]["uid"] == pod_a["metadata"]["uid"]
        and o["metadata"].get("deletionTimestamp")
    ]  # fmt: skip
    assert save_recorded, "the save was never recorded"
    assert a_terminating, "a's pod was never seen Terminating"
    assert rv(save_recorded[0]) < rv(a_terminating[0]), "a was scaled down before its save"
    assert (saved["outcome"], saved["slots"], saved["pod"]) == (
        "Succeeded", [0], pod_a["metadata"]["name"]
    )  # fmt: skip
    assert saved["tokens"] > PROMPT_TOKENS  # the prompt and the reply
    b_cold = await ask(admin, namespace, "b")
    assert b_cold["prompt_n"] == PROMPT_TOKENS
    (pod_b,) = (await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}=b")).items
    assert GATE not in conditions(pod_b), "a member without the cache has no gate"
    assert not (pod_b["spec"].get("readinessGates"))

    async with recorded(admin, namespace) as events:
        await swap_to(admin, namespace, "a")
    warm = await ask(admin, namespace, "a")
    assert (warm["prompt_n"], warm["cache_n"]) == (1, PROMPT_TOKENS - 1), warm

    kv = await kv_status(admin, namespace, "a")
    restored = kv["lastRestore"]
    assert (restored["outcome"], restored["slots"], restored["tokens"]) == (
        "Succeeded", [0], saved["tokens"]
    )  # fmt: skip
    assert kv["summary"] == (
        f"saved 1 slot ({saved['tokens']} tokens); restored 1 slot ({saved['tokens']} tokens)"
    )
    _, wide, _ = await kubectl(cluster, "get", "isvc", "a", "-n", namespace, "-o", "wide")
    assert "KV-CACHE" in wide
    assert kv["summary"] in wide

    # The watch's order: the new pod's server was up (ContainersReady) while the pod was not
    # Ready; the restore was recorded; only then did the pod turn Ready, with the gate True.
    new_pod = restored["pod"]
    assert new_pod != pod_a["metadata"]["name"]
    pod_events = [o for k, _, o in events if k == "pod" and o["metadata"]["name"] == new_pod]
    held = [
        o for o in pod_events
        if status_of(o, "ContainersReady") == "True" and status_of(o, "Ready") != "True"
    ]  # fmt: skip
    ready = [o for o in pod_events if status_of(o, "Ready") == "True"]
    recorded_restore = [
        o for k, _, o in events if k == "isvc" and o["metadata"]["name"] == "a"
        and ((o.get("status") or {}).get("kvCache") or {}).get("lastRestore", {}).get("pod")
        == new_pod
    ]  # fmt: skip
    assert held, "the pod was never seen held back by its gate"
    assert ready
    assert recorded_restore
    assert rv(held[0]) < rv(recorded_restore[0]) < rv(ready[0])
    assert conditions(ready[0])[GATE]["status"] == "True"
    assert conditions(ready[0])[GATE]["reason"] == "Restored"

    # The control: b served the same prompt before its swap and comes back without a cache.
    await swap_to(admin, namespace, "b")
    assert (await ask(admin, namespace, "b"))["prompt_n"] == PROMPT_TOKENS
    assert await kv_status(admin, namespace, "b") == {}
    assert await kv_operations(operator, namespace, "a", operation="save", outcome="Succeeded") == 2
    assert await kv_operations(operator, namespace, "a", operation="restore") == 1
    await events_for(admin, namespace, "a", "KvCacheRestored")


async def test_a_member_given_back_for_idleness_is_saved_and_comes_back_warm(
    admin: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,
) -> None:
    """Giving an idle slot back (docs/modelpool.md) is the same release as a swap's: a member
    with ``kvCache`` is saved before the pool frees the slot (``idleAction: Release``), and the
    request that brings it back finds its prompt cached."""
    await setup_pool(admin, namespace, kv_member("a"), isvc_body("b"))
    assert (await ask(admin, namespace, "a"))["cache_n"] == 0
    idle = {"spec": {"scheduling": {"idleAfter": "2s", "idleAction": "Release"}}}
    await admin.patch(POOL, "gpu", idle, namespace)

    def given_back(pool: Object) -> bool:
        return (pool.get("status") or {}).get("phase") == "Idle"

    await wait_pool(admin, namespace, "gpu", given_back, "the slot given back")
    saved = (await kv_status(admin, namespace, "a"))["lastSave"]
    assert (saved["outcome"], saved["slots"]) == ("Succeeded", [0])

    await swap_to(admin, namespace, "a")  # the next request's claim
    warm = await ask(admin, namespace, "a")
    assert (warm["prompt_n"], warm["cache_n"]) == (1, PROMPT_TOKENS - 1), warm
    restored = (await kv_status(admin, namespace, "a"))["lastRestore"]
    assert (restored["outcome"], restored["tokens"]) == ("Succeeded", saved["tokens"])


async def test_a_save_that_fails_is_an_event_and_a_metric_and_the_swap_completes(
    admin: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,
    tmp_path: Path,
) -> None:
    await setup_pool(admin, namespace, kv_member("a"), isvc_body("b"))
    await ask(admin, namespace, "a")
    # The node's folder for a's cache is replaced by a file: the server cannot write there.
    folder = tmp_path / "simulators" / "hostpath" / DEFAULT_HOST_PATH / namespace / "a"
    assert folder.is_dir(), f"the stand-in made no hostPath folder at {folder}"
    shutil.rmtree(folder)
    folder.write_text("not a folder")

    await swap_to(admin, namespace, "b")
    saved = (await kv_status(admin, namespace, "a"))["lastSave"]
    assert saved["outcome"] == "Failed"
    assert "Unable to save slot" in saved["message"]
    (event,) = await events_for(admin, namespace, "a", "KvCacheSaveFailed")
    assert event["type"] == "Warning"
    assert await kv_operations(operator, namespace, "a", operation="save", outcome="Failed") == 1

    # Back to a: nothing to restore (the failed save left nothing), and a is Ready at once.
    folder.unlink()
    await swap_to(admin, namespace, "a")
    (pod_a,) = (await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}=a")).items
    assert conditions(pod_a)[GATE]["reason"] == "NothingToRestore"
    assert (await ask(admin, namespace, "a"))["prompt_n"] == PROMPT_TOKENS


async def test_a_restore_that_hangs_holds_readiness_no_longer_than_its_bound(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    # a's simulator hangs every restore for 10 minutes; its bound is 2 s.
    a = kv_member("a", timeoutSeconds=2)
    a["spec"]["args"] += ["--sim-slot-restore-seconds", "600"]
    await setup_pool(admin, namespace, a, isvc_body("b"))
    await ask(admin, namespace, "a")
    await swap_to(admin, namespace, "b")
    assert (await kv_status(admin, namespace, "a"))["lastSave"]["outcome"] == "Succeeded"

    await swap_to(admin, namespace, "a")  # Ready well before the 600 s restore could answer
    restored = (await kv_status(admin, namespace, "a"))["lastRestore"]
    assert restored["outcome"] == "TimedOut"
    assert restored.get("slots", []) == [], "no slot was restored"
    (pod_a,) = (await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}=a")).items
    gate = conditions(pod_a)[GATE]
    assert (gate["status"], gate["reason"]) == ("True", "RestoreFailed")
    assert status_of(pod_a, "Ready") == "True"
    (event,) = await events_for(admin, namespace, "a", "KvCacheRestoreFailed")
    assert event["type"] == "Warning"
    assert (
        await kv_operations(operator, namespace, "a", operation="restore", outcome="TimedOut") == 1
    )
    assert (await ask(admin, namespace, "a"))["prompt_n"] == PROMPT_TOKENS
