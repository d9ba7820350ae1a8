"""Who the activator wakes: a held request wakes on what can change its answer (a cache event, a
swap's end), not on every fast-path answer or backstop tick. Those wake the swap drivers only,
which judge the held requests' readiness for them: 5,000 held requests woken by every in-flight
release stalled each normal request by 60 ms (bench/README.md, "Slow clients and held capacity
(issue 20)").
"""

from __future__ import annotations

import anyio
import pytest

from controlplane.router.routing import Route
from controlplane.router.wakeups import POLL_SECONDS
from tests.unit.activator_helpers import (
    ask_many,
    cluster,
    holder,
    new_activator,
    play_controller,
    running,
    until,
)

HELD = 3
pytestmark = pytest.mark.anyio


async def test_in_flight_releases_and_backstop_ticks_wake_drivers_not_held_requests() -> None:
    view, api = cluster()
    activator = new_activator(view, api)
    wakes = [0]
    snapshot = activator.notifier.snapshot

    def counted() -> anyio.Event:  # held requests take the notifier's event on every wake
        wakes[0] += 1
        return snapshot()

    activator.notifier.snapshot = counted  # type: ignore[method-assign]
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, Route("qwen", "b", "gpu-0"), HELD, answers)
        await until(lambda: holder(api) == "me" and activator.held == HELD)
        await anyio.sleep(0.1)
        settled = wakes[0]
        for _ in range(20):  # fast-path answers elsewhere
            activator.inflight.track("x")()
        await anyio.sleep(POLL_SECONDS * 1.5)  # a backstop tick
        assert wakes[0] == settled, "held requests woke for nothing that could change them"
        await play_controller(view, api, activator)  # b Ready: a cache event wakes them
        await until(lambda: len(answers) == HELD)
    assert wakes[0] > settled
    assert len(set(answers)) == 1


async def test_a_driver_ends_its_swap_on_a_backstop_tick_and_wakes_the_held_requests() -> None:
    """Readiness that arrives with no event the held requests wait on (here: none at all) is
    found by the swap's driver on its backstop tick, which ends the swap and wakes them."""
    view, api = cluster()
    activator = new_activator(view, api)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, Route("qwen", "b", "gpu-0"), HELD, answers)
        await until(lambda: holder(api) == "me" and activator.held == HELD)
        view.make_resident("gpu-0", "b")  # no notify: only the backstop can find it
        await until(lambda: len(answers) == HELD, timeout=POLL_SECONDS * 3)
    assert not activator.swaps
