"""Time as the simulated model sees it, injectable so unit tests count sleeps instead of waiting.

Loading and token generation are the only places the simulator spends time; both go through a
:class:`~controlplane.clock.Clock` (the project's one clock protocol, from the neutral leaf
module :mod:`controlplane.clock`, since the simulator knows nothing of the framework), so a test
can hand the model a clock that records each requested sleep and returns at once, then assert how
many tokens took how long without touching the wall clock.
"""

from __future__ import annotations

import anyio

from controlplane.clock import Clock

__all__ = ["AnyioClock", "Clock"]


class AnyioClock:
    """The event loop's clock: what the real server runs on."""

    def now(self) -> float:
        return anyio.current_time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, deadline - anyio.current_time()))
