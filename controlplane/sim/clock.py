"""Time as the simulated model sees it, injectable so unit tests count sleeps instead of waiting.

Loading and token generation are the only places the simulator spends time; both go through a
:class:`Clock`, so a test can hand the model a clock that records each requested sleep and
returns at once, then assert how many tokens took how long without touching the wall clock.
"""

from __future__ import annotations

from typing import Protocol

import anyio


class Clock(Protocol):
    """A monotonic time source and a way to wait on it."""

    def now(self) -> float:
        """Seconds on a monotonic scale (only differences mean anything)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; a cancellation point like any anyio sleep."""
        ...


class AnyioClock:
    """The event loop's clock: what the real server runs on."""

    def now(self) -> float:
        return anyio.current_time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
