"""``Retry-After`` from what was measured: when is the model a client asked for likely up?

A constant tells a client to come back at the wrong time: too early for a 70B model that takes
two minutes to load (it retries into another 503), too late for a small one. Every swap this
replica saw complete is timed from its first held request to the target being ready, per
``(pool, target)``; a client that is turned away is told

* with history: the 90th percentile of the recent swap times to that target, minus how long the
  current swap has already run, rounded up, at least 1 s;
* with no history, or when the current swap is already slower than the 90th percentile: as long
  again as it has run so far (it is slower than anything seen; assume it is half-way), at least
  1 s and at most ``cap`` (the pool's ``swapBudget``).

What a slow loader gets: a swap keeps going after its held requests have timed out, for the
``Retry-After`` they were given plus :data:`LINGER_GRACE_SECONDS` (the activator's linger), so a
client that retries when told finds the same swap still running, and a member that loads more
slowly than ``swapBudget`` still becomes resident after one or two retries, and its time then
teaches the next ``Retry-After``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Final

from controlplane.router.errors import MIN_RETRY_AFTER_SECONDS

#: Swap times remembered per (pool, target).
HISTORY_SIZE: Final = 20
#: How long after the promised ``Retry-After`` an unattended swap waits for the retry.
LINGER_GRACE_SECONDS: Final = 5.0


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


class SwapHistory:
    """Recent swap times per ``(pool, target)``, and the ``Retry-After`` they imply."""

    def __init__(self, size: int = HISTORY_SIZE) -> None:
        self.size = size
        self._times: dict[tuple[str, str], deque[float]] = {}

    def record(self, pool: str, target: str, seconds: float) -> None:
        times = self._times.setdefault((pool, target), deque(maxlen=self.size))
        times.append(max(0.0, seconds))

    def expected(self, pool: str, target: str) -> float | None:
        """The 90th percentile of recent swap times to ``target``, if any were seen."""
        times = self._times.get((pool, target))
        return percentile(list(times), 0.9) if times else None

    def retry_after(self, pool: str, target: str, elapsed: float, cap: float) -> int:
        """Whole seconds until ``target`` is likely up, the current swap having run ``elapsed``."""
        expected = self.expected(pool, target)
        if expected is not None and expected > elapsed:
            left = expected - elapsed
        else:
            left = min(max(elapsed, 0.0), cap)
        return max(MIN_RETRY_AFTER_SECONDS, math.ceil(left))
