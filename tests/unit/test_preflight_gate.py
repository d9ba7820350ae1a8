"""The start-up gate: ready on ALLOWED, stops on DENIED, keeps trying on INCONCLUSIVE."""

from __future__ import annotations

import anyio
import pytest

from controlplane.preflight.backoff import no_jitter
from controlplane.preflight.errors import PreflightDenied
from controlplane.preflight.gate import DEFAULT_ROUND_PAUSE, PreflightGate
from controlplane.preflight.permissions import Component
from controlplane.preflight.testing import FakeClock
from controlplane.preflight.verdict import Outcome, Source, Verdict

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def verdict(outcome: Outcome) -> Verdict:
    return Verdict(outcome, Source.LIVE, Component.ROUTER_PROXY, "ns", f"preflight {outcome}")


class Script:
    """A check that returns the given outcomes in turn (the last one repeats)."""

    def __init__(self, *outcomes: Outcome) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def __call__(self) -> Verdict:
        self.calls += 1
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        await anyio.lowlevel.checkpoint()
        return verdict(outcome)


async def test_allowed_at_start_is_ready_at_once() -> None:
    gate = PreflightGate(Script(Outcome.ALLOWED), clock=FakeClock())
    assert gate.readiness() == (False, "preflight not run yet")
    async with anyio.create_task_group() as group:
        first = await gate.start(group)
    assert first.allowed
    assert gate.ready
    assert (await gate.wait_ready()).allowed


async def test_denied_at_start_raises_with_the_message() -> None:
    gate = PreflightGate(Script(Outcome.DENIED), clock=FakeClock())
    async with anyio.create_task_group() as group:
        with pytest.raises(PreflightDenied, match="preflight DENIED"):
            await gate.start(group)
    assert not gate.ready


async def test_inconclusive_is_not_ready_and_retries_in_the_background_until_allowed() -> None:
    clock = FakeClock()
    check = Script(Outcome.INCONCLUSIVE, Outcome.INCONCLUSIVE, Outcome.ALLOWED)
    gate = PreflightGate(check, clock=clock, uniform=no_jitter)
    async with anyio.create_task_group() as group:
        first = await gate.start(group)
        assert first.outcome is Outcome.INCONCLUSIVE
        ready, why = gate.readiness()
        assert not ready
        assert why.startswith("not ready: preflight INCONCLUSIVE")
        assert (await gate.wait_ready()).allowed
    assert gate.ready
    assert check.calls == gate.rounds == 3
    # Rounds are separated by jittered pauses that grow.
    assert clock.sleeps == [DEFAULT_ROUND_PAUSE.step(0), DEFAULT_ROUND_PAUSE.step(1)]


async def test_a_denial_found_in_the_background_ends_the_task_group() -> None:
    gate = PreflightGate(Script(Outcome.INCONCLUSIVE, Outcome.DENIED), clock=FakeClock())

    async def process() -> None:
        async with anyio.create_task_group() as group:
            await gate.start(group)
            await anyio.sleep_forever()  # the process's work, ended by the denial

    with pytest.raises(BaseExceptionGroup) as raised:
        await process()
    assert raised.group_contains(PreflightDenied, match="preflight DENIED")
    assert not gate.ready
    with pytest.raises(PreflightDenied):
        await gate.wait_ready()
