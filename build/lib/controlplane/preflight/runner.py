"""The preflight of one component: cache first, then the live check, then the cache's grace.

Order of business, and why:
1. A fresh cached ALLOWED (under an hour) answers at once, with no API call: a restart within the
   hour costs the API server nothing, which matters most right after a stall.
2. Otherwise every declared permission is reviewed live, with retries (:mod:`.review`).
3. ALLOWED is cached; DENIED removes any cached ALLOWED (it is now known to be wrong) and is
   never cached; INCONCLUSIVE looks at the cache again (another process may have succeeded
   meanwhile) and falls back to an ALLOWED up to a day old, with a warning. With nothing usable
   it stays INCONCLUSIVE, which says plainly that it is not a denial.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from controlplane.clock import SYSTEM_CLOCK, WallClock
from controlplane.preflight.backoff import (
    DEFAULT_POLICY,
    BackoffPolicy,
    RandomSource,
    system_random,
)
from controlplane.preflight.cache import CacheKey, CacheLookup, VerdictCache, default_cache_dir
from controlplane.preflight.check import DEFAULT_MAX_IN_FLIGHT, CheckResult, check_permissions
from controlplane.preflight.identity import identity_of
from controlplane.preflight.permissions import (
    Component,
    ScopedPermission,
    permission_set_digest,
    permissions_for,
)
from controlplane.preflight.review import SubmitReview
from controlplane.preflight.verdict import (
    Outcome,
    Source,
    Verdict,
    allowed_message,
    denied_message,
    inconclusive_message,
)
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.resources import SELF_SUBJECT_ACCESS_REVIEWS

log = logging.getLogger("controlplane.preflight")

#: Seconds one review attempt may take: a hung API server costs this much per attempt.
DEFAULT_ATTEMPT_TIMEOUT = 5.0


class Preflight:
    """Checks that ``component``, authenticated by ``config``, holds its declared permissions.

    ``submit`` replaces the API client (tests); by default each :meth:`run` opens a
    :class:`KubeClient` with ``attempt_timeout`` and closes it afterwards.
    """

    def __init__(
        self,
        config: ClientConfig,
        component: Component,
        namespace: str,
        *,
        cache: VerdictCache | None = None,
        policy: BackoffPolicy = DEFAULT_POLICY,
        clock: WallClock = SYSTEM_CLOCK,
        uniform: RandomSource | None = None,
        submit: SubmitReview | None = None,
        attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self.config = config
        self.component = component
        self.namespace = namespace
        self.permissions: tuple[ScopedPermission, ...] = permissions_for(component, namespace)
        self.identity = identity_of(config)
        self.key = CacheKey(
            config.server, namespace, self.identity.key, permission_set_digest(self.permissions)
        )
        self.cache = cache if cache is not None else VerdictCache(default_cache_dir(), clock=clock)
        self.policy = policy
        self.clock = clock
        self.uniform = uniform or system_random()
        self._submit = submit
        self.attempt_timeout = attempt_timeout
        self.max_in_flight = max_in_flight

    async def run(self) -> Verdict:
        """One preflight; never raises for an API failure (that is what INCONCLUSIVE is for)."""
        before = self.cache.lookup(self.key)
        if before.entry is not None and self.cache.is_fresh(before.entry):
            return self._from_cache(before, Source.CACHE)
        checked_at = self.clock.time()
        async with self._submitter() as submit:
            result = await check_permissions(
                self.permissions,
                submit,
                policy=self.policy,
                clock=self.clock,
                uniform=self.uniform,
                max_in_flight=self.max_in_flight,
            )
        if result.denied:
            self.cache.forget(self.key)
            return self._denied(result, before.warnings)
        if not result.unanswered:
            self.cache.store(self.key, checked_at)
            return self._allowed(result, checked_at, before.warnings)
        after = self.cache.lookup(self.key)
        if after.entry is not None:
            source = Source.CACHE if self.cache.is_fresh(after.entry) else Source.STALE_CACHE
            return self._from_cache(after, source, result)
        return self._inconclusive(result, before.warnings + after.warnings)

    # -- the live client ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _submitter(self) -> AsyncIterator[SubmitReview]:
        if self._submit is not None:
            yield self._submit
            return
        async with KubeClient(self.config, timeout=self.attempt_timeout) as client:

            async def submit(body: dict[str, Any]) -> dict[str, Any]:
                return await client.create(SELF_SUBJECT_ACCESS_REVIEWS, body)

            yield submit

    # -- verdicts -----------------------------------------------------------------------------

    def _from_cache(
        self, lookup: CacheLookup, source: Source, live: CheckResult | None = None
    ) -> Verdict:
        assert lookup.entry is not None
        age = lookup.entry.age(self.clock.time())
        warnings = list(lookup.warnings)
        if source is Source.STALE_CACHE and live is not None:
            last = next((r.error for r in live.unanswered), "")
            warnings.append(
                f"using a cached ALLOWED verdict {age / 3600:.1f} h old, past its "
                f"{self.cache.fresh_for / 3600:.0f} h freshness, because the live check was "
                f"inconclusive ({last}); permissions granted or revoked since are not reflected"
            )
            log.warning("%s", warnings[-1])
        return Verdict(
            Outcome.ALLOWED,
            source,
            self.component,
            self.namespace,
            allowed_message(self.component, self.namespace, len(self.permissions), source, age),
            warnings=tuple(warnings),
            checked_at=lookup.entry.checked_at,
            reviews_sent=live.reviews_sent if live is not None else 0,
        )

    def _allowed(
        self, result: CheckResult, checked_at: float, warnings: tuple[str, ...]
    ) -> Verdict:
        return Verdict(
            Outcome.ALLOWED,
            Source.LIVE,
            self.component,
            self.namespace,
            allowed_message(self.component, self.namespace, len(self.permissions), Source.LIVE),
            warnings=warnings,
            checked_at=checked_at,
            reviews_sent=result.reviews_sent,
        )

    def _denied(self, result: CheckResult, warnings: tuple[str, ...]) -> Verdict:
        missing = tuple(r.permission for r in result.denied)
        reasons = {r.permission: r.reason for r in result.denied if r.reason}
        unanswered = tuple(r.permission for r in result.unanswered)
        return Verdict(
            Outcome.DENIED,
            Source.LIVE,
            self.component,
            self.namespace,
            denied_message(self.component, self.namespace, missing, reasons, len(unanswered)),
            missing=missing,
            unanswered=unanswered,
            warnings=warnings,
            reviews_sent=result.reviews_sent,
        )

    def _inconclusive(self, result: CheckResult, warnings: tuple[str, ...]) -> Verdict:
        unanswered = tuple(r.permission for r in result.unanswered)
        last = result.unanswered[-1].error
        return Verdict(
            Outcome.INCONCLUSIVE,
            Source.LIVE,
            self.component,
            self.namespace,
            inconclusive_message(
                self.component,
                self.namespace,
                self.config.server,
                unanswered,
                len(self.permissions),
                last,
            ),
            unanswered=unanswered,
            warnings=warnings,
            reviews_sent=result.reviews_sent,
        )


async def run_preflight(
    config: ClientConfig,
    component: Component,
    namespace: str,
    *,
    cache_dir: Path | None = None,
    policy: BackoffPolicy = DEFAULT_POLICY,
) -> Verdict:
    """The one call a process makes at start: check ``component``'s permissions in ``namespace``.

    ``cache_dir`` defaults to :func:`default_cache_dir`; in a pod, pass a writable emptyDir.
    """
    cache = VerdictCache(cache_dir if cache_dir is not None else default_cache_dir())
    return await Preflight(config, component, namespace, cache=cache, policy=policy).run()
