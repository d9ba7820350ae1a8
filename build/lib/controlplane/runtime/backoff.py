"""Exponential backoff with jitter and a reset after a quiet period (client-go's reflector backoff).

The reflector backs off 0.8 s doubling to 30 s, each delay stretched by up to 100 % random
jitter so that many informers recovering from the same outage do not retry in lock-step, and
starts again from 0.8 s once nothing has failed for two minutes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from controlplane.clock import TimeSource

REFLECTOR_BACKOFF_INITIAL = 0.8
REFLECTOR_BACKOFF_CAP = 30.0
REFLECTOR_BACKOFF_RESET_AFTER = 120.0
REFLECTOR_BACKOFF_JITTER = 1.0


@dataclass
class Backoff:
    """Call ``next_delay()`` after each failure; ``reset_after`` quiet seconds restart it."""

    initial: float = REFLECTOR_BACKOFF_INITIAL
    cap: float = REFLECTOR_BACKOFF_CAP
    reset_after: float = REFLECTOR_BACKOFF_RESET_AFTER
    jitter: float = REFLECTOR_BACKOFF_JITTER
    clock: TimeSource = time.monotonic
    rand: Callable[[], float] = random.random
    _current: float = field(default=0.0, init=False)
    _last_failure: float | None = field(default=None, init=False)

    def next_delay(self) -> float:
        now = self.clock()
        if self._last_failure is None or now - self._last_failure > self.reset_after:
            self._current = self.initial
        else:
            self._current = min(self.cap, self._current * 2)
        self._last_failure = now
        return self._current * (1 + self.jitter * self.rand())
