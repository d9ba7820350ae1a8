"""Capped exponential backoff with equal jitter, and the injectable random source.

The clock is the project's one :class:`~controlplane.clock.WallClock` (the verdict cache needs
wall-clock ages as well as monotonic deadlines).

Why equal jitter: after a control-plane stall every process of a fleet is retrying at once. With
a fixed schedule they stay in step and hit the recovering API server together; with "full"
jitter (``uniform(0, v)``) some retry almost at once and the minimum wait collapses. Equal jitter
(``v/2 + uniform(0, v/2)``) keeps a guaranteed floor of ``v/2`` and spreads the rest.

Why a time budget rather than an attempt count: the contract is a duration ("rides through 60 s
of stall"), and attempts that time out take as long as the client timeout, so a count would say
nothing about time. The last wait is shortened so that one attempt lands on the deadline.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

#: First backoff step, seconds.
DEFAULT_BASE_DELAY = 0.5
#: Largest backoff step, seconds: a recovering API server sees each process at most this rarely.
DEFAULT_MAX_DELAY = 10.0
#: How long one check keeps retrying: a 60 s stall plus 15 s of recovery-time errors.
DEFAULT_RETRY_BUDGET = 75.0
#: Exponents beyond this no longer change ``min(cap, base * 2**n)`` and would overflow a float.
_MAX_EXPONENT = 62

#: ``uniform(low, high)``: the random source, injectable so that tests are deterministic.
RandomSource = Callable[[float, float], float]


def system_random() -> RandomSource:
    """A private generator (jitter needs spread, not secrecy)."""
    return random.Random().uniform


def no_jitter(low: float, high: float) -> float:
    """A "random" source that always answers the top: equal jitter becomes a fixed schedule.

    For comparisons only (the chaos test measures what jitter buys).
    """
    return high


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """When to retry: ``v = min(max_delay, base_delay * 2**n)``, sleep ``v/2 + uniform(0, v/2)``.

    ``budget`` is measured from the first attempt; retries stop once it is spent.
    """

    base_delay: float = DEFAULT_BASE_DELAY
    max_delay: float = DEFAULT_MAX_DELAY
    budget: float = DEFAULT_RETRY_BUDGET

    def __post_init__(self) -> None:
        if self.base_delay <= 0 or self.max_delay < self.base_delay or self.budget < 0:
            raise ValueError(f"inconsistent backoff policy: {self}")

    def step(self, retry: int) -> float:
        """The un-jittered step ``v`` before retry number ``retry`` (0 for the first retry)."""
        return min(self.max_delay, self.base_delay * 2.0 ** min(retry, _MAX_EXPONENT))

    def delay(self, retry: int, uniform: RandomSource) -> float:
        """The jittered sleep before retry number ``retry``: within ``[v/2, v]``."""
        half = self.step(retry) / 2
        return half + uniform(0.0, half)


DEFAULT_POLICY = BackoffPolicy()
