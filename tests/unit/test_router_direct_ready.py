"""Ready when the server is: the swap driver's own ``/health`` probe of the granted target.

The test plays the pool controller in two steps, as a real one goes: first the grant (the target
``Granted`` in the pool's status, its pod listed but not ready), later the readiness (the target
the Ready resident with a ready endpoint). Held requests must go at the first ``/health`` 200 of
the granted pod, only while this replica holds the pool's Lease, and the swap (and the Lease)
must end only once the pool names the target resident.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from controlplane.api.v1alpha1.activation import read_activation
from controlplane.router.activator import Activator
from controlplane.router.directready import DirectReady, direct_candidates, granted
from controlplane.router.errors import ActivationTimeout
from controlplane.router.routing import Route
from tests.unit.activator_helpers import (
    LEASE_NAME,
    ask_many,
    cluster,
    holder,
    new_activator,
    running,
    until,
)
from tests.unit.router_fakes import FakeApi, FakeView

pytestmark = pytest.mark.anyio

STARTING = "http://10.0.0.8:8080"
FOR_B = Route("qwen", "b", "gpu-0")


class FakeHealth:
    """``/health`` of each address: 200 once it is in :attr:`up`; every ask is counted."""

    def __init__(self) -> None:
        self.up: set[str] = set()
        self.asked: list[str] = []
        #: Of slot servers: (address, model) listed as loaded in ``/models``.
        self.loaded: set[tuple[str, str]] = set()

    async def healthy(self, base_url: str) -> bool:
        self.asked.append(base_url)
        await anyio.lowlevel.checkpoint()
        return base_url in self.up

    async def model_loaded(self, base_url: str, model: str) -> bool:
        self.asked.append(f"{base_url} {model}")
        await anyio.lowlevel.checkpoint()
        return (base_url, model) in self.loaded


def grant(view: FakeView, member: str, *, url: str = STARTING) -> None:
    """The pool controller's grant: ``member`` Granted, its pod listed but not ready."""
    status = view.pools["gpu-0"].setdefault("status", {})
    status["members"] = [{"name": member, "slot": "Granted"}]
    view.starting[member] = [url]


def intent_target(api: FakeApi) -> str | None:
    found = api.objects.get(("leases", LEASE_NAME))
    return read_activation(found).target if found else None


def activator_with(health: FakeHealth, view: FakeView, api: FakeApi, **kw: Any) -> Activator:
    return new_activator(view, api, direct_ready=DirectReady(health, interval=0.01), **kw)


async def test_held_requests_go_at_the_first_health_200_and_the_lease_is_kept_until_resident() -> (
    None
):
    view, api = cluster()
    health = FakeHealth()
    activator = activator_with(health, view, api)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, FOR_B, 2, answers)
        await until(lambda: intent_target(api) == "b")
        grant(view, "b")
        activator.notifier.notify()  # the pool's and the slices' watch events
        await until(lambda: len(health.asked) >= 3)  # asked again and again while it loads
        assert answers == []
        health.up.add(STARTING)
        await until(lambda: len(answers) == 2)
        assert answers == [STARTING, STARTING]
        # a request arriving now joins the swap and goes to the same server at once
        assert await activator.upstream(FOR_B) == STARTING
        asked = len(health.asked)
        await anyio.sleep(0.1)  # every held request answered: the swap is unattended
        assert len(health.asked) == asked, "the driver kept asking after the first 200"
        # the pool has not named b resident yet: the swap runs on and the Lease (the intent for
        # b) is still ours, so b stays the pool's owner
        assert holder(api) == "me"
        assert intent_target(api) == "b"
        assert ("gpu-0", "b") in activator.swaps
        view.make_resident("gpu-0", "b")
        activator.notifier.notify()
        await until(lambda: not activator.swaps)
    assert holder(api) == ""


async def test_a_pod_the_pool_has_not_granted_is_never_asked_nor_forwarded_to() -> None:
    view, api = cluster(budget="400ms")
    health = FakeHealth()
    health.up.add(STARTING)
    view.starting["b"] = [STARTING]  # listed and up, but the pool has not granted b the slot
    activator = activator_with(health, view, api)
    async with running(activator):
        with pytest.raises(ActivationTimeout):
            await activator.upstream(FOR_B)
    assert health.asked == []


async def test_a_replica_that_does_not_hold_the_lease_waits_for_the_resident() -> None:
    """Only the holder forwards early: its intent keeps the target the pool's owner."""
    view, api = cluster()
    health = FakeHealth()
    health.up.add(STARTING)
    other = new_activator(view, api, identity="other")
    ours = activator_with(health, view, api)
    answers: list[str] = []
    async with running(other) as group, running(ours):
        ask_many(group, other, FOR_B, 1, answers)
        await until(lambda: holder(api) == "other")
        ask_many(group, ours, FOR_B, 1, answers)
        grant(view, "b")
        other.notifier.notify()
        ours.notifier.notify()
        await anyio.sleep(0.2)
        assert answers == [], "a replica without the Lease forwarded before the pool said Ready"
        assert health.asked == []
        view.make_resident("gpu-0", "b")
        other.notifier.notify()
        ours.notifier.notify()
        await until(lambda: len(answers) == 2)
    assert answers == [view.urls["b"][0]] * 2


async def test_without_the_probe_held_requests_wait_for_the_resident() -> None:
    view, api = cluster()
    activator = new_activator(view, api)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, FOR_B, 1, answers)
        await until(lambda: intent_target(api) == "b")
        grant(view, "b")
        activator.notifier.notify()
        await anyio.sleep(0.1)
        assert answers == []
        view.make_resident("gpu-0", "b")
        activator.notifier.notify()
        await until(lambda: len(answers) == 1)
    assert answers == [view.urls["b"][0]]


async def test_a_lost_lease_takes_the_early_address_back() -> None:
    view, api = cluster()
    health = FakeHealth()
    health.up.add(STARTING)
    activator = activator_with(health, view, api, duration=1)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, FOR_B, 1, answers)
        await until(lambda: intent_target(api) == "b")
        grant(view, "b")
        activator.notifier.notify()
        await until(lambda: answers == [STARTING])
        swap = activator.swaps[("gpu-0", "b")]
        api.hang = True  # renewals hang: the holder counts the Lease lost within its duration
        await until(lambda: not swap.holding, timeout=2)
        assert swap.direct_url is None
        assert activator._direct_url(swap.pool, swap) is None
        api.hang = False
        group.cancel_scope.cancel()


async def test_a_member_whose_kv_cache_is_restored_before_ready_is_left_to_its_readiness() -> None:
    """Its server answers /health before the saved slots are restored (the pod's readiness
    gate): a request sent then would miss them."""
    view, api = cluster()
    view.isvcs["b"]["spec"] = {"kvCache": {"enabled": True}}
    health = FakeHealth()
    health.up.add(STARTING)
    activator = activator_with(health, view, api)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, FOR_B, 1, answers)
        await until(lambda: intent_target(api) == "b")
        grant(view, "b")
        activator.notifier.notify()
        await anyio.sleep(0.2)
        assert answers == []
        assert health.asked == []
        view.make_resident("gpu-0", "b")
        activator.notifier.notify()
        await until(lambda: len(answers) == 1)
    assert answers == [view.urls["b"][0]]


def test_only_a_granted_member_has_candidates() -> None:
    pool = {"status": {"members": [{"name": "a", "slot": "Released"}, {"name": "b"}]}}
    assert not granted(pool, "a")
    assert not granted(pool, "b")
    assert not granted(None, "b")
    assert direct_candidates(pool, None, "b", [STARTING]) == []
    pool["status"]["members"][1]["slot"] = "Granted"
    assert granted(pool, "b")
    assert direct_candidates(pool, None, "b", [STARTING]) == [STARTING]
    assert direct_candidates(pool, {"spec": {"kvCache": {"enabled": False}}}, "b", [STARTING])
    assert not direct_candidates(pool, {"spec": {"kvCache": {"enabled": True}}}, "b", [STARTING])


SLOT = "http://10.0.0.9:8080"


async def test_a_slot_servers_model_is_forwarded_to_once_loaded_and_never_before_the_grant() -> (
    None
):
    """A pool with a slot server starts no pod: the driver asks the server's ``/models`` whether
    the granted target's model is loaded, and forwards at once; before the grant it never asks
    (the server may still run the previous model)."""
    view, api = cluster()
    view.pools["gpu-0"]["spec"]["slotServer"] = {}
    view.isvcs["b"]["spec"] = {"model": {"name": "qwen"}}
    view.urls["b"] = [SLOT]  # b's Service selects the server, which is ready
    health = FakeHealth()
    activator = activator_with(health, view, api)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, FOR_B, 1, answers)
        await until(lambda: intent_target(api) == "b")
        await anyio.sleep(0.05)
        assert health.asked == [], "asked before the pool granted b"
        status = view.pools["gpu-0"].setdefault("status", {})
        status["members"] = [{"name": "b", "slot": "Granted"}]
        activator.notifier.notify()
        await until(lambda: len(health.asked) >= 2)  # asked again and again while it loads
        assert answers == []
        assert health.asked[0] == f"{SLOT} qwen"
        health.loaded.add((SLOT, "qwen"))
        await until(lambda: len(answers) == 1)
        assert answers == [SLOT]
        # the pool names b resident, its model Ready in the server: the swap ends
        status["residentMember"] = "b"
        status["members"] = [{"name": "b", "slot": "Granted", "phase": "Ready"}]
        activator.notifier.notify()
        await until(lambda: not activator.swaps)
        assert await activator.upstream(FOR_B) == SLOT, "the fast path: the server, b loaded"
