"""The rate limiters' exact delays: client-go's defaults are a contract dashboards rely on."""

from __future__ import annotations

import pytest

from controlplane.runtime.workqueue import (
    DEFAULT_BUCKET_BURST,
    DEFAULT_BUCKET_QPS,
    DEFAULT_ITEM_BASE_DELAY,
    DEFAULT_ITEM_MAX_DELAY,
    BucketRateLimiter,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


def test_defaults_are_client_gos() -> None:
    assert DEFAULT_ITEM_BASE_DELAY == 0.005
    assert DEFAULT_ITEM_MAX_DELAY == 1000.0
    assert DEFAULT_BUCKET_QPS == 10.0
    assert DEFAULT_BUCKET_BURST == 100


def test_exponential_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("a") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[17] == 655.36  # 0.005 * 2**17, the last step below the cap
    assert delays[18:] == [1000.0, 1000.0]
    assert limiter.num_requeues("a") == 20


def test_exponential_tracks_each_key_on_its_own() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    limiter.when("a")
    limiter.when("a")
    assert limiter.when("b") == 0.005
    assert limiter.num_requeues("a") == 2
    assert limiter.num_requeues("b") == 1


def test_forget_restarts_the_backoff() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    for _ in range(5):
        limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 0.005


def test_exponential_never_overflows_for_a_key_failing_for_ever() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    for _ in range(1100):  # 2.0**1024 overflows a float
        delay = limiter.when("a")
    assert delay == 1000.0


def test_bucket_allows_a_burst_of_100_then_spaces_by_100ms() -> None:
    limiter = BucketRateLimiter(clock=FakeClock())
    assert [limiter.when(i) for i in range(100)] == [0.0] * 100
    assert [limiter.when(i) for i in range(3)] == pytest.approx([0.1, 0.2, 0.3])


def test_bucket_refills_at_qps_up_to_the_burst() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(clock=clock)
    for i in range(100):
        limiter.when(i)
    clock.advance(1.0)  # ten tokens back
    assert [limiter.when(i) for i in range(10)] == [0.0] * 10
    assert limiter.when("x") == pytest.approx(0.1)
    clock.advance(3600)  # a long quiet time refills only up to the burst
    assert [limiter.when(i) for i in range(100)] == [0.0] * 100
    assert limiter.when("x") == pytest.approx(0.1)


def test_bucket_debt_is_paid_back_as_time_passes() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(clock=clock)
    for i in range(105):
        limiter.when(i)  # five tokens in debt: the 105th waits 0.5 s
    clock.advance(0.25)
    assert limiter.when("x") == pytest.approx(0.35)  # 3.5 tokens in debt after this one


def test_bucket_has_no_per_key_memory() -> None:
    limiter = BucketRateLimiter(clock=FakeClock())
    limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_bucket_rejects_a_bucket_that_can_never_fill() -> None:
    with pytest.raises(ValueError, match="qps"):
        BucketRateLimiter(qps=0)
    with pytest.raises(ValueError, match="burst"):
        BucketRateLimiter(burst=0)


def test_max_of_takes_the_longest_delay_and_forwards_forget() -> None:
    short: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1)
    long: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1, 100)
    limiter = MaxOfRateLimiter(short, long)
    assert limiter.when("a") == 1
    assert limiter.when("a") == 2
    assert short.num_requeues("a") == long.num_requeues("a") == 2
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert short.num_requeues("a") == long.num_requeues("a") == 0


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter[str]()


def test_default_controller_limiter_is_backoff_or_bucket_whichever_is_longer() -> None:
    limiter = default_controller_rate_limiter(FakeClock())
    # A hundred different keys failing once each: the burst covers them, the backoff rules.
    assert [limiter.when(i) for i in range(100)] == [0.005] * 100
    # The 101st retry finds the bucket empty: 100 ms beats the key's first 5 ms.
    assert limiter.when(100) == pytest.approx(0.1)
    # A key deep in its backoff waits for its backoff, not for the bucket.
    for _ in range(10):
        delay = limiter.when("broken")
    assert delay == pytest.approx(0.005 * 2**9)
    limiter.forget("broken")
    assert limiter.num_requeues("broken") == 0
