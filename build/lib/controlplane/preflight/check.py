"""All the reviews of one check, sent concurrently, each with its own retries.

Concurrency keeps a healthy check to one round trip; a limit on requests in flight keeps the
operator's few dozen reviews from opening a few dozen connections to an API server that is
recovering. The limit covers only the request, never the backoff sleep, so a permission waiting
to retry does not hold a slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from controlplane.clock import WallClock
from controlplane.preflight.backoff import BackoffPolicy, RandomSource
from controlplane.preflight.outage import OutageGuard
from controlplane.preflight.permissions import ScopedPermission
from controlplane.preflight.review import ReviewResult, SubmitReview, review

#: Reviews of one check in flight at once.
DEFAULT_MAX_IN_FLIGHT = 16


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The review result of every permission of one check, in the order asked."""

    results: tuple[ReviewResult, ...]
    reviews_sent: int

    @property
    def denied(self) -> tuple[ReviewResult, ...]:
        return tuple(r for r in self.results if r.allowed is False)

    @property
    def unanswered(self) -> tuple[ReviewResult, ...]:
        return tuple(r for r in self.results if not r.answered)


async def check_permissions(
    permissions: Sequence[ScopedPermission],
    submit: SubmitReview,
    *,
    policy: BackoffPolicy,
    clock: WallClock,
    uniform: RandomSource,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> CheckResult:
    """Review every permission concurrently; each retries on its own schedule, and while the
    server gives no answer at all only one of them asks (:mod:`controlplane.preflight.outage`)."""
    limit = anyio.Semaphore(max_in_flight)
    sent = 0

    async def limited(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal sent
        async with limit:
            sent += 1
            return await submit(body)

    results: list[ReviewResult | None] = [None] * len(permissions)
    guard = OutageGuard()

    async def one(index: int, permission: ScopedPermission) -> None:
        results[index] = await review(
            permission, limited, policy=policy, clock=clock, uniform=uniform, guard=guard
        )

    async with anyio.create_task_group() as group:
        for index, permission in enumerate(permissions):
            group.start_soon(one, index, permission)
    return CheckResult(tuple(r for r in results if r is not None), sent)
