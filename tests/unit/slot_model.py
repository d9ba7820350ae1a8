"""What the scheduler's property tests share: a request of a random trace, the traces themselves,
and the clock that replays one against a model of a pool (one step every :data:`STEP` seconds).

The models differ (one seat, ``test_scheduling_policy.py``; several within a budget,
``test_scheduling_budget.py``); the trace, the replay and the bound's check are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hypothesis import strategies as st

from controlplane.scheduling.policy import Settings

#: The model decides once per step.
STEP = 0.05


@dataclass
class Request:
    member: str
    arrival: float
    duration: float
    started: float | None = None


class PoolModel(Protocol):
    held: list[Request]

    @property
    def busy(self) -> bool: ...

    def step(self, now: float, arrivals: list[Request]) -> None: ...


def timings(draw: st.DrawFn) -> tuple[Settings, float, float]:
    """A pool's bound and floor, its swap time and its longest request (s)."""
    max_wait = draw(st.sampled_from([2.0, 4.0, 8.0]))
    min_residency = draw(st.sampled_from([0.0, 1.0, max_wait / 2, max_wait]))
    swap = draw(st.sampled_from([0.2, 0.5, 1.0]))
    longest = draw(st.sampled_from([0.1, 0.5, 1.5]))
    return Settings(max_wait=max_wait, min_residency=min_residency), swap, longest


def requests_for(draw: st.DrawFn, names: Sequence[str], longest: float) -> list[Request]:
    """Up to 120 random requests over 40 s, and a steady tenant on the first member (back to
    back: the load that starved the others before the scheduler)."""
    drawn = draw(
        st.lists(
            st.builds(
                Request,
                member=st.sampled_from(list(names)),
                arrival=st.floats(0, 40).map(lambda t: round(t / STEP) * STEP),
                duration=st.floats(0.05, longest),
            ),
            min_size=1,
            max_size=120,
        )
    )
    steady = [Request(names[0], round(i * 0.1, 2), 0.1) for i in range(400)]
    return drawn + steady


def replay(pool: PoolModel, requests: Sequence[Request], horizon: float) -> None:
    """Step ``pool`` through ``requests`` until all are served or ``horizon`` passes."""
    pending = sorted(requests, key=lambda r: r.arrival)
    now, index = 0.0, 0
    while now < horizon and (index < len(pending) or pool.held or pool.busy):
        arrivals = []
        while index < len(pending) and pending[index].arrival <= now + 1e-9:
            arrivals.append(pending[index])
            index += 1
        pool.step(now, arrivals)
        now = round(now + STEP, 6)


def assert_served_within(
    requests: Sequence[Request], bound: float, context: Callable[[], str]
) -> None:
    """Every request was served, none later than ``bound`` (plus the model's step)."""
    slack = 4 * STEP
    for request in requests:
        assert request.started is not None, f"{request} was never served"
        waited = request.started - request.arrival
        assert waited <= bound + slack, (
            f"{request.member} waited {waited:.2f} s > bound {bound:.2f} s ({context()})"
        )
