"""Retries of transient failures: capped exponential backoff with jitter, reset by progress.

Connect errors, timeouts, a cut connection, 5xx and 429 are retried ``--retries`` times, each
wait doubling from ``--retry-delay`` up to :data:`MAX_DELAY` and stretched by up to 100 % random
jitter (the reflector's backoff, :class:`controlplane.runtime.backoff.Backoff`), so that the pods
of a node that lost the same mirror do not come back in lock-step. An attempt that moved the
download forward resets the count: a long download over a flaky link fails only when the link
stops carrying bytes, not after the fifth blip of an hour. A server's ``Retry-After`` is honoured
up to the cap. When the retries run out, the last error goes up; the prefetch Job's own backoff
(exit code 1) takes over from there.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from controlplane.modelfetch.errors import FetchError
from controlplane.runtime.backoff import Backoff

log = logging.getLogger("controlplane.modelfetch")

DEFAULT_RETRIES: Final = 5
DEFAULT_DELAY: Final = 1.0
MAX_DELAY: Final = 30.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retries: int = DEFAULT_RETRIES
    initial_delay: float = DEFAULT_DELAY
    max_delay: float = MAX_DELAY

    def backoff(self) -> Backoff:
        return Backoff(initial=self.initial_delay, cap=self.max_delay, reset_after=math.inf)


def retrying(
    attempt: Callable[[], T],
    policy: RetryPolicy,
    *,
    progressed: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``attempt()`` until it returns, retrying the transient :class:`FetchError`\\ s it raises.

    ``progressed`` answers whether the attempt that just failed moved the download forward.
    """
    failures, backoff = 0, policy.backoff()
    while True:
        try:
            return attempt()
        except FetchError as err:
            if not err.transient:
                raise
            if progressed():
                failures, backoff = 0, policy.backoff()
            failures += 1
            if failures > policy.retries:
                if policy.retries:
                    err.message = f"{err.message} (gave up after {failures} attempts)"
                raise
            delay = backoff.next_delay()
            if err.retry_after is not None:
                delay = max(delay, min(err.retry_after, policy.max_delay))
            log.warning(
                "%s; retry %d of %d in %.1f s", err.message, failures, policy.retries, delay
            )
            sleep(delay)
