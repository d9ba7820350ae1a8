"""A timed ``/slots`` failure: switched for a while, then back by itself (read on the model's
clock), so an e2e test that breaks a member's idle check for a few seconds cannot leave it broken
by being cancelled before it switches back."""

from __future__ import annotations

import httpx
import pytest

from controlplane.sim.app import build_app
from controlplane.sim.model import SimulatedModel
from controlplane.sim.settings import SimSettings, SlotsMode
from controlplane.sim.testing import ManualClock

pytestmark = pytest.mark.anyio


def loaded(clock: ManualClock) -> SimulatedModel:
    model = SimulatedModel(SimSettings(), clock)
    model.mark_loaded()
    return model


def mode(model: SimulatedModel) -> SlotsMode:
    """Read afresh each time (the property changes with the clock; a checker would not know)."""
    return model.slots_mode


def client_for(model: SimulatedModel) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_app(model)), base_url="http://s"
    )


async def test_a_timed_switch_reverts_to_the_mode_before_it() -> None:
    clock = ManualClock()
    model = loaded(clock)
    async with client_for(model) as client:
        switched = await client.post("/sim/slots-mode", json={"mode": "error500", "seconds": 5})
        assert switched.json() == {"mode": "error500", "seconds_left": 5.0}
        assert (await client.get("/slots")).status_code == 500
        clock.time += 4.9
        assert (await client.get("/slots")).status_code == 500
        clock.time += 0.2
        assert (await client.get("/slots")).status_code == 200
        assert (await client.get("/sim/slots-mode")).json() == {"mode": "normal"}


def test_a_timed_switch_over_a_timed_switch_still_returns_to_the_first_mode() -> None:
    clock = ManualClock()
    model = loaded(clock)
    model.set_slots_mode(SlotsMode.MALFORMED)
    model.set_slots_mode(SlotsMode.ERROR500, seconds=2)
    model.set_slots_mode(SlotsMode.SLOW, seconds=3)
    assert mode(model) is SlotsMode.SLOW
    clock.time += 3
    assert mode(model) is SlotsMode.MALFORMED
    assert model.slots_mode_seconds_left is None


def test_an_untimed_switch_cancels_a_timed_one() -> None:
    clock = ManualClock()
    model = loaded(clock)
    model.set_slots_mode(SlotsMode.ERROR500, seconds=2)
    model.slots_mode = SlotsMode.MALFORMED
    clock.time += 10
    assert mode(model) is SlotsMode.MALFORMED


@pytest.mark.parametrize("seconds", [0, -1, "5", True])
async def test_seconds_must_be_a_positive_number(seconds: object) -> None:
    async with client_for(loaded(ManualClock())) as client:
        answer = await client.post("/sim/slots-mode", json={"mode": "error500", "seconds": seconds})
    assert answer.status_code == 400
    assert "'seconds' must be a positive number" in answer.json()["error"]["message"]
