"""In-flight requests per member, counted until the response body is closed (docs/router.md).

A counter per ``namespace/member`` key; :meth:`InFlightRequests.track` returns a release callable
that is idempotent, so the body's close and a disconnect can both call it. Every change wakes
waiters through ``on_change`` (the activator waits for an incumbent to go idle before claiming).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable


class InFlightRequests:
    """How many proxied requests each member is serving now (not the work queue's
    :class:`~controlplane.runtime.workqueue.UnfinishedWork`, which is reconciles in progress)."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self._counts: Counter[str] = Counter()
        self._on_change = on_change

    def count(self, key: str) -> int:
        return self._counts[key]

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
            self._on_change()

        return release
