"""The rate-limiting layer: retries wait for the limiter's delay, and ``forget`` resets it."""

from __future__ import annotations

import pytest

from controlplane.runtime.workqueue import (
    FakeClock,
    ItemExponentialFailureRateLimiter,
    RateLimitingQueue,
)

pytestmark = pytest.mark.anyio


def make_queue() -> tuple[RateLimitingQueue[str], FakeClock]:
    clock = FakeClock()
    return RateLimitingQueue(clock=clock), clock


async def test_a_rate_limited_key_waits_for_its_backoff() -> None:
    queue, clock = make_queue()
    queue.add_rate_limited("a")  # 5 ms
    clock.advance(0.004)
    assert len(queue) == 0
    clock.advance(0.001)
    assert len(queue) == 1
    queue.done(await queue.get())
    queue.add_rate_limited("a")  # 10 ms
    clock.advance(0.009)
    assert len(queue) == 0
    clock.advance(0.001)
    assert len(queue) == 1
    assert queue.num_requeues("a") == 2


async def test_forget_resets_the_backoff_but_keeps_the_key_queued() -> None:
    queue, clock = make_queue()
    for _ in range(5):
        queue.add_rate_limited("a")
    clock.advance(0.005)
    assert len(queue) == 1, "the later backoffs did not postpone the first"
    queue.forget("a")
    assert len(queue) == 1
    assert queue.num_requeues("a") == 0
    queue.done(await queue.get())
    queue.add_rate_limited("a")
    clock.advance(0.005)
    assert len(queue) == 1, "after forget the next retry is 5 ms again"


async def test_the_default_limiter_shares_the_queues_clock() -> None:
    queue, clock = make_queue()
    for i in range(101):
        queue.add_rate_limited(f"k{i}")
    clock.advance(0.005)
    assert len(queue) == 100, "the burst covers a hundred retries"
    clock.advance(0.095)
    assert len(queue) == 101, "the 101st waits for the bucket: 100 ms"


async def test_a_custom_limiter_is_used() -> None:
    clock = FakeClock()
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        ItemExponentialFailureRateLimiter(base_delay=2, max_delay=3), clock=clock
    )
    queue.add_rate_limited("a")
    clock.advance(1.9)
    assert len(queue) == 0
    clock.advance(0.1)
    assert len(queue) == 1


async def test_no_retry_is_counted_after_shut_down() -> None:
    queue, _ = make_queue()
    queue.shut_down()
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 0
