"""Helpers of the activator's unit tests: a fake cluster, a played pool controller, a clock.

The test plays the pool controller: when the Lease names a target it makes that member the
Ready resident in the fake caches and wakes the activator, as the informers would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.activation import pool_lease_name, read_activation
from controlplane.router.activator import Activator
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.routing import Route
from tests.unit.router_fakes import FakeApi, FakeView

ISVC = InferenceService.resource()
LEASE_NAME = pool_lease_name("gpu-0")
Object = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cluster(
    budget: str = "300s",
    members: tuple[str, ...] = ("a", "b", "c"),
    *,
    scheduling: dict[str, str] | None = None,
    priorities: dict[str, int] | None = None,
) -> tuple[FakeView, FakeApi]:
    api = FakeApi()
    view = FakeView(api)
    view.pools["gpu-0"] = {
        "spec": {
            "members": [
                {"inferenceServiceRef": {"name": n}, "priority": (priorities or {}).get(n, 0)}
                for n in members
            ],
            "swapBudget": budget,
            "scheduling": scheduling or {},
        },
        "status": {},
    }
    for name in members:
        view.isvcs[name] = {"spec": {}, "status": {"phase": "Stopped"}}
        # held by the API server too, so that a write to it would land and be seen (there must
        # be none: a proxy asks for a member through the pool's Lease only)
        api.put(ISVC, {"metadata": {"name": name}, "spec": {}})
    view.make_resident("gpu-0", "a")
    return view, api


def member_writes(api: FakeApi) -> list[tuple[str, str, Object]]:
    """Every write that was not to a Lease."""
    return [write for write in api.writes if write[1] != "leases"]


async def until(done: Callable[[], bool], timeout: float = 5) -> None:
    with anyio.fail_after(timeout):
        while not done():  # noqa: ASYNC110 (the fakes have no events to wait on)
            await anyio.sleep(0.01)


def lease(api: FakeApi) -> Object:
    return api.objects[("leases", LEASE_NAME)]


def holder(api: FakeApi) -> str:
    found = api.objects.get(("leases", LEASE_NAME))
    return read_activation(found).holder if found else ""


def claims_by(api: FakeApi, identity: str) -> list[Object]:
    """Lease writes that (re)took it for a target: creates, and updates that set a new target
    or a new holder."""
    out: list[Object] = []
    previous: tuple[str, str | None] = ("", None)
    for obj in api.lease_writes():
        activation = read_activation(obj)
        now = (activation.holder, activation.target)
        if activation.holder == identity and now != previous:
            out.append(obj)
        previous = now
    return out


async def play_controller(view: FakeView, api: FakeApi, activator: Activator) -> str:
    """When the Lease targets a member, bring it up as the pool controller would."""
    while True:
        found = api.objects.get(("leases", LEASE_NAME))
        if found and read_activation(found).requested:
            target = str(read_activation(found).target)
            view.make_resident("gpu-0", target)
            activator.notifier.notify()
            return target
        await anyio.sleep(0.01)


@asynccontextmanager
async def running(activator: Activator) -> AsyncIterator[anyio.abc.TaskGroup]:
    async with anyio.create_task_group() as group:
        group.start_soon(activator.start)
        await until(lambda: activator._group is not None)
        yield group
        group.cancel_scope.cancel()


def new_activator(view: FakeView, api: FakeApi, identity: str = "me", **kw: Any) -> Activator:
    duration = kw.pop("duration", 45)
    coordinator = LeaseCoordinator(api, "ns", identity, duration=duration)
    return Activator(view, coordinator, "ns", linger_grace=kw.pop("linger_grace", 0.2), **kw)


def ask_many(
    group: anyio.abc.TaskGroup, activator: Activator, route: Route, count: int, answers: list[str]
) -> None:
    """``count`` requests for ``route`` started in ``group``, each answer's URL appended."""

    async def ask() -> None:
        answers.append(await activator.upstream(route))

    for _ in range(count):
        group.start_soon(ask)
