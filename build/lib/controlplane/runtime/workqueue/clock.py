"""The time source of the work queue, injectable so that delays are testable without sleeping.

The queue needs two things from time: what the (monotonic) time is now, and a way to sleep
until a given instant. Both come from the project's one :class:`~controlplane.clock.Clock`,
re-exported here with its real implementation :class:`~controlplane.clock.SystemClock`.
Sleeping *until an instant* rather than *for a duration* matters for the fake clock: a waiter
that computed ``deadline - now`` and added it back to ``now`` could land one float ulp past the
deadline and never be woken by a test that advances the clock exactly to it.

:class:`FakeClock` is public because every layer built on the queue (controllers included)
wants the same determinism in its own tests: time moves only when the test calls ``advance``.
"""

from __future__ import annotations

import itertools

import anyio
import anyio.lowlevel

from controlplane.clock import Clock, SystemClock

__all__ = ["Clock", "FakeClock", "SystemClock"]


class FakeClock:
    """A clock that stands still until ``advance`` is called; sleepers wake when it passes them."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: dict[int, tuple[float, anyio.Event]] = {}
        self._ids = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        ident = next(self._ids)
        woken = anyio.Event()
        self._sleepers[ident] = (deadline, woken)
        try:
            await woken.wait()
        finally:
            self._sleepers.pop(ident, None)

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline is now reached."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        self._now += seconds
        for ident, (deadline, woken) in list(self._sleepers.items()):
            if deadline <= self._now:
                woken.set()
                del self._sleepers[ident]

    @property
    def sleepers(self) -> int:
        """How many tasks are asleep on this clock (lets a test see that a waiter armed a timer)."""
        return len(self._sleepers)
