"""The time source of the work queue, injectable so that delays are testable without sleeping.

The queue needs two things from time: what the (monotonic) time is now, and a way to sleep
until a given instant. Sleeping *until an instant* rather than *for a duration* matters for the
fake clock: a waiter that computed ``deadline - now`` and added it back to ``now`` could land one
float ulp past the deadline and never be woken by a test that advances the clock exactly to it.

:class:`FakeClock` is public because every layer built on the queue (controllers included)
wants the same determinism in its own tests: time moves only when the test calls ``advance``.
"""

from __future__ import annotations

import itertools
import time
from typing import Protocol

import anyio
import anyio.lowlevel


class Clock(Protocol):
    """A monotonic clock: ``now`` in seconds, and an async sleep until an instant of it."""

    def now(self) -> float:
        """The current time in seconds; only differences between two readings mean anything."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (at once, after a checkpoint, if already past)."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``, the same clock asyncio's event loop schedules on."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, deadline - time.monotonic()))


class FakeClock:
    """A clock that stands still until ``advance`` is called; sleepers wake when it passes them."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: dict[int, tuple[float, anyio.Event]] = {}
        self._ids = itertools.count()

    def now(self) -> float:
        return self._now

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
