"""The rate-limiting layer: retries of a failing key are spaced out by a :class:`RateLimiter`.

A controller calls ``add_rate_limited(key)`` when a reconcile fails, and ``forget(key)`` when it
succeeds, so the next failure starts its backoff from the beginning. ``forget`` only clears the
limiter's memory; it does not remove a key from the queue. This layer adds nothing else: the
delay itself is the delaying layer's ``add_after``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, TypeVar

from controlplane.runtime.workqueue.clock import Clock, SystemClock
from controlplane.runtime.workqueue.delaying import DelayingQueue, DelayingWorkQueue
from controlplane.runtime.workqueue.metrics import MetricsProvider
from controlplane.runtime.workqueue.ratelimiters import RateLimiter, default_controller_rate_limiter

K = TypeVar("K", bound=Hashable)


class RateLimitingWorkQueue(DelayingWorkQueue[K], Protocol[K]):
    """A :class:`DelayingWorkQueue` whose retries are paced by a rate limiter."""

    def add_rate_limited(self, key: K) -> None: ...

    def forget(self, key: K) -> None: ...

    def num_requeues(self, key: K) -> int: ...


class RateLimitingQueue(DelayingQueue[K]):
    """The delaying queue plus rate-limited retries; the default limiter is client-go's."""

    def __init__(
        self,
        rate_limiter: RateLimiter[K] | None = None,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        clock = clock if clock is not None else SystemClock()
        super().__init__(name, clock=clock, metrics_provider=metrics_provider)
        self.rate_limiter: RateLimiter[K] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock)
        )

    def add_rate_limited(self, key: K) -> None:
        """Queue ``key`` after the delay the limiter gives it (nothing, once shut down).

        client-go asks the limiter even after shut-down; asking would count a failure and spend
        a token for a retry that can never run, so this does not.
        """
        if not self._shutting_down:
            self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff (call after a successful reconcile)."""
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.rate_limiter.num_requeues(key)
