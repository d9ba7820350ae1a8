"""Time, injectable: the one :class:`Clock` protocol every layer sleeps on, and the one name for a
bare monotonic reading (:data:`TimeSource`).

A leaf module (it imports nothing of the project, an import-linter contract) so that every
package may use it: the framework's work queue, the preflight, the router and the llama.cpp
simulator, which knows nothing of the framework and so cannot take it from ``runtime/``.

Two shapes, because two kinds of code need time:

- Code that waits (queues, retries, the simulated model) takes a :class:`Clock`: it reads
  ``now`` and sleeps on the same clock, so a fake clock in a test moves both at once.
  ``sleep_until`` exists beside ``sleep`` because a waiter that computed ``deadline - now`` and
  added it back could land one float ulp past the deadline and never be woken by a fake clock
  advanced exactly to it.
- Code that only compares instants (Lease expiry, backoff windows) takes a :data:`TimeSource`,
  ``time.monotonic`` in production and any ``lambda`` in a test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import anyio

#: A monotonic reading in seconds (only differences mean anything): ``time.monotonic``.
TimeSource = Callable[[], float]


class Clock(Protocol):
    """A monotonic clock: ``now`` in seconds, and async sleeps measured on it."""

    def now(self) -> float:
        """The current time in seconds; only differences between two readings mean anything."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; a cancellation point like any anyio sleep."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (at once, after a checkpoint, if already past)."""
        ...


class WallClock(Clock, Protocol):
    """A :class:`Clock` that also reads wall-clock time, for ages shared between processes
    (the preflight's verdict cache outlives the process that wrote it)."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, the clock asyncio's event loop schedules on."""

    def now(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, deadline - time.monotonic()))


#: The process's real clock (stateless: one instance serves every caller).
SYSTEM_CLOCK = SystemClock()
