"""A pool of two real llama.cpp servers, swapped through the router-proxy.

Every other pool test plays its members with the simulator; here the node stand-in is given the
real ``llama-server`` (``sim-node --llama-server``) and each member's ``--model`` is a tiny GGUF
model generated for it (two seeds: two different models, served as ``tiny-a`` and ``tiny-b``).
The operator, the stand-in and one router-proxy are separate processes; the pool invariant
monitor (at most one member's server alive at any instant, read from ``/proc``) watches it all.

What the real servers prove that the simulator cannot: the pool controller's idle gate reads the
real ``/slots`` (a completion streamed straight to member a, past the proxy, defers the swap
with ``PodsBusy`` and is not cut short), readiness follows the real ``/health``, and each answer
names the model it came from. And the KV cache carried across a swap on the real server
(``spec.kvCache`` on one member, the other the control): the first request after the swap back
is served from the restored slot, as the real ``timings`` show.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.envtest.llamaserver import find_llama_server
from controlplane.envtest.tinymodel import TinyModelSpec, tiny_model
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import ready_urls
from controlplane.runtime.resources import ENDPOINT_SLICES, PODS
from controlplane.standin.process import MEMBER_ENV
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import start_proxies
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
ROUTER = ModelRouter.resource()
TIMEOUT = 90.0
#: The pool's bound for a held request, and the held request's own patience: the request for b
#: waits for a's whole stream, whose length in seconds is the machine's (about 7 s alone here,
#: 90 s and more beside the e2e tier's other workers and CI's niced kind builds, at -O1).
SWAP_BUDGET_SECONDS = 240
HELD_TIMEOUT = SWAP_BUDGET_SECONDS + 30.0
#: Long enough for a stream of several thousand tokens: it keeps member a busy for seconds, while
#: the test watches the pool defer the swap.
CONTEXT = 8192
DIRECT_STREAM_TOKENS = 6000
Object = dict[str, Any]


def isvc_body(name: str, model: Path, replicas: int, *, kv_cache: bool = False) -> Object:
    body: Object = {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": f"tiny-{name}", "source": str(model)},
            "args": ["--parallel", "1", "--ctx-size", str(CONTEXT)],
            "replicas": replicas,
        },
    }
    if kv_cache:
        body["spec"]["kvCache"] = {"enabled": True}
    return body


async def setup_pool(admin: KubeClient, namespace: str, *, kv_cache: tuple[str, ...] = ()) -> None:
    """Members a (resident; seed 1) and b (seed 2), pool ``gpu-0``, router ``router``; the
    members named in ``kv_cache`` have ``spec.kvCache`` enabled."""
    models = {
        name: tiny_model(TinyModelSpec(seed=seed, context_length=CONTEXT))
        for name, seed in (("a", 1), ("b", 2))
    }
    for name, replicas in (("a", 1), ("b", 0)):
        body = isvc_body(name, models[name], replicas, kv_cache=name in kv_cache)
        await admin.create(ISVC, body, namespace)
    budget = f"{SWAP_BUDGET_SECONDS}s"
    await admin.create(POOL, pool_body("gpu-0", ("a", "b"), "a", budget), namespace)
    router = {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "metadata": {"name": "router"},
        "spec": {"backends": [{"name": "gpu", "poolRef": {"name": "gpu-0"}}]},
    }
    await admin.create(ROUTER, router, namespace)
    await wait_pool(admin, namespace, lambda s: s.get("residentMember") == "a"
                    and s.get("phase") == "Ready", "a resident and Ready")  # fmt: skip


async def wait_pool(admin: KubeClient, namespace: str, check: Any, what: str) -> Object:
    async def reached() -> Object | None:
        status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
        return status if check(status) else None

    return await eventually(reached, timeout=TIMEOUT, what=what)


def deferred_busy(status: Object) -> bool:
    conditions = status.get("conditions") or ()
    found = next((c for c in conditions if c["type"] == "SwapDeferred"), None)
    return found is not None and (found["status"], found["reason"]) == ("True", "PodsBusy")


def member_executables(namespace: str) -> dict[str, str]:
    """``{member: executable}`` for every live process that carries a member identity of
    ``namespace`` (what the stand-in started, read from ``/proc`` as the monitor reads it)."""
    found: dict[str, str] = {}
    prefix = f"{MEMBER_ENV}={namespace}/".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            executable = os.readlink(f"/proc/{entry}/exe")
        except OSError:
            continue
        for variable in environ:
            if variable.startswith(prefix):
                found[variable[len(prefix) :].decode()] = executable
    return found


async def member_url(admin: KubeClient, namespace: str, member: str) -> str:
    async def found() -> str | None:
        slices = await admin.list(
            ENDPOINT_SLICES, namespace, label_selector=f"kubernetes.io/service-name={member}"
        )
        urls = ready_urls(slices.items)
        return urls[0] if urls else None

    return await eventually(found, timeout=TIMEOUT, what=f"a ready endpoint of {member}")


#: What an answer that only has to name its model generates. The tiny models' weights are random:
#: with no bound, a completion runs until it happens on an end token, or to the whole context.
ANSWER_TOKENS = 8


def chat(model: str, **extra: Any) -> Object:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hello pool"}],
        "max_tokens": ANSWER_TOKENS,
        **extra,
    }


async def test_a_pool_of_two_real_llama_servers_swaps_through_the_proxy_and_each_answers(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    binary = find_llama_server()  # a missing build fails here, saying how to build it
    start_node(cluster, tmp_path, started, namespace=namespace, llama_server=binary)
    await setup_pool(admin, namespace)
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)
    assert member_executables(namespace) == {"a": str(binary.resolve())}

    async with http_client(timeout=TIMEOUT, trust_env=False) as http:
        answer = await http.post(f"{proxy.url}/v1/chat/completions", json=chat("tiny-a"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == "tiny-a"

        # A long completion straight to member a, past the proxy: only a's /slots knows of it.
        url_a = await member_url(admin, namespace, "a")
        held: list[httpx.Response] = []
        payloads: list[str] = []
        request = chat("tiny-a", stream=True, max_tokens=DIRECT_STREAM_TOKENS, ignore_eos=True)
        async with (
            http.stream("POST", f"{url_a}/v1/chat/completions", json=request) as stream,
            anyio.create_task_group() as group,
        ):
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            async for line in lines:
                if line.startswith("data: "):
                    payloads.append(line.removeprefix("data: "))
                    if len(payloads) >= 2:  # the role, then content: a's slot is processing
                        break

            async def ask_b() -> None:
                url = f"{proxy.url}/v1/chat/completions"
                held.append(await http.post(url, json=chat("tiny-b"), timeout=HELD_TIMEOUT))

            group.start_soon(ask_b)
            status = await wait_pool(admin, namespace, deferred_busy, "the swap deferred")
            assert (status["residentMember"], status.get("pendingMember")) == ("a", "b")
            assert not held, "b answered while a was still generating"
            async for line in lines:
                if line.startswith("data: "):
                    payloads.append(line.removeprefix("data: "))
        # a finished its completion whole: the drain waited for the real /slots to say idle.
        assert payloads[-1] == "[DONE]"
        last = msgspec.json.decode(payloads[-2])
        assert last["choices"][0]["finish_reason"] == "length"
        assert last["timings"]["predicted_n"] == DIRECT_STREAM_TOKENS
        [answer_b] = held
        assert answer_b.status_code == 200, answer_b.text
        assert answer_b.json()["model"] == "tiny-b"
        assert member_executables(namespace) == {"b": str(binary.resolve())}

        # And back: a is brought up again from its own model file.
        answer = await http.post(f"{proxy.url}/v1/chat/completions", json=chat("tiny-a"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == "tiny-a"
        status = await wait_pool(
            admin, namespace, lambda s: s.get("residentMember") == "a", "a resident again"
        )
        assert not deferred_busy(status)


#: A prompt of a few hundred tokens (the tiny models share llama.cpp's SPM vocabulary): a cache
#: hit is unmistakable in ``timings.prompt_n``.
LONG_PROMPT = " ".join(f"word{i} alpha" for i in range(100))
#: Where the stand-in keeps the default ``spec.kvCache.hostPath`` (its ``LOG_DIR/hostpath``).
KV_GATE = "inference.modelpool.dev/kv-cache-restored"
KV_HOST_FOLDER = Path("simulators/hostpath/var/lib/modelpool/kv-cache")


async def test_real_members_carry_the_kv_cache_across_a_swap_and_the_control_does_not(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    binary = find_llama_server()
    start_node(cluster, tmp_path, started, namespace=namespace, llama_server=binary)
    await setup_pool(admin, namespace, kv_cache=("a",))  # b is the control
    (proxy,) = await start_proxies(cluster, admin, namespace, tmp_path, started, 1)

    async with http_client(timeout=TIMEOUT, trust_env=False) as http:

        async def ask(model: str) -> Object:
            """The long prompt through the proxy (a swap when ``model`` is not resident)."""
            body = chat(model)
            body["messages"][0]["content"] = LONG_PROMPT
            answer = await http.post(f"{proxy.url}/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["model"] == model
            timings: Object = answer.json()["timings"]
            return timings

        cold_a = await ask("tiny-a")
        prompt_tokens = cold_a["prompt_n"]
        assert prompt_tokens > 200, cold_a
        cold_b = await ask("tiny-b")  # swap a -> b: a's slot saved before a is scaled down
        assert cold_b["prompt_n"] == prompt_tokens, "the same prompt, the same vocabulary"
        saved = (await kv_status(admin, namespace, "a"))["lastSave"]
        assert (saved["outcome"], saved["slots"]) == ("Succeeded", [0]), saved
        assert saved["tokens"] > prompt_tokens  # the prompt and the reply
        # The real server wrote it into the node's folder for a (--slot-save-path rewritten).
        slot_file = tmp_path / KV_HOST_FOLDER / namespace / "a" / "slot-0.bin"
        assert slot_file.stat().st_size > 0

        back_a = await ask("tiny-a")  # swap b -> a: a restored before it counts Ready
        # The gate a's new pod was held by until the restore, opened by it.
        (pod_a,) = (await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}=a")).items
        gate = next(c for c in pod_a["status"]["conditions"] if c["type"] == KV_GATE)
        assert (gate["status"], gate["reason"]) == ("True", "Restored"), gate
        back_b = await ask("tiny-b")  # swap a -> b: b served the same prompt before, no cache

    # The figures: after the swap back, a processes one token of the prompt, b all of it.
    assert (back_a["prompt_n"], back_a["cache_n"]) == (1, prompt_tokens - 1), back_a
    assert (back_b["prompt_n"], back_b.get("cache_n", 0)) == (prompt_tokens, 0), back_b
    kv = await kv_status(admin, namespace, "a")
    restored = kv["lastRestore"]
    assert (restored["outcome"], restored["slots"], restored["tokens"]) == (
        "Succeeded", [0], saved["tokens"]
    )  # fmt: skip
    assert restored["pod"] == pod_a["metadata"]["name"]
    assert kv["lastSave"]["outcome"] == "Succeeded"  # saved again on the last swap
    assert await kv_status(admin, namespace, "b") == {}
    assert not list((tmp_path / KV_HOST_FOLDER / namespace).glob("b*")), "b saved nothing"
    print(
        f"prompt {prompt_tokens} tokens; after the swap back: a (kvCache) prompt_n "
        f"{back_a['prompt_n']} cache_n {back_a['cache_n']}, b (control) prompt_n "
        f"{back_b['prompt_n']}; save {saved['durationMilliseconds']} ms, restore "
        f"{restored['durationMilliseconds']} ms"
    )


async def kv_status(admin: KubeClient, namespace: str, name: str) -> Object:
    status = (await admin.get(ISVC, name, namespace)).get("status") or {}
    found: Object = status.get("kvCache") or {}
    return found
