"""The ModelPool controller in the operator process, against a real API server.

The operator runs as a separate process under its own ServiceAccount; the node stand-in gives
member Deployments pods backed by simulator processes (1.5 s model load, 50 ms per token). The
tests play the activator: they write the pool's Lease (``modelpool-<pool>``, holder plus the
``inference.modelpool.dev/target`` annotation) and never write a member. The pool's decision is
read where it lives, in the pool's own status (``status.members[].slot``: ``Granted`` or
``Released``), and what runs from each member's Deployment (``spec.replicas``); a member's own
``spec.replicas`` is the user's, ignored while a pool lists it, and no test expects the operator to
write it.

Orderings are proven from resourceVersions (one etcd orders every write), never from clocks;
waits have generous deadlines and nothing is asserted on timing.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.activation import (
    claimed,
    new_pool_lease,
    pool_lease_name,
    released,
)
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.controllers.modelpool import CONTROLLER_NAME
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import ready_urls
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, EVENTS, LEASES, PODS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    metric_sum,
    start_node,
    stopped_at_exit,
)
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
TIMEOUT = 60.0
LOAD_SECONDS = 1.5
TOKEN_SECONDS = 0.05
HOLDER = "e2e-activator"
Object = dict[str, Any]


@pytest.fixture
def node(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[NodeStandInProcess]:
    """The node stand-in for this test's namespace; stopping it takes its pods along."""
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


# -- objects -------------------------------------------------------------------------------------


def isvc_body(name: str, replicas: int | None = 0) -> Object:
    spec: Object = {
        "model": {"name": name, "source": f"/models/{name}.gguf"},
        "args": ["--parallel", "2"],
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": spec,
    }


def condition(pool: Object, type_: str) -> Object:
    conditions: list[Object] = (pool.get("status") or {}).get("conditions") or []
    found = [c for c in conditions if c["type"] == type_]
    assert found, f"no {type_} condition in {pool.get('status')}"
    return found[0]


async def wait_pool(
    admin: KubeClient, namespace: str, name: str, check: Callable[[Object], bool], what: str
) -> Object:
    async def reached() -> Object | None:
        pool = await admin.get(POOL, name, namespace)
        return pool if check(pool) else None

    return await eventually(reached, timeout=TIMEOUT, what=what)


def settled(resident: str) -> Callable[[Object], bool]:
    """Ready with ``resident`` holding the slot, nothing pending, status of this generation."""

    def check(pool: Object) -> bool:
        status = pool.get("status") or {}
        return (
            status.get("phase") == "Ready"
            and status.get("residentMember") == resident
            and not status.get("pendingMember")
            and status.get("observedGeneration") == pool["metadata"]["generation"]
        )

    return check


def deferred(reason: str, *words: str) -> Callable[[Object], bool]:
    def check(pool: Object) -> bool:
        conditions = (pool.get("status") or {}).get("conditions") or ()
        found = next((c for c in conditions if c["type"] == "SwapDeferred"), None)
        return (
            found is not None
            and (found["status"], found["reason"]) == ("True", reason)
            and all(word in found["message"] for word in words)
        )

    return check


def slots(pool: Object) -> dict[str, str | None]:
    """The pool's decision about each member, by name: ``status.members[].slot`` (``Granted``,
    ``Released``, or None: not decided)."""
    members: list[Object] = (pool.get("status") or {}).get("members") or []
    return {m["name"]: m.get("slot") for m in members}


async def pool_slots(admin: KubeClient, namespace: str, pool: str = "gpu") -> dict[str, str | None]:
    return slots(await admin.get(POOL, pool, namespace))


async def deployment_replicas(admin: KubeClient, namespace: str, name: str) -> int | None:
    """What the member is given to run: its Deployment's ``spec.replicas``."""
    found = (await admin.get(DEPLOYMENTS, name, namespace))["spec"].get("replicas")
    return None if found is None else int(found)


def as_written(isvc: Object) -> Object:
    """What a write of the InferenceService itself (not of its status) would change: its spec
    and metadata, less ``resourceVersion`` and ``managedFields``, which its status writes move."""
    meta = {
        k: v for k, v in isvc["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    return {"metadata": meta, "spec": isvc["spec"]}


async def isvc_phase(admin: KubeClient, namespace: str, name: str, phase: str) -> Object:
    async def reached() -> Object | None:
        found = await admin.get(ISVC, name, namespace)
        return found if (found.get("status") or {}).get("phase") == phase else None

    return await eventually(reached, timeout=TIMEOUT, what=f"{name} to be {phase}")


async def ready_url(admin: KubeClient, namespace: str, service: str) -> str:
    async def found() -> str | None:
        slices = await admin.list(
            ENDPOINT_SLICES, namespace, label_selector=f"kubernetes.io/service-name={service}"
        )
        urls = ready_urls(slices.items)
        return urls[0] if urls else None

    return await eventually(found, timeout=TIMEOUT, what=f"a ready endpoint of {service}")


async def take_lease(
    admin: KubeClient, namespace: str, pool: str, target: str, duration: int = 60
) -> None:
    """Play the activator: hold the pool's Lease with ``target`` as the wanted member."""
    try:
        lease = await admin.get(LEASES, pool_lease_name(pool), namespace)
    except NotFound:
        await admin.create(LEASES, new_pool_lease(namespace, pool, HOLDER, target, duration))
        return
    await admin.update(LEASES, claimed(lease, HOLDER, target, duration))


async def release_lease(admin: KubeClient, namespace: str, pool: str) -> None:
    """Release as the activator does: clear the holder and the target (the record stays)."""
    lease = await admin.get(LEASES, pool_lease_name(pool), namespace)
    await admin.update(LEASES, released(lease))


async def set_slots_mode(url: str, mode: str) -> None:
    async with http_client(timeout=10, trust_env=False) as http:
        response = await http.post(f"{url}/sim/slots-mode", json={"mode": mode})
    assert response.status_code == 200, response.text


async def chat(url: str, model: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hello pool"}]}
    async with http_client(timeout=30, trust_env=False) as http:
        response = await http.post(f"{url}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["model"])


@asynccontextmanager
async def stream_in_flight(url: str, model: str) -> AsyncIterator[None]:
    """A streamed completion that keeps a slot busy (20 s of tokens) until the block ends.

    Entered once a content chunk has been read, so ``/slots`` reports the slot processing; leaving
    the block closes the stream, which frees the slot at once.
    """
    body = {"model": model, "messages": [{"role": "user", "content": "keep going"}],
            "stream": True, "max_tokens": 400, "ignore_eos": True}  # fmt: skip
    async with (
        http_client(timeout=30, trust_env=False) as http,
        http.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        lines = response.aiter_lines()
        async for line in lines:
            if '"content"' in line:
                break
        yield


@asynccontextmanager
async def recorded(
    admin: KubeClient, namespace: str
) -> AsyncIterator[list[tuple[str, str, Object]]]:
    """Every pod, InferenceService, ModelPool and Deployment event in ``namespace`` while the block
    runs, each kind in its watch's order (kinds ``pod``, ``isvc``, ``pool``, ``deployment``)."""
    events: list[tuple[str, str, Object]] = []

    async def record(resource: Any, kind: str, version: str) -> None:
        async with admin.watch(resource, namespace, resource_version=version) as stream:
            async for event in stream:
                if event.type != "BOOKMARK":
                    events.append((kind, event.type, event.object))

    async with anyio.create_task_group() as group:
        kinds = ((PODS, "pod"), (ISVC, "isvc"), (POOL, "pool"), (DEPLOYMENTS, "deployment"))
        for resource, kind in kinds:
            version = (await admin.list(resource, namespace)).resource_version
            group.start_soon(record, resource, kind, version)
        yield events
        await anyio.sleep(0.5)  # let the last events in
        group.cancel_scope.cancel()


def rv(obj: Object) -> int:
    return int(obj["metadata"]["resourceVersion"])


def isvc_phases(events: list[tuple[str, str, Object]], name: str) -> list[str]:
    """The phases an InferenceService went through in ``events``, repeats folded."""
    phases: list[str] = []
    for kind, _, obj in events:
        if kind == "isvc" and obj["metadata"]["name"] == name:
            phase = (obj.get("status") or {}).get("phase")
            if phase and (not phases or phases[-1] != phase):
                phases.append(phase)
    return phases


async def warm_pool(admin: KubeClient, namespace: str, pool: str = "gpu") -> None:
    """Members a and b at ``replicas: 0`` (the user's; the pool decides), a pool with default a,
    waited until a is resident."""
    for name in ("a", "b"):
        await admin.create(ISVC, isvc_body(name), namespace)
    await admin.create(POOL, pool_body(pool, ["a", "b"], "a"), namespace)
    await wait_pool(admin, namespace, pool, settled("a"), "a to be resident")


async def reconciled_after(operator: OperatorProcess, touch: Callable[[], Any]) -> None:
    """Run ``touch`` (a write that triggers a reconcile) and wait until one more has run."""
    before = await metric_sum(
        operator.metrics_url, "controller_runtime_reconcile_total", controller=CONTROLLER_NAME
    )
    await touch()

    async def more() -> bool:
        now = await metric_sum(
            operator.metrics_url, "controller_runtime_reconcile_total", controller=CONTROLLER_NAME
        )
        return now > before

    await eventually(more, timeout=TIMEOUT, what="the pool to be reconciled again")


def touch_pool(admin: KubeClient, namespace: str, pool: str) -> Callable[[], Any]:
    async def touch() -> None:
        note = {"metadata": {"annotations": {"e2e.modelpool.dev/touched": secrets.token_hex(3)}}}
        await admin.patch(POOL, pool, note, namespace)

    return touch


# -- the tests -----------------------------------------------------------------------------------


async def test_a_cold_pool_warms_its_default(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    """Both members ask for ``replicas: 0``; the pool, not that field, decides: a runs."""
    created = {name: await admin.create(ISVC, isvc_body(name), namespace) for name in ("b", "a")}
    await admin.create(POOL, pool_body("gpu", ["a", "b"], "a"), namespace)

    pool = await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
    status = pool["status"]
    assert [{k: v for k, v in m.items() if k != "since"} for m in status["members"]] == [
        {"name": "a", "phase": "Ready", "resident": True, "slot": "Granted"},
        {"name": "b", "phase": "Stopped", "resident": False, "slot": "Released"},
    ]
    assert all(m["since"] for m in status["members"]), "a decision without when it was made"
    # b acknowledged its release (the pool granted a only after that), a its grant
    seen = {m: (await admin.get(ISVC, m, namespace))["status"]["poolDecision"] for m in "ab"}
    assert {m: (d["pool"], d["slot"]) for m, d in seen.items()} == {
        "a": ("gpu", "Granted"),
        "b": ("gpu", "Released"),
    }
    assert (condition(pool, "SlotAllocated")["status"], condition(pool, "MembersValid")["status"],
            condition(pool, "SwapDeferred")["status"]) == ("True", "True", "False")  # fmt: skip
    assert await deployment_replicas(admin, namespace, "a") == 1
    assert await deployment_replicas(admin, namespace, "b") == 0
    a = await isvc_phase(admin, namespace, "a", "Ready")
    b = await admin.get(ISVC, "b", namespace)
    # desiredReplicas is what the Deployment is given (the pool's decision), not spec.replicas.
    assert (a["status"]["desiredReplicas"], b["status"]["desiredReplicas"]) == (1, 0)
    for member in (a, b):
        name = member["metadata"]["name"]
        assert as_written(member) == as_written(created[name]), f"{name} was written"
    assert await chat(await ready_url(admin, namespace, "a"), "a") == "a"


async def test_a_swap_waits_for_idle_slots_then_for_the_pods_to_be_gone(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    await warm_pool(admin, namespace)
    url_a = await ready_url(admin, namespace, "a")
    (pod_a,) = (await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}=a")).items
    before = {name: await admin.get(ISVC, name, namespace) for name in ("a", "b")}

    async with recorded(admin, namespace) as events:
        async with stream_in_flight(url_a, "a"):
            await take_lease(admin, namespace, "gpu", target="b")
            pool = await wait_pool(
                admin, namespace, "gpu", deferred("PodsBusy", "a at", "1 of 2"), "PodsBusy"
            )
            assert (pool["status"]["phase"], pool["status"]["residentMember"],
                    pool["status"]["pendingMember"]) == ("Swapping", "a", "b")  # fmt: skip
            assert slots(pool) == {"a": "Granted", "b": "Released"}, "a was released while busy"
            assert await deployment_replicas(admin, namespace, "a") == 1
            assert await deployment_replicas(admin, namespace, "b") == 0
        # The stream is closed: its slot is idle, the drain proceeds.
        pool = await wait_pool(admin, namespace, "gpu", settled("b"), "b to be resident")

    assert condition(pool, "SwapDeferred")["status"] == "False"
    assert [m["name"] for m in pool["status"]["members"] if m["resident"]] == ["b"]
    assert slots(pool) == {"a": "Released", "b": "Granted"}

    def of(kind: str, name: str) -> list[Object]:
        return [o for k, _, o in events if k == kind and o["metadata"]["name"] == name]

    a_released = [o for o in of("pool", "gpu") if slots(o).get("a") == "Released"]
    b_granted = [o for o in of("pool", "gpu") if slots(o).get("b") == "Granted"]
    a_down = [o for o in of("deployment", "a") if o["spec"].get("replicas") == 0]
    b_up = [o for o in of("deployment", "b") if o["spec"].get("replicas") == 1]
    pod_a_events = [(t, o) for k, t, o in events
                    if k == "pod" and o["metadata"]["uid"] == pod_a["metadata"]["uid"]]  # fmt: skip
    terminating = [
        o for t, o in pod_a_events if t == "MODIFIED" and o["metadata"].get("deletionTimestamp")
    ]
    deleted = [o for t, o in pod_a_events if t == "DELETED"]
    seen = [(k, t, o["metadata"]["name"]) for k, t, o in events]
    assert a_released, seen
    assert b_granted, seen
    assert a_down, seen
    assert b_up, seen
    assert deleted, seen
    assert terminating, "a's pod was never seen Terminating"
    # One etcd orders every write: the pool released a in its status, then a's Deployment went to
    # 0, then a's pod was Terminating, then gone; only then did the pool grant b, and only then
    # was b's Deployment raised.
    assert (rv(a_released[0]) < rv(a_down[0]) < rv(terminating[0]) < rv(deleted[0])
            < rv(b_granted[0]) < rv(b_up[0]))  # fmt: skip
    assert await deployment_replicas(admin, namespace, "a") == 0
    # What `kubectl get isvc -w` showed, in the watch's order: the drained member Draining until
    # its process is gone, the chosen member Starting from the moment its pool chose it (its
    # Deployment still given 0, waiting for the slot) until it serves; neither passes through
    # Creating.
    a_phases, b_phases = isvc_phases(events, "a"), isvc_phases(events, "b")
    assert a_phases[-2:] == ["Draining", "Stopped"], a_phases
    assert "Creating" not in a_phases, a_phases
    assert b_phases[b_phases.index("Starting") :] == ["Starting", "Ready"], b_phases
    waiting = [o for o in of("isvc", "b") if (o.get("status") or {}).get("phase") == "Starting"
               and o["status"].get("desiredReplicas") == 0]  # fmt: skip
    assert waiting, "b was never Starting while its pool waited for the slot"
    assert rv(waiting[0]) < rv(b_granted[0])
    (ready_b,) = [c for c in waiting[0]["status"]["conditions"] if c["type"] == "Ready"]
    assert ready_b["reason"] == "WaitingForSlot", ready_b
    draining = [o for o in of("isvc", "a") if (o.get("status") or {}).get("phase") == "Draining"]
    assert rv(a_released[0]) < rv(draining[0]) < rv(b_granted[0])
    # Nobody wrote a member through the whole swap: every change seen was its status.
    for _, _, obj in (e for e in events if e[0] == "isvc"):
        name = obj["metadata"]["name"]
        assert as_written(obj) == as_written(before[name]), f"{name} was written"
    await isvc_phase(admin, namespace, "b", "Ready")
    assert await chat(await ready_url(admin, namespace, "b"), "b") == "b"

    async def swap_events() -> set[str] | None:
        found = await admin.list(EVENTS, namespace)
        reasons = {e["reason"] for e in found.items if e["regarding"]["name"] == "gpu"}
        return reasons if {"SwapStarted", "PodsBusy", "SwapCompleted"} <= reasons else None

    await eventually(swap_events, timeout=TIMEOUT, what="swap and deferral events on the pool")


async def test_a_broken_idle_check_defers_the_swap_until_it_answers(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    await warm_pool(admin, namespace)
    url_a = await ready_url(admin, namespace, "a")
    generation_a = (await admin.get(DEPLOYMENTS, "a", namespace))["metadata"]["generation"]

    await set_slots_mode(url_a, "error500")
    await take_lease(admin, namespace, "gpu", target="b")
    await wait_pool(admin, namespace, "gpu", deferred("IdleCheckFailed", "a at", "500"), "a 500")
    await set_slots_mode(url_a, "malformed")
    pool = await wait_pool(
        admin, namespace, "gpu", deferred("IdleCheckFailed", "a at", "not an array"), "malformed"
    )
    assert slots(pool) == {"a": "Granted", "b": "Released"}, "a released while its check failed"
    deployment_a = await admin.get(DEPLOYMENTS, "a", namespace)
    assert (deployment_a["spec"]["replicas"], deployment_a["metadata"]["generation"]) == (
        1,
        generation_a,
    ), "a's Deployment was scaled while its idle check failed"
    assert await deployment_replicas(admin, namespace, "b") == 0

    await set_slots_mode(url_a, "normal")
    pool = await wait_pool(
        admin, namespace, "gpu", settled("b"), "b to be resident once /slots answers"
    )
    assert slots(pool) == {"a": "Released", "b": "Granted"}
    assert await deployment_replicas(admin, namespace, "a") == 0


async def test_pools_swap_while_the_operator_may_no_longer_grant_proxies_leases(
    admin: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,
    reduced_operator: None,
) -> None:
    """The rule held only to grant router proxies Leases is removed (router activation is then
    refused, test_modelrouter.py): the pool controller still reads its pool's Lease with its own
    rule, so a claim is seen and the swap completes."""
    await warm_pool(admin, namespace)
    await take_lease(admin, namespace, "gpu", target="b")
    pool = await wait_pool(admin, namespace, "gpu", settled("b"), "b to be resident")
    assert [m["name"] for m in pool["status"]["members"] if m["resident"]] == ["b"]


async def test_a_withdrawn_intent_returns_the_pool_to_its_resident(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    await warm_pool(admin, namespace)
    created_b = await admin.get(ISVC, "b", namespace)
    await take_lease(admin, namespace, "gpu", target="b")

    async def b_brought_up() -> bool:
        granted = (await pool_slots(admin, namespace)).get("b") == "Granted"
        return granted and await deployment_replicas(admin, namespace, "b") == 1

    await eventually(b_brought_up, timeout=TIMEOUT, what="the controller to bring b up")
    # The activator gives up (a failed or timed-out swap) and releases the Lease, which is all a
    # real activator does too: the controller must release b on its own.
    await release_lease(admin, namespace, "gpu")

    pool = await wait_pool(admin, namespace, "gpu", settled("a"), "the pool to return to a")
    assert slots(pool) == {"a": "Granted", "b": "Released"}
    assert await deployment_replicas(admin, namespace, "b") == 0
    assert await deployment_replicas(admin, namespace, "a") == 1
    await isvc_phase(admin, namespace, "b", "Stopped")
    await isvc_phase(admin, namespace, "a", "Ready")
    assert condition(pool, "SlotAllocated")["status"] == "True"

    async def abandoned() -> bool:
        found = await admin.list(EVENTS, namespace)
        return any(e["reason"] == "SwapAbandoned" for e in found.items)

    await eventually(abandoned, timeout=TIMEOUT, what="a SwapAbandoned event on the pool")

    # And it stays that way: one more reconcile leaves b alone.
    deployment_b = await admin.get(DEPLOYMENTS, "b", namespace)
    await reconciled_after(operator, touch_pool(admin, namespace, "gpu"))
    assert await pool_slots(admin, namespace) == {"a": "Granted", "b": "Released"}
    after = await admin.get(DEPLOYMENTS, "b", namespace)
    assert (after["spec"]["replicas"], after["metadata"]["generation"]) == (
        0,
        deployment_b["metadata"]["generation"],
    )
    b = await admin.get(ISVC, "b", namespace)
    assert as_written(b) == as_written(created_b), "b was written"


async def test_a_missing_member_degrades_the_pool_and_decides_nothing(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    x = await admin.create(ISVC, isvc_body("x", replicas=0), namespace)
    y = await admin.create(ISVC, isvc_body("y", replicas=None), namespace)  # absent: 1
    await isvc_phase(admin, namespace, "y", "Ready")
    await admin.create(POOL, pool_body("gpu", ["x", "y", "ghost"], "x"), namespace)

    def degraded(pool: Object) -> bool:
        return (pool.get("status") or {}).get("phase") == "Degraded"

    pool = await wait_pool(admin, namespace, "gpu", degraded, "the pool to be Degraded")
    valid = condition(pool, "MembersValid")
    assert (valid["status"], valid["reason"]) == ("False", "MembersNotFound")
    assert "ghost" in valid["message"]
    assert {"name": "ghost", "phase": "NotFound", "resident": False} in pool["status"]["members"]
    assert slots(pool) == {"x": None, "y": None, "ghost": None}, "a Degraded pool decided"
    await reconciled_after(operator, touch_pool(admin, namespace, "gpu"))
    assert await pool_slots(admin, namespace) == {"x": None, "y": None, "ghost": None}
    for before in (x, y):
        now = await admin.get(ISVC, before["metadata"]["name"], namespace)
        assert as_written(now) == as_written(before)
    # Undecided, each keeps what its Deployment runs: y, running before the pool listed it, is
    # not killed unprobed; x is not raised.
    assert await deployment_replicas(admin, namespace, "x") == 0
    assert await deployment_replicas(admin, namespace, "y") == 1
    assert (await admin.get(ISVC, "y", namespace))["status"]["phase"] == "Ready"

    # The same pool once the member exists: now the controller does act (y drained, x warmed).
    await admin.create(ISVC, isvc_body("ghost"), namespace)
    pool = await wait_pool(admin, namespace, "gpu", settled("x"), "x to be resident")
    assert condition(pool, "MembersValid")["status"] == "True"
    assert slots(pool) == {"x": "Granted", "y": "Released", "ghost": "Released"}
    assert await deployment_replicas(admin, namespace, "y") == 0
    assert await deployment_replicas(admin, namespace, "x") == 1
