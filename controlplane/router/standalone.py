"""A request for an InferenceService no pool lists that scales to zero: forwarded, or held.

docs/router.md ("Scale from zero") and docs/inferenceservice.md ("Scale to zero"). An
InferenceService with ``spec.idleAfter`` is scaled to zero by the operator once no replica has
reported a request for it that long. This is the router-proxy's side, the activator's hold
without a pool (no Lease, no swap driver: the service has no rival for a slot):

* every request for such a service, forwarded or held, makes this replica report its demand
  under :data:`~controlplane.api.v1alpha1.demand.STANDALONE_REPORTS` (in flight, through the
  in-flight counts; held, through :class:`~controlplane.router.demand.LocalDemand`), which is
  what keeps its clock stopped and what brings it back;
* while it has no ready endpoint, or its status says it is being scaled to zero
  (``status.scaledToZero``: nothing is forwarded to a pod about to stop), a request is held until
  it is ready, within ``--scale-from-zero-budget``; past it, 503 ``activation_timeout`` with a
  ``Retry-After`` learnt from how long it took to come back before;
* a service without ``spec.idleAfter`` keeps the old rule: no ready endpoint is 503
  ``backend_unavailable`` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio

from controlplane.api.v1alpha1.demand import STANDALONE_REPORTS
from controlplane.api.v1alpha1.inferenceservice import is_scaled_to_zero, scales_to_zero
from controlplane.clock import TimeSource
from controlplane.router.admission import ClusterView
from controlplane.router.demand import LocalDemand
from controlplane.router.errors import ActivationTimeout, BackendUnavailable, ProxyStopping
from controlplane.router.retryafter import SwapHistory
from controlplane.router.wakeups import Notifier

#: How long a request for a service scaled to zero is held (``--scale-from-zero-budget``): a
#: pool's default ``swapBudget``, the same wait for the same cold start.
DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS: Final = 300.0


class StandaloneServices:
    """Readiness of the InferenceServices no pool lists, and the hold of one scaled to zero."""

    def __init__(
        self,
        view: ClusterView,
        local: LocalDemand,
        notifier: Notifier,
        history: SwapHistory,
        clock: TimeSource,
        *,
        budget: float = DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.view, self.local, self.notifier = view, local, notifier
        self.history, self.clock, self.budget = history, clock, budget
        self.stopping = stopping

    def ready_url(self, member: str) -> str | None:
        """The URL to forward to now; None when the request is to be held (a service that
        scales to zero and is not up); :class:`BackendUnavailable` for one that does not."""
        isvc = self.view.isvc(member)
        if not scales_to_zero(isvc):
            urls = self.view.member_urls(member)
            if not urls:
                raise BackendUnavailable(f"{member} has no ready endpoint")
            return urls[0]
        self.local.routed(STANDALONE_REPORTS, member)  # its requests in flight are reported
        if is_scaled_to_zero(isvc):
            return None
        urls = self.view.member_urls(member)
        return urls[0] if urls else None

    async def hold(self, member: str) -> str:
        """Hold until ``member`` is up (within :attr:`budget`), counted as held demand in this
        replica's report: the demand that brings it back."""
        started = self.clock()
        answered = self.local.hold(STANDALONE_REPORTS, member)
        try:
            with anyio.move_on_after(self.budget):
                while True:
                    event = self.notifier.snapshot()
                    url = self.ready_url(member)
                    if url is not None:
                        self.history.record(STANDALONE_REPORTS, member, self.clock() - started)
                        return url
                    if self.stopping():
                        raise ProxyStopping(
                            f"this router-proxy replica is stopping; retry for {member}",
                            retry_after=self._retry_after(member, started),
                        )
                    await event.wait()
            raise ActivationTimeout(
                f"{member} (scaled to zero: spec.idleAfter) did not come back within "
                f"{self.budget:g} s",
                retry_after=self._retry_after(member, started),
            )
        finally:
            answered()

    def _retry_after(self, member: str, started: float) -> int:
        elapsed = self.clock() - started
        return self.history.retry_after(STANDALONE_REPORTS, member, elapsed, self.budget)
