"""The activator and the Lease coordinator against fakes of the cluster (no network).

The test plays the pool controller: when the Lease names a target it makes that member the
Ready resident in the fake caches and wakes the activator, as the informers would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1.activation import TARGET_ANNOTATION
from controlplane.router.activator import Activator
from controlplane.router.errors import ActivationTimeout, LeaseUnavailable, PoolBusy
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.routing import Route
from controlplane.runtime.resources import LEASES
from tests.unit.router_fakes import FakeApi, FakeView

pytestmark = pytest.mark.anyio

ISVC_PLURAL = "inferenceservices"
Object = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cluster(budget: str = "300s") -> tuple[FakeView, FakeApi]:
    from controlplane.router.activator import ISVC

    view, api = FakeView(), FakeApi()
    view.pools["gpu-0"] = {
        "spec": {
            "members": [{"inferenceServiceRef": {"name": n}} for n in ("a", "b")],
            "swapBudget": budget,
        },
        "status": {},
    }
    for name in ("a", "b"):
        view.isvcs[name] = {"spec": {"replicas": 0}, "status": {"phase": "Stopped"}}
        api.put(ISVC, {"metadata": {"name": name}, "spec": {"replicas": 0}})
    view.make_resident("gpu-0", "a")
    return view, api


async def until(done: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not done():  # noqa: ASYNC110 (the fakes have no events to wait on)
            await anyio.sleep(0.01)


def lease(api: FakeApi) -> Object:
    return api.objects[("leases", "modelpool-gpu-0")]


async def play_controller(view: FakeView, api: FakeApi, activator: Activator) -> None:
    """When the Lease targets b, bring b up as the pool controller would."""
    while True:
        found = api.objects.get(("leases", "modelpool-gpu-0"))
        if found and found["spec"].get("holderIdentity"):
            target = found["metadata"]["annotations"][TARGET_ANNOTATION]
            view.make_resident("gpu-0", target)
            activator.notifier.notify()
            return
        await anyio.sleep(0.01)


async def test_fast_path_forwards_to_the_resident_without_a_claim() -> None:
    view, api = cluster()
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    assert await activator.upstream(Route("llama", "a", "gpu-0")) == view.urls["a"][0]
    assert api.lease_writes() == []


async def test_concurrent_requests_coalesce_onto_one_claim_and_the_lease_is_released() -> None:
    view, api = cluster()
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    urls: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await activator._started.wait()

        async def ask() -> None:
            urls.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        for _ in range(5):
            group.start_soon(ask)
        await play_controller(view, api, activator)
        await until(lambda: not (len(urls) < 5 or activator.swaps))
        group.cancel_scope.cancel()
    assert urls == [view.urls["b"][0]] * 5
    claims = [w for w in api.lease_writes() if w["spec"].get("holderIdentity") == "me"]
    assert len(claims) == 1
    assert claims[0]["metadata"]["annotations"][TARGET_ANNOTATION] == "b"
    assert lease(api)["spec"]["holderIdentity"] == ""
    assert TARGET_ANNOTATION not in lease(api)["metadata"]["annotations"]


async def test_budget_elapsed_is_503_timeout_and_the_holder_scales_the_target_down() -> None:
    view, api = cluster(budget="300ms")
    api.objects[(ISVC_PLURAL, "b")]["spec"]["replicas"] = 1  # the controller had scaled it up
    api.conflicts[ISVC_PLURAL] = 1  # and writes once more while we scale down
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await activator._started.wait()
        with pytest.raises(ActivationTimeout) as caught:
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        await until(lambda: not (activator.swaps))
        group.cancel_scope.cancel()
    assert caught.value.status == 503
    assert caught.value.headers()["Retry-After"]
    assert caught.value.code == "pool_activation_timeout"
    assert api.objects[(ISVC_PLURAL, "b")]["spec"]["replicas"] == 0
    assert lease(api)["spec"]["holderIdentity"] == ""


async def test_a_busy_incumbent_is_not_preempted_and_the_answer_is_pool_busy() -> None:
    view, api = cluster(budget="300ms")
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    release = activator.inflight.track("a")
    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await activator._started.wait()
        with pytest.raises(PoolBusy):
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        group.cancel_scope.cancel()
    release()
    assert api.lease_writes() == []


async def test_the_claim_follows_the_incumbent_going_idle() -> None:
    view, api = cluster()
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    release = activator.inflight.track("a")
    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await activator._started.wait()
        result: list[str] = []

        async def ask() -> None:
            result.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        group.start_soon(ask)
        await anyio.sleep(0.2)
        assert api.lease_writes() == []
        release()
        await play_controller(view, api, activator)
        await until(lambda: bool(result))
        group.cancel_scope.cancel()


async def test_lease_held_by_another_replica_for_another_target_waits_then_claims() -> None:
    view, api = cluster()
    other = LeaseCoordinator(api, "ns", "other")
    assert (await other.claim("gpu-0", "c")).held
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await activator._started.wait()
        result: list[str] = []

        async def ask() -> None:
            result.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        group.start_soon(ask)
        await anyio.sleep(0.3)
        assert lease(api)["spec"]["holderIdentity"] == "other"
        await other.release("gpu-0")
        await play_controller(view, api, activator)
        await until(lambda: bool(result))
        group.cancel_scope.cancel()
    assert result == [view.urls["b"][0]]


async def test_lease_api_errors_are_503_lease_unavailable() -> None:
    view, api = cluster()
    api.broken = True
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await activator._started.wait()
        with pytest.raises(LeaseUnavailable) as caught:
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        group.cancel_scope.cancel()
    assert caught.value.headers()["Retry-After"]


async def test_claim_rereads_after_a_409_and_wins() -> None:
    _, api = cluster()
    first = LeaseCoordinator(api, "ns", "x")
    assert (await first.claim("gpu-0", "a")).held
    await first.release("gpu-0")
    api.conflicts["leases"] = 1
    claim = await LeaseCoordinator(api, "ns", "me").claim("gpu-0", "b")
    assert claim.held
    assert lease(api)["spec"]["holderIdentity"] == "me"


async def test_a_live_holder_is_respected_and_an_expired_one_taken_over_by_observation() -> None:
    _, api = cluster()
    clock = Clock()
    assert (await LeaseCoordinator(api, "ns", "other", duration=45).claim("gpu-0", "a")).held
    mine = LeaseCoordinator(api, "ns", "me", clock=clock)
    claim = await mine.claim("gpu-0", "b")
    assert (claim.held, claim.holder, claim.target) == (False, "other", "a")
    clock.now += 44  # our own observation: not yet expired
    assert not (await mine.claim("gpu-0", "b")).held
    clock.now += 2
    assert (await mine.claim("gpu-0", "b")).held
    assert lease(api)["metadata"]["annotations"][TARGET_ANNOTATION] == "b"
    assert lease(api)["spec"]["leaseTransitions"] == 1


async def test_release_is_idempotent_and_never_touches_another_holder() -> None:
    _, api = cluster()
    mine = LeaseCoordinator(api, "ns", "me")
    await mine.release("gpu-0")  # no Lease at all
    assert (await mine.claim("gpu-0", "b")).held
    await mine.release("gpu-0")
    writes = len(api.lease_writes())
    await mine.release("gpu-0")
    assert len(api.lease_writes()) == writes
    assert (await LeaseCoordinator(api, "ns", "other").claim("gpu-0", "a")).held
    await mine.release("gpu-0")
    assert lease(api)["spec"]["holderIdentity"] == "other"


async def test_renew_reports_a_lost_lease() -> None:
    _, api = cluster()
    clock = Clock()
    mine = LeaseCoordinator(api, "ns", "me")
    assert (await mine.claim("gpu-0", "b")).held
    assert await mine.renew("gpu-0", "b")
    thief = LeaseCoordinator(api, "ns", "thief", clock=clock)
    await thief.claim("gpu-0", "a")
    clock.now += 100
    assert (await thief.claim("gpu-0", "a")).held
    assert not await mine.renew("gpu-0", "b")
    assert LEASES.plural == "leases"
