"""In-flight requests per member, counted until the response body is closed (docs/router.md).

A counter per ``namespace/member`` key; :meth:`InFlightRequests.track` returns a release callable
that is idempotent, so the body's close and a disconnect can both call it. Every change wakes
waiters through ``on_change``. It also remembers when each member's last request ended: a client
that loops requests back to back is demand for that member between two of its requests, which the
pool's scheduler must see (:meth:`InFlightRequests.active`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from controlplane.clock import TimeSource


class InFlightRequests:
    """How many proxied requests each member is serving now (not the work queue's
    :class:`~controlplane.runtime.workqueue.UnfinishedWork`, which is reconciles in progress)."""

    def __init__(
        self, on_change: Callable[[], None] = lambda: None, clock: TimeSource = time.monotonic
    ) -> None:
        self._counts: Counter[str] = Counter()
        self._ended: dict[str, float] = {}
        self._on_change = on_change
        self._clock = clock

    def count(self, key: str) -> int:
        return self._counts[key]

    def active(self, key: str, window: float) -> bool:
        """A request on ``key`` is in flight, or the last one ended less than ``window`` ago."""
        if self._counts[key] > 0:
            return True
        ended = self._ended.get(key)
        return ended is not None and self._clock() - ended < window

    def track(self, key: str) -> Callable[[], None]:
        """Count one request on ``key``; call the result (once or more) when its body closes."""
        self._counts[key] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._counts[key] -= 1
            if self._counts[key] <= 0:
                del self._counts[key]
                self._ended[key] = self._clock()
            self._on_change()

        return release
