"""Clocks for tests of the simulator: virtual time that needs no waiting.

:class:`ManualClock` records every sleep and returns at once, so a test counts how long the model
*would* have waited. :class:`GatedClock` additionally holds every sleep until the test opens the
gate, which freezes a completion mid-generation while the test looks at ``/slots``.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.lowlevel

#: How long :func:`wait_until` waits before failing the test.
WAIT_UNTIL_SECONDS = 10.0


class ManualClock:
    """Virtual time: each sleep is recorded, advances :meth:`now` and returns at once."""

    def __init__(self) -> None:
        self.time = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.time += seconds
        await anyio.lowlevel.checkpoint()

    async def sleep_until(self, deadline: float) -> None:
        await self.sleep(max(0.0, deadline - self.time))


class GatedClock(ManualClock):
    """Virtual time whose sleeps wait for :meth:`open`; :attr:`blocked` counts waiting sleeps."""

    def __init__(self) -> None:
        super().__init__()
        self._gate = anyio.Event()
        self.blocked = 0

    def open(self) -> None:
        self._gate.set()

    async def sleep(self, seconds: float) -> None:
        self.blocked += 1
        try:
            await self._gate.wait()
        finally:
            self.blocked -= 1
        await super().sleep(seconds)


async def wait_until(condition: Callable[[], bool], timeout: float = WAIT_UNTIL_SECONDS) -> None:
    """Yield to other tasks until ``condition()`` holds; fail after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while True:  # a predicate over arbitrary state has no event to wait on: poll it
            if condition():
                return
            await anyio.sleep(0.001)
