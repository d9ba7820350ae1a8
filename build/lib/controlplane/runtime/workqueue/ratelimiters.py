"""Rate limiters: how long a key must wait before it is retried (client-go's defaults and types).

A rate limiter answers ``when(key)``: the delay before ``key`` may be processed again, and it
counts that as one more failure of ``key``. ``forget(key)`` ends the key's failure streak (after a
success), ``num_requeues(key)`` says how long the streak is.

The controller default combines the two concerns and takes the larger delay:

* per key, exponential backoff: 5 ms, 10 ms, 20 ms, ... capped at 1000 s, so one broken object
  retries quickly at first and then settles to a slow retry without hammering the API server;
* overall, a token bucket of 10 per second with a burst of 100, so that many keys failing at
  once (an API server outage) are spread out instead of all retrying together.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from controlplane.runtime.workqueue.clock import Clock, SystemClock

DEFAULT_ITEM_BASE_DELAY = 0.005
"""Seconds before the first retry of a key (client-go: 5 ms)."""
DEFAULT_ITEM_MAX_DELAY = 1000.0
"""The per-key backoff stops doubling here (client-go: 1000 s)."""
DEFAULT_BUCKET_QPS = 10.0
"""Retries per second across all keys once the burst is spent (client-go: 10)."""
DEFAULT_BUCKET_BURST = 100
"""Retries allowed at once before the bucket starts spacing them (client-go: 100)."""

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[K_contra]):
    def when(self, key: K_contra) -> float:
        """Seconds ``key`` must wait before its next try; counts one more failure of it."""
        ...

    def forget(self, key: K_contra) -> None:
        """Forget ``key``'s failures (it succeeded); its next delay starts from the beginning."""
        ...

    def num_requeues(self, key: K_contra) -> int:
        """How many failures of ``key`` are being remembered."""
        ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Per key: ``base_delay * 2**failures``, capped at ``max_delay``."""

    def __init__(
        self, base_delay: float = DEFAULT_ITEM_BASE_DELAY, max_delay: float = DEFAULT_ITEM_MAX_DELAY
    ) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays cannot be negative")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        exponent = self._failures.get(key, 0)
        self._failures[key] = exponent + 1
        try:
            backoff = math.ldexp(self.base_delay, exponent)  # exact: base * 2**exponent
        except OverflowError:  # a key failing for ever must not crash the limiter
            return self.max_delay
        return min(backoff, self.max_delay)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """A token bucket over all keys, like Go's ``rate.Limiter`` used through ``Reserve().Delay()``.

    The bucket starts full (``burst`` tokens) and refills at ``qps`` tokens per second. Every
    ``when`` takes a token *now*, going into debt if there is none, and returns how long until
    that debt is paid: a burst of 100 is free, then retries are spaced 100 ms apart. Keys have no
    memory here, so ``forget`` does nothing and ``num_requeues`` is always 0.
    """

    def __init__(
        self,
        qps: float = DEFAULT_BUCKET_QPS,
        burst: int = DEFAULT_BUCKET_BURST,
        *,
        clock: Clock | None = None,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("the bucket needs qps > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._tokens = float(burst)
        self._last = self._clock.now()

    def when(self, key: Hashable) -> float:
        now = self._clock.now()
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = max(self._last, now)
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: Hashable) -> None:
        pass

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter(Generic[K]):
    """Asks every limiter (each records the failure) and returns the longest delay."""

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, key: K) -> float:
        return max([limiter.when(key) for limiter in self.limiters])

    def forget(self, key: K) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def default_controller_rate_limiter(clock: Clock | None = None) -> MaxOfRateLimiter[Hashable]:
    """Per-key 5 ms doubling to 1000 s, and overall 10 per second with a burst of 100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(DEFAULT_ITEM_BASE_DELAY, DEFAULT_ITEM_MAX_DELAY),
        BucketRateLimiter(DEFAULT_BUCKET_QPS, DEFAULT_BUCKET_BURST, clock=clock),
    )
