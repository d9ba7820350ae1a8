"""The activator: hold a cross-model request, coalesce, drive one swap per pool, answer in budget.

*Why this module:* it is the activator's orchestrator and the held requests' side of it. A request
for a pool member that is not ready is *held* (never refused with 429) for at most the pool's
``swapBudget`` (docs/router.md, "The activator"); every held request for the same target joins
one :class:`~controlplane.router.swapdriver.Swap` on this replica and waits, on the notifier, for
whatever can change its answer. The parts it orders live beside it, each with one job:

* :mod:`~controlplane.router.admission`: whether a request may be forwarded now (the fast path,
  and each held request's every wake), and the pool's swap budget; it only reads the caches;
* :mod:`~controlplane.router.swapdriver`: the swap's driver (the pool's turn, the Lease's claim
  and renewal, the direct probe of the target's health, the linger, the finish and release);
* :mod:`~controlplane.router.wakeups`: who wakes whom (held requests on cache events and a swap's
  end; drivers on those and on every request's end and the backstop's tick).

Here: the one public call (:meth:`Activator.upstream`), the bound on held requests, the wait of
one held request, its 503 when the budget runs out, the swap it joins, the backstop's tick, and the
stop.

**Abandoned swaps linger for the retry they promised.** When its last held request times out
(503 ``pool_activation_timeout`` with a ``Retry-After`` from measured swap times,
:mod:`controlplane.router.retryafter`), the swap is told to linger until that ``Retry-After`` plus
a grace has passed, so a retrying client joins it (:mod:`~controlplane.router.swapdriver`).

**Spans** (docs/router.md, "Tracing"): each held request is a ``hold`` span; the request that
starts a swap is the parent of its ``swap`` span (the driver); a request that joins a running swap
links to that ``swap`` span instead (its own trace stays its own).

Nothing is dispatched on belief alone: readiness is read from the informer caches at the moment
a request is dispatched (:meth:`Activator.ready_url`).
"""

from __future__ import annotations

import logging
import time

import anyio
from opentelemetry import trace

from controlplane.clock import TimeSource
from controlplane.router import metrics
from controlplane.router.admission import Admission, ClusterView
from controlplane.router.demand import DEFAULT_ACTIVITY_WINDOW_SECONDS, LocalDemand, PoolLeases
from controlplane.router.directready import DirectReady
from controlplane.router.errors import (
    MIN_RETRY_AFTER_SECONDS,
    ActivationTimeout,
    HoldFull,
    LeaseUnavailable,
    PoolBusy,
    ProxyError,
    ProxyStopping,
)
from controlplane.router.inflight import InFlightRequests
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.retryafter import LINGER_GRACE_SECONDS, SwapHistory
from controlplane.router.routing import Route
from controlplane.router.schedule import PoolSchedule
from controlplane.router.standalone import (
    DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS,
    StandaloneServices,
)
from controlplane.router.swapdriver import Swap, SwapDriver
from controlplane.router.wakeups import POLL_SECONDS, Notifier

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.router.activator")

#: Requests one replica holds at most (``--max-held-requests``): Knative's activator queues as
#: many per revision; each costs a few KiB (bench/README.md, "held").
DEFAULT_MAX_HELD_REQUESTS = 10_000


class Activator:
    """Turns a route into a ready upstream URL, holding and swapping as needed."""

    needs_leader_election = False

    def __init__(
        self,
        view: ClusterView,
        coordinator: LeaseCoordinator,
        namespace: str,
        *,
        inflight: InFlightRequests | None = None,
        notifier: Notifier | None = None,
        history: SwapHistory | None = None,
        linger_grace: float = LINGER_GRACE_SECONDS,
        local: LocalDemand | None = None,
        leases: PoolLeases | None = None,
        activity_window: float = DEFAULT_ACTIVITY_WINDOW_SECONDS,
        max_held: int = DEFAULT_MAX_HELD_REQUESTS,
        clock: TimeSource = time.monotonic,
        tracing: bool = True,
        direct_ready: DirectReady | None = None,
        scale_from_zero_budget: float = DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS,
    ) -> None:
        self.view = view
        self.coordinator = coordinator
        self.namespace = namespace
        #: What can change a held request's answer: cache events, a swap's end, the stop, the
        #: backstop. Held requests wait on it.
        self.notifier = notifier or Notifier()
        #: That, and what only the swap drivers act on: a request in flight or held ending (the
        #: drain, the demand, a swap left unattended). Only drivers wait on it: an in-flight
        #: release used to wake every held request, 5,000 task steps for each fast-path answer
        #: (bench/README.md, "Slow clients and held capacity (issue 20)").
        self.progress = Notifier()
        self.notifier.forward_to(self.progress)
        self.inflight = inflight or InFlightRequests(self.progress.notify, clock)
        self.local = local or LocalDemand(clock)
        self.history = history or SwapHistory()
        #: InferenceServices no pool lists: forwarded, or, scaled to zero, held (standalone.py).
        self.standalone = StandaloneServices(
            view,
            self.local,
            self.notifier,
            self.history,
            clock,
            budget=scale_from_zero_budget,
            stopping=lambda: self.stopping,
        )
        #: The scheduler's inputs (pooled demand, residency, settings) and its verdict; a
        #: member's reload time as measured here is what evicting it costs (a pool with a budget).
        self.schedule = PoolSchedule(
            view,
            leases or PoolLeases(coordinator.identity, clock),
            self.local,
            self.inflight,
            activity_window=activity_window,
            clock=clock,
            reload=self.history.expected,
        )
        self.admission = Admission(view, self.schedule)
        self.linger_grace = linger_grace
        self.clock = clock
        self.stopping = False
        #: The swaps under way here, their drivers and the pools' turns on this replica.
        self.driver = SwapDriver(
            view,
            coordinator,
            self.admission,
            self.schedule,
            self.history,
            notifier=self.notifier,
            progress=self.progress,
            clock=clock,
            direct_ready=direct_ready,
            stopping=lambda: self.stopping,
            stop=self._stop,
        )
        #: Requests held on this replica now, and how many it may hold (``--max-held-requests``).
        self.held = 0
        self.max_held = max_held
        #: Whether spans are exported: without, a held request makes no ``hold`` span (a no-op
        #: span still cost 2 KB per held request: its context managers and context tokens).
        self.tracing = tracing
        self._group: anyio.abc.TaskGroup | None = None
        #: Set once :meth:`start` has returned: every driver ended, its claim released.
        self._ended = anyio.Event()

    @property
    def swaps(self) -> dict[tuple[str, str], Swap]:
        """The swaps under way on this replica, by (pool, target)."""
        return self.driver.swaps

    async def start(self) -> None:
        """Run swap drivers until cancelled (a manager runnable); then stop starting swaps."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                try:
                    await self._backstop()
                finally:
                    self._stop()
        finally:
            self._ended.set()

    async def stop(self) -> None:
        """Stop now, while the process goes on serving (a stopping replica's first step,
        :mod:`controlplane.router.drain`): held requests are answered 503 ``proxy_stopping``
        with a ``Retry-After``, no swap is started, and every running swap's driver is cancelled,
        which releases its claim on the pool's Lease (bounded: ``swapdriver``'s
        ``RELEASE_WHILE_STOPPING_SECONDS``). Returns once they have; at once when never
        started. The fast path, the in-flight counts and the demand they report go on."""
        self._stop()
        if self._group is None:
            return
        self._group.cancel_scope.cancel()
        await self._ended.wait()

    async def _backstop(self) -> None:
        """Wake every swap driver at least every :data:`POLL_SECONDS` (progress is driven by
        cache events; this is the backstop). Each tick also notes the resident of every pool we
        route to, so a residency's start is seen within a tick even when no request reads it.

        Held requests are not woken by it: every held request has a driver, which judges the
        same readiness first on each wake and, once it holds, ends its swap and wakes them all;
        what else ends a hold (its budget, a swap's error or end, the stop) wakes it by itself.
        A tick that woke 5,000 held requests stalled the loop for 0.2 s every second
        (bench/README.md, "Slow clients and held capacity (issue 20)")."""
        while True:
            await anyio.sleep(POLL_SECONDS)
            for pool in self.local.pools():
                self.schedule.resident_since(pool)
            self.progress.notify()

    def _stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            log.info("activator stopping: held requests are answered 503, no swap is started")
        self.notifier.notify()

    def ready_url(self, pool_name: str, member: str) -> str | None:
        """The member's URL if it may be forwarded to now, else None
        (:meth:`~controlplane.router.admission.Admission.ready_url`)."""
        return self.admission.ready_url(pool_name, member)

    def closed_to(self, route: Route) -> bool:
        """The pool's status closes admission to ``route``'s member for a drain
        (:meth:`~controlplane.router.schedule.PoolSchedule.fenced_off`). Asked once more after a
        request was counted in flight and before it is sent: a closure our cache applied in
        between is then either seen here (the request goes back to be held, and counts there)
        or acknowledged in our report with the request counted (the pool's fenced drain waits
        for it)."""
        return route.pool is not None and self.schedule.fenced_off(route.pool, route.member)

    def expected_in(self, pool: str, member: str) -> int | None:
        """Seconds until ``member`` is likely up, as a ``Retry-After`` would say (the queue ahead
        and the swap times measured), for a held stream's keep-alive; None when no swap to it is
        under way on this replica."""
        swap = self.swaps.get((pool, member))
        return self.driver.retry_after(swap) if swap is not None else None

    # -- the one public call ---------------------------------------------------------------------

    async def upstream(self, route: Route) -> str:
        """A URL to dispatch ``route`` to now; raises a :class:`ProxyError` subclass."""
        url = self.ready_upstream(route)
        if url is not None:
            return url  # fast path
        return await self.hold(route.pool, route.member)

    def ready_upstream(self, route: Route) -> str | None:
        """:meth:`upstream` without the hold: the URL when ``route`` may be dispatched now, None
        when its pool member must be held for (the caller holds, :meth:`hold`, as it sees fit:
        the app watches a held request's client)."""
        if route.pool is None:
            return self.standalone.ready_url(route.member)
        self.local.routed(route.pool, route.member)
        return self.ready_url(route.pool, route.member)

    async def hold(self, pool: str | None, member: str) -> str:
        """Hold until ``member`` of ``pool`` is ready (within budget), joining its swap: a span
        ``hold`` whose outcome says how it ended; an InferenceService no pool lists (``pool``
        None) until it is back from zero (:mod:`~controlplane.router.standalone`). Beyond
        :attr:`max_held` requests held on this replica, a 503 at once: never an unbounded
        queue."""
        if self.held >= self.max_held:
            raise HoldFull(
                f"this router-proxy replica already holds {self.held} requests, its limit; "
                f"retry for {member}",
                retry_after=(pool and self.expected_in(pool, member)) or MIN_RETRY_AFTER_SECONDS,
            )
        self.held += 1
        try:
            if pool is None:
                return await self.standalone.hold(member)
            if self.tracing:
                return await self._traced_hold(pool, member)
            return await self._hold(pool, member, trace.INVALID_SPAN)
        finally:
            self.held -= 1

    async def _traced_hold(self, pool: str, member: str) -> str:
        attributes = {
            "k8s.namespace.name": self.namespace,
            "modelpool.pool": pool,
            "modelpool.member": member,
        }
        with tracer.start_as_current_span("hold", attributes=attributes) as span:
            try:
                url = await self._hold(pool, member, span)
            except ProxyError as err:
                span.set_attribute("modelpool.outcome", err.code)
                span.set_status(trace.StatusCode.ERROR, err.message)
                raise
            span.set_attribute("modelpool.outcome", "ready")
            return url

    async def _hold(self, pool: str, member: str, span: trace.Span) -> str:
        swap = self._join(pool, member)  # raises ProxyStopping on a stopping replica
        self._note_swap(span, swap)
        budget = self.admission.budget(pool)
        started = self.clock()
        gauge = metrics.HELD_REQUESTS.labels(pool)
        gauge.inc()
        answered = self.local.hold(pool, member)
        try:
            with anyio.move_on_after(budget):
                while True:
                    event = self.notifier.snapshot()
                    url = self.ready_url(pool, member) or self._direct_url(pool, swap)
                    if url is not None:
                        return url
                    if swap.error is not None:
                        raise swap.error
                    if self.stopping:
                        raise ProxyStopping(
                            f"this router-proxy replica is stopping; retry for {member}",
                            retry_after=self.driver.retry_after(swap),
                        )
                    if swap.finished:  # ended without making it ready (e.g. readiness flickered)
                        swap.waiters -= 1
                        swap = self._join(pool, member)
                        self._note_swap(span, swap)
                    await event.wait()  # the next change, or the backstop's tick
            raise self._budget_elapsed(swap, budget)
        finally:
            answered()
            swap.waiters -= 1
            gauge.dec()
            metrics.HOLD_DURATION.labels(pool).observe(self.clock() - started)
            self.progress.notify()  # its driver may be unattended now

    def _budget_elapsed(self, swap: Swap, budget: float) -> ProxyError:
        """The 503 for a request whose budget ran out, and the swap's linger for its retry."""
        retry = self.driver.retry_after(swap)
        swap.linger_until = max(swap.linger_until, self.clock() + retry + self.linger_grace)
        pool, member = swap.pool, swap.member
        if swap.busy:
            return PoolBusy(
                f"pool {pool}: the slot's turn did not pass to {member} within the swap budget "
                f"({budget:g} s): other members had it (spec.scheduling)",
                retry_after=retry,
            )
        if swap.lease_error is not None:
            return LeaseUnavailable(
                f"pool {pool}: {member} was not activated within the swap budget "
                f"({budget:g} s): {swap.lease_error.message}",
                retry_after=retry,
            )
        return ActivationTimeout(
            f"pool {pool}: {member} did not become ready within the swap budget ({budget:g} s)",
            retry_after=retry,
        )

    @staticmethod
    def _note_swap(span: trace.Span, swap: Swap) -> None:
        """A hold that joined a swap it did not start links to that swap's span."""
        if swap.started_by is not span and swap.span.get_span_context().is_valid:
            span.add_link(swap.span.get_span_context(), {"modelpool.link": "joined_swap"})
            span.set_attribute("modelpool.coalesced", True)

    def _join(self, pool: str, member: str) -> Swap:
        if self.stopping or self._group is None:
            raise ProxyStopping(f"this router-proxy replica is stopping; {member} was not started")
        swap = self.driver.running(pool, member)
        if swap is None:
            swap = Swap(pool, member, started_at=self.clock())
            # A child of the current span (the hold that starts it); the driver task, started
            # below, copies this context, so its Lease calls are children of the swap.
            swap.span = tracer.start_span(
                "swap",
                attributes={
                    "k8s.namespace.name": self.namespace,
                    "modelpool.pool": pool,
                    "modelpool.member": member,
                },
            )
            swap.started_by = trace.get_current_span()
            self.driver.start(swap, self._group)
        swap.waiters += 1
        return swap

    # -- what a held request reads of its swap ------------------------------------------------

    def _direct_url(self, pool: str, swap: Swap) -> str | None:
        """The address our own probe found the target up at, while we hold the Lease for it, the
        endpoint is still listed (not terminating) and the pool is not draining it."""
        url = swap.direct_url
        if url is None or not swap.holding or self.schedule.fenced_off(pool, swap.member):
            return None  # while fenced, the driver drops what it found (swapdriver.py)
        listed = url in self.view.member_starting_urls(swap.member)
        return url if listed or url in self.view.member_urls(swap.member) else None
