"""One SelfSubjectAccessReview per permission, retried through transient failures.

Each attempt builds its own request body: a body the client (or a test double) may have touched is
never sent again, and a retry always asks about its own permission, never a neighbour's.

Transient, retried: no answer at all (connection refused or reset, client timeout: a SIGSTOPped
API server accepts connections into the kernel backlog and never answers), 5xx, 429 (waiting at
least its ``Retry-After``), and 403 on the review itself. That last one is what a recovering API
server says ("selfsubjectaccessreviews ... is forbidden") before its authorizer has caught up;
every authenticated user normally holds ``create selfsubjectaccessreviews`` through
``system:basic-user``, so a 403 here is a statement about the server, not about the permission
under review. Anything else (401, other 4xx, an answer that is not a review) will not improve by
asking again and ends the review unanswered at once. A definitive ``allowed: false`` is an answer,
never retried.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from controlplane.clock import WallClock
from controlplane.preflight.backoff import BackoffPolicy, RandomSource
from controlplane.preflight.errors import ReviewAnswerInvalid
from controlplane.preflight.outage import OutageGuard
from controlplane.preflight.permissions import ScopedPermission
from controlplane.runtime.errors import (
    ApiError,
    Forbidden,
    InternalError,
    KubeError,
    ServerTimeout,
    ServiceUnavailable,
    TooManyRequests,
    TransportError,
)

#: Sends one review body and returns the API server's decoded answer.
SubmitReview = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

API_VERSION = "authorization.k8s.io/v1"
KIND = "SelfSubjectAccessReview"


def review_body(permission: ScopedPermission) -> dict[str, Any]:
    """A new SelfSubjectAccessReview asking about ``permission`` (a fresh object every call)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "spec": {"resourceAttributes": permission.resource_attributes()},
    }


@dataclass(frozen=True, slots=True)
class ReviewResult:
    """The fate of one permission's review: answered (``allowed`` set) or not (``error`` set)."""

    permission: ScopedPermission
    allowed: bool | None
    attempts: int
    #: The API server's ``reason`` or ``evaluationError`` for a denial.
    reason: str = ""
    #: The last failure when unanswered.
    error: str = ""

    @property
    def answered(self) -> bool:
        return self.allowed is not None


def is_transient(err: Exception) -> bool:
    """Whether asking again may succeed (see the module docstring for why each is here)."""
    if isinstance(err, TransportError | TooManyRequests | Forbidden):
        return True
    if isinstance(err, InternalError | ServiceUnavailable | ServerTimeout):
        return True
    return isinstance(err, ApiError) and err.status_code >= 500


def describe(err: Exception) -> str:
    """A one-line account of a failure, with a hint where the failure is easy to misread."""
    text = str(err) or type(err).__name__
    if isinstance(err, Forbidden):
        return (
            f"{text} [the API server refused the review itself: usual while its authorizer "
            "recovers; if it persists, the identity lacks create selfsubjectaccessreviews]"
        )
    return text


def decide(permission: ScopedPermission, answer: dict[str, Any], attempts: int) -> ReviewResult:
    """Read ``status.allowed`` from the answer; anything but a boolean is not an answer."""
    status = answer.get("status")
    allowed = status.get("allowed") if isinstance(status, dict) else None
    if not isinstance(status, dict) or not isinstance(allowed, bool):
        raise ReviewAnswerInvalid(f"the answer has no boolean status.allowed: {answer!r:.300}")
    reason = str(status.get("reason") or status.get("evaluationError") or "")
    return ReviewResult(permission, allowed, attempts, reason=reason)


async def review(
    permission: ScopedPermission,
    submit: SubmitReview,
    *,
    policy: BackoffPolicy,
    clock: WallClock,
    uniform: RandomSource,
    guard: OutageGuard | None = None,
) -> ReviewResult:
    """Ask about ``permission`` until the API server answers or ``policy.budget`` is spent.

    With a ``guard`` shared by the reviews of a check, only one of them asks while the server
    gives no answer at all; the others skip their turns (see :mod:`controlplane.preflight.outage`).
    """
    guard = guard or OutageGuard()
    me = object()
    deadline = clock.now() + policy.budget
    attempts = 0
    turn = 0  # retry turns taken, sent or skipped: the backoff step follows them
    last: Exception | None = None
    try:
        while True:
            out_of_time = turn and clock.now() >= deadline
            if out_of_time and not guard.answering and not guard.is_prober(me):
                # Out of time while the server is silent: only its prober takes a last shot.
                error = describe(last) if last is not None else _never_sent(guard)
                return ReviewResult(permission, None, attempts, error=error)
            if not guard.try_admit(me):
                if guard.first_outcome_pending:
                    await guard.first_outcome()
                    continue
                # Another review is probing a silent server: skip this turn, keep our schedule.
            else:
                attempts += 1
                try:
                    answer = await submit(review_body(permission))
                except TransportError as err:
                    guard.silent(me, describe(err))
                    last = err
                except (KubeError, ReviewAnswerInvalid, ValueError) as err:
                    guard.answered(me)  # an answer, even an unwelcome one: the server talks
                    if not is_transient(err):
                        return ReviewResult(permission, None, attempts, error=describe(err))
                    last = err
                else:
                    guard.answered(me)
                    try:
                        return decide(permission, answer, attempts)
                    except ReviewAnswerInvalid as err:
                        return ReviewResult(permission, None, attempts, error=describe(err))
            now = clock.now()
            if now >= deadline:
                error = describe(last) if last is not None else _never_sent(guard)
                return ReviewResult(permission, None, attempts, error=error)
            wait = policy.delay(turn, uniform)
            turn += 1
            if isinstance(last, ApiError) and last.retry_after is not None:
                if now + last.retry_after > deadline:  # the server's word outranks our budget
                    return ReviewResult(permission, None, attempts, error=describe(last))
                wait = max(wait, last.retry_after)
            await clock.sleep(min(wait, deadline - now))
    finally:
        guard.leave(me)


def _never_sent(guard: OutageGuard) -> str:
    return "not sent: the API server did not answer the review probing it" + (
        f" (last: {guard.last_silence})" if guard.last_silence else ""
    )
