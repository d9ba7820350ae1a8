"""The reflector's backoff: doubling, capped, jittered, and reset after a quiet period."""

from __future__ import annotations

from controlplane.runtime.backoff import Backoff


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_doubles_to_the_cap_without_jitter() -> None:
    clock = Clock()
    backoff = Backoff(jitter=0.0, clock=clock)
    delays = []
    for _ in range(8):
        delays.append(backoff.next_delay())
        clock.now += 1
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]


def test_jitter_stretches_by_up_to_the_factor() -> None:
    assert Backoff(rand=lambda: 0.0).next_delay() == 0.8
    assert Backoff(rand=lambda: 1.0).next_delay() == 1.6


def test_resets_after_a_quiet_period() -> None:
    clock = Clock()
    backoff = Backoff(jitter=0.0, clock=clock)
    backoff.next_delay()
    backoff.next_delay()
    clock.now += 121
    assert backoff.next_delay() == 0.8
