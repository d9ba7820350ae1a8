"""Backoff: equal-jitter bounds, total coverage of a stall, and what counts as transient."""

from __future__ import annotations

import random

import pytest

from controlplane.preflight.backoff import DEFAULT_POLICY, BackoffPolicy, no_jitter
from controlplane.preflight.permissions import Component, permissions_for
from controlplane.preflight.review import review
from controlplane.preflight.testing import FakeApiServer, FakeClock
from controlplane.runtime.errors import (
    BadRequest,
    Forbidden,
    InternalError,
    RequestTimeout,
    ServiceUnavailable,
    TooManyRequests,
    TransportError,
    Unauthorized,
)

pytestmark = pytest.mark.anyio

PERMISSION = permissions_for(Component.ROUTER_PROXY, "ns")[0]
SSAR_FORBIDDEN = Forbidden(
    403,
    "Forbidden",
    'selfsubjectaccessreviews.authorization.k8s.io is forbidden: User "x" cannot create '
    'resource "selfsubjectaccessreviews" in API group "authorization.k8s.io"',
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("retry", range(12))
def test_equal_jitter_stays_within_half_and_whole_step(retry: int) -> None:
    policy = BackoffPolicy(base_delay=0.5, max_delay=10.0)
    step = min(10.0, 0.5 * 2**retry)
    assert policy.step(retry) == step
    rng = random.Random(retry)
    delays = [policy.delay(retry, rng.uniform) for _ in range(2000)]
    assert min(delays) >= step / 2
    assert max(delays) <= step
    # Spread, not a constant: both halves of the jitter range are used.
    assert min(delays) < step * 0.6
    assert max(delays) > step * 0.9


def test_no_jitter_source_gives_the_full_step_and_huge_retries_do_not_overflow() -> None:
    assert DEFAULT_POLICY.delay(3, no_jitter) == DEFAULT_POLICY.step(3)
    assert DEFAULT_POLICY.delay(10_000, no_jitter) == DEFAULT_POLICY.max_delay


def test_inconsistent_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        BackoffPolicy(base_delay=5.0, max_delay=1.0)


@pytest.mark.parametrize("uniform", [random.Random(7).uniform, no_jitter, lambda lo, hi: lo])
async def test_default_schedule_covers_at_least_60_seconds_of_stall(uniform: object) -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    server.script(PERMISSION, TransportError("connection refused"))
    result = await review(
        PERMISSION,
        server,
        policy=DEFAULT_POLICY,
        clock=clock,
        uniform=uniform,  # type: ignore[arg-type]
    )
    assert not result.answered
    times = [call.at for call in server.calls]
    # The last attempt lands on the budget's end, and the budget covers a 60 s stall.
    assert times[-1] == pytest.approx(DEFAULT_POLICY.budget)
    assert DEFAULT_POLICY.budget >= 60.0
    # Every wait but the clamped last one is a full equal-jitter step of its retry number.
    for retry, waited in enumerate(clock.sleeps[:-1]):
        step = DEFAULT_POLICY.step(retry)
        assert step / 2 <= waited <= step
    assert 0 < clock.sleeps[-1] <= DEFAULT_POLICY.step(len(clock.sleeps) - 1)
    assert result.attempts == len(times) == len(clock.sleeps) + 1


async def test_a_stall_shorter_than_the_budget_is_ridden_through() -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    stall = [RequestTimeout("no answer")] * 9 + [SSAR_FORBIDDEN] * 3 + [True]
    server.script(PERMISSION, *stall)
    result = await review(
        PERMISSION, server, policy=DEFAULT_POLICY, clock=clock, uniform=random.Random(1).uniform
    )
    assert result.allowed is True
    assert result.attempts == 13


@pytest.mark.parametrize(
    "error",
    [
        TransportError("connection reset by peer"),
        RequestTimeout("timed out"),
        InternalError(500, "InternalError", "boom"),
        ServiceUnavailable(503, "ServiceUnavailable", "apiserver is shutting down"),
        SSAR_FORBIDDEN,
        TooManyRequests(429, "TooManyRequests", "slow down"),
    ],
)
async def test_transient_errors_are_retried(error: Exception) -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    server.script(PERMISSION, error, error, True)
    result = await review(PERMISSION, server, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter)
    assert result.allowed is True
    assert len(server.calls) == 3


@pytest.mark.parametrize(
    "error",
    [Unauthorized(401, "Unauthorized", "bad token"), BadRequest(400, "BadRequest", "no")],
)
async def test_errors_that_asking_again_cannot_fix_end_the_review_at_once(error: Exception) -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    server.script(PERMISSION, error, True)
    result = await review(PERMISSION, server, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter)
    assert not result.answered
    assert len(server.calls) == 1
    assert str(error.args[0]) in result.error


async def test_retry_after_is_honoured_when_longer_than_the_backoff() -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    throttled = TooManyRequests(429, "TooManyRequests", "slow down", retry_after=7.0)
    server.script(PERMISSION, throttled, True)
    await review(PERMISSION, server, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter)
    assert clock.sleeps == [7.0]


async def test_retry_after_beyond_the_budget_ends_the_review_rather_than_ignore_it() -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    throttled = TooManyRequests(429, "TooManyRequests", "slow down", retry_after=500.0)
    server.script(PERMISSION, throttled, True)
    result = await review(PERMISSION, server, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter)
    assert not result.answered
    assert clock.sleeps == []


async def test_recovery_403_says_it_is_the_review_itself_that_was_refused() -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    server.script(PERMISSION, SSAR_FORBIDDEN)
    result = await review(
        PERMISSION, server, policy=BackoffPolicy(budget=5.0), clock=clock, uniform=no_jitter
    )
    assert not result.answered
    assert "refused the review itself" in result.error
