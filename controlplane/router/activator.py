"""The activator: hold a cross-model request, coalesce, drive one swap per pool, answer in budget.

*Why one module of this size:* the hold, the turn, the claim, the renewal, the linger and the
finish are one state machine over one :class:`Swap`; split, each piece would need the others'
private state to be read.

docs/router.md ("The activator"). A request for a pool member that is not
ready is *held* (never refused with 429) for at most the pool's ``swapBudget``. Every held request
for the same target joins one :class:`Swap` on this replica, and its driver task

* waits for **the pool's turn**, decided by the scheduler (:mod:`controlplane.scheduling.policy`)
  on the demand of every replica (:mod:`controlplane.router.demand`: ours, and every live report
  of the others) and on how long the resident has held the slot (observed on our clock): the
  target claims only when the policy gives it the turn (``pool_busy`` if the budget runs out
  waiting for it);
* waits for **the pool's turn on this replica**: one swap driver per pool, here as across
  replicas. A swap for another target waits behind the running one exactly as it would behind
  another replica's claim, instead of retargeting the Lease under it;
* claims the pool's Lease for the target (:class:`~controlplane.router.lease.LeaseCoordinator`);
  when another replica holds it, waits for the member that holder brings up, or for the Lease to
  be released or to expire, then claims;
* renews at a third of the Lease's duration while the target comes up; a holder that has not
  renewed within the Lease's duration (measured from when its last successful renew was *sent*,
  so never later than any reader's expiry) counts the Lease as lost and stops acting on it;
* **forwards before the readiness probe** (:mod:`controlplane.router.directready`): once the
  pool has granted the target the slot, it asks the target's starting pod ``/health`` directly
  every ``--direct-health-interval`` and, at the first 200, hands that address to the held
  requests, while it still holds the Lease (so the target stays the pool's owner and is drained
  only through the idle gate);
* ends when the target is the pool's Ready resident with a ready endpoint, when the target is
  Failed (502 to its requests), when nobody waits for it any more (below), or when the replica
  stops (503 ``proxy_stopping``).

**A claim whose answer was lost** (the API wrote it, the reply failed) may be ours: the swap
marks it ``maybe_held``, and the next claim finds it ours and carries on; if the swap ends first,
it releases (release checks holder and target, so it clears only our claim). Nothing is left
holding an intent that nobody renews.

**Abandoned swaps linger for the retry they promised.** When its last held request times out
(503 ``pool_activation_timeout`` with a ``Retry-After`` from measured swap times,
:mod:`controlplane.router.retryafter`), a swap that holds the Lease keeps going until that
``Retry-After`` plus a grace has passed, so a retrying client joins it and a member that loads
more slowly than ``swapBudget`` can still become resident. Only when nobody came back is it
abandoned: the holder releases the Lease, and the pool controller, whose owner falls back to the
resident, drains the target through the idle gate. The activator never writes a member: the
pool's decisions are the pool's (docs/modelpool.md, "grant").

**Spans** (docs/router.md, "Tracing"): each held request is a ``hold`` span; the request that
starts a swap is the parent of its ``swap`` span (the driver), under which the ``lease.claim``,
``lease.renew`` and ``lease.release`` calls are; a request that joins a running swap links to that
``swap`` span instead (its own trace stays its own). The claim writes the ``swap`` span's
``traceparent`` onto the Lease, so the pool controller's reconciles for it are its children.

**Admission to the resident closes pool-wide** once the turn has passed: while a live intent on
the pool's Lease names another member (in a pool with a budget: and names the resident among those
that leave for it, :mod:`controlplane.scheduling.budget`), no replica forwards a new request to the
resident (the fast path included); those requests are held as demand for its next turn, the ones
in flight finish (the pool controller's ``/slots`` gate drains only then), and the swap runs.
Nothing in flight is ever aborted.

Only the replica that held the Lease while the target became ready counts the swap in metrics.
Nothing is dispatched on belief alone: readiness is read from the informer caches at the moment
a request is dispatched (:meth:`Activator.ready_url`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol

import anyio
from opentelemetry import trace

from controlplane.api.v1alpha1.inferenceservice import PHASE_FAILED, PHASE_READY
from controlplane.api.v1alpha1.modelpool import DEFAULT_SWAP_BUDGET, serves_from_slot_server
from controlplane.clock import TimeSource
from controlplane.router import metrics
from controlplane.router.demand import DEFAULT_ACTIVITY_WINDOW_SECONDS, LocalDemand, PoolLeases
from controlplane.router.directready import DirectReady, direct_candidates, slot_server_candidates
from controlplane.router.errors import (
    MIN_RETRY_AFTER_SECONDS,
    ActivationFailed,
    ActivationTimeout,
    BackendUnavailable,
    HoldFull,
    LeaseUnavailable,
    PoolBusy,
    ProxyError,
    ProxyStopping,
)
from controlplane.router.inflight import InFlightRequests
from controlplane.router.lease import LeaseCoordinator, ReleaseFailed, Renewal
from controlplane.router.retryafter import LINGER_GRACE_SECONDS, SwapHistory
from controlplane.router.routing import Route, model_name, parse_duration
from controlplane.router.schedule import PoolSchedule
from controlplane.runtime.objects import ObjectView
from controlplane.runtime.tracing import traceparent_of

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.router.activator")

DEFAULT_BUDGET_SECONDS = parse_duration(DEFAULT_SWAP_BUDGET, 300.0)
#: Backstop wake-up of waiting loops (progress is driven by cache events).
POLL_SECONDS = 1.0
#: A claim that found the Lease held by another, or failed, is retried no sooner than this.
CLAIM_RETRY_SECONDS = 0.25
#: Requests one replica holds at most (``--max-held-requests``): Knative's activator queues as
#: many per revision; each costs a few KiB (bench/README.md, "held").
DEFAULT_MAX_HELD_REQUESTS = 10_000
#: Pause between attempts to release a claim the API did not confirm.
RELEASE_RETRY_SECONDS = 0.5
#: How long a stopping replica keeps trying to release (its pod has a grace period to honour;
#: an unreleased claim expires by itself).
RELEASE_WHILE_STOPPING_SECONDS = 2.0


class ClusterView(Protocol):
    """What the activator reads: the informer caches of the proxy's namespace."""

    def pool(self, name: str) -> ObjectView | None: ...

    def isvc(self, name: str) -> ObjectView | None: ...

    def member_urls(self, member: str) -> list[str]: ...

    def member_starting_urls(self, member: str) -> list[str]:
        """Where the member's pods that are listed but not ready (nor terminating) answer."""
        ...

    def pool_leases(self, pool: str) -> list[ObjectView]:
        """The Leases labelled with ``pool``: its intent and every replica's demand report."""
        ...


class Notifier:
    """Wakes every waiter on any change it is told of, and every notifier it forwards to."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._taken = False
        self._forwards: list[Notifier] = []

    def forward_to(self, other: Notifier) -> None:
        """Every change this one is told of wakes ``other``'s waiters too."""
        self._forwards.append(other)

    def notify(self) -> None:
        for other in self._forwards:
            other.notify()
        if not self._taken:
            return  # nobody holds the current event: nobody to wake (every request's end notifies)
        self._event.set()
        self._event = anyio.Event()
        self._taken = False

    def snapshot(self) -> anyio.Event:
        """The event the next change sets; take it *before* reading the state it guards."""
        self._taken = True
        return self._event

    @staticmethod
    async def wait(event: anyio.Event, timeout: float) -> None:
        with anyio.move_on_after(max(0.0, timeout)):
            await event.wait()


@dataclass
class Swap:
    """One target being brought up on behalf of the requests held for it on this replica."""

    pool: str
    member: str
    started_at: float
    waiters: int = 0
    busy: bool = False  # the scheduler gives the turn to another member: not claimed yet
    holding: bool = False  # we hold the pool's Lease for this target
    maybe_held: bool = False  # a claim failed after it may have been written
    lease_error: LeaseUnavailable | None = None  # the last claim failed this way
    error: ProxyError | None = None  # the swap ended in an error for its waiters
    finished: bool = False
    outcome: str = "pending"
    origin: str = ""  # the resident when the Lease was claimed
    claimed_at: float = 0.0
    renew_sent_at: float = 0.0  # when the last renew attempt was sent
    renewed_ok_at: float = 0.0  # when the last successful claim or renew was sent
    linger_until: float = 0.0  # an unattended holder keeps going until then
    #: The target's address once its server answered ``/health`` 200 to our own probe, before
    #: the pool says it is resident; handed to held requests only while we hold the Lease.
    direct_url: str | None = None
    #: In a pool with a budget, the residents the scheduler asks to leave for the target; written
    #: into the intent with the claim.
    evict: tuple[str, ...] = ()
    #: The driver's span: child of the hold that started the swap, linked from those that joined.
    span: trace.Span = trace.INVALID_SPAN
    started_by: trace.Span | None = None  # the hold span current when the swap was started


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
        self.linger_grace = linger_grace
        self.clock = clock
        self.swaps: dict[tuple[str, str], Swap] = {}
        #: Per pool, the one swap on this replica allowed to claim and drive.
        self.turns: dict[str, Swap] = {}
        self.stopping = False
        #: Requests held on this replica now, and how many it may hold (``--max-held-requests``).
        self.held = 0
        self.max_held = max_held
        #: Whether spans are exported: without, a held request makes no ``hold`` span (a no-op
        #: span still cost 2 KB per held request: its context managers and context tokens).
        self.tracing = tracing
        #: The driver's own ``/health`` probe of a granted target (None: wait for readiness).
        self.direct_ready = direct_ready
        self._group: anyio.abc.TaskGroup | None = None

    async def start(self) -> None:
        """Run swap drivers until cancelled (a manager runnable); then stop starting swaps."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                await self._backstop()
            finally:
                self._stop()

    async def _backstop(self) -> None:
        """Wake every swap driver at least every :data:`POLL_SECONDS` (progress is driven by
        cache events; this is the backstop). Each tick also notes the resident of every pool we
        route to, so a residency's start is seen within a tick even when no request reads it.

        Held requests are not woken by it: every held request has a driver, which judges the
        same readiness first on each wake (:meth:`_end`) and, once it holds, ends its swap and
        wakes them all; what else ends a hold (its budget, a swap's error or end, the stop)
        wakes it by itself. A tick that woke 5,000 held requests stalled the loop for 0.2 s
        every second (bench/README.md, "Slow clients and held capacity (issue 20)")."""
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

    # -- reading the caches ----------------------------------------------------------------------

    def ready_url(self, pool_name: str, member: str) -> str | None:
        """The member's URL if it is one of the pool's Ready residents with a ready endpoint and
        admission to it is open
        (:meth:`~controlplane.router.schedule.PoolSchedule.admission_closed`), else None."""
        if member not in self.schedule.residents(pool_name):
            return None
        self.schedule.residency(pool_name)
        if self.schedule.admission_closed(pool_name, member):
            return None
        if not self._serving(pool_name, member):
            return None
        urls = self.view.member_urls(member)
        return urls[0] if urls else None

    def _serving(self, pool_name: str, member: str) -> bool:
        """The member's server is up: its InferenceService is Ready, or, of a pool with a slot
        server, the pool's own entry says its model is loaded there (one watch event sooner than
        the InferenceService, which copies it)."""
        pool = self.view.pool(pool_name) or {}
        if serves_from_slot_server(pool):
            entries = (pool.get("status") or {}).get("members") or ()
            phase = next((e.get("phase") for e in entries if e.get("name") == member), None)
            return bool(phase == PHASE_READY)
        isvc = self.view.isvc(member)
        return isvc is not None and (isvc.get("status") or {}).get("phase") == PHASE_READY

    def budget(self, pool_name: str) -> float:
        pool = self.view.pool(pool_name) or {}
        text = (pool.get("spec") or {}).get("swapBudget")
        return parse_duration(text, DEFAULT_BUDGET_SECONDS)

    def origin(self, swap: Swap) -> str:
        """Where the slot comes from for ``swap``, as the swap metrics' ``from`` says: the
        resident, or, in a pool with a budget, the residents that leave for it (none: it fits)."""
        if self.schedule.budget(swap.pool) is not None:
            return ",".join(swap.evict)
        status = (self.view.pool(swap.pool) or {}).get("status") or {}
        return str(status.get("residentMember") or "")

    def _follow_origin(self, swap: Swap) -> None:
        """While the Lease is ours, the swap's ``from`` follows the pool's resident until the
        target is: a swap whose driver died (its Lease expired) may still make its own target
        resident before the pool drains for ours, and that member, not the one seen at the claim,
        is what ours replaces (the kind storm's accounting caught the claim-time one)."""
        if self.schedule.budget(swap.pool) is not None:
            return  # the residents that leave for it were chosen at the claim
        resident = self.origin(swap)
        if resident and resident != swap.member:
            swap.origin = resident

    def retry_after(self, swap: Swap) -> int:
        """When ``swap``'s target is likely up: the swap times measured here, and, while the
        target waits for its turn, the time until the scheduler gives it (the queue ahead)."""
        elapsed = self.clock() - swap.started_at
        budget = self.budget(swap.pool)
        if not swap.busy:
            return self.history.retry_after(swap.pool, swap.member, elapsed, budget)
        # turn_in is at most maxWait (then the member is overdue and goes first)
        turn_in = self.schedule.turn_in(swap.pool, swap.member)
        return math.ceil(turn_in) + self.history.retry_after(swap.pool, swap.member, 0.0, budget)

    def expected_in(self, pool: str, member: str) -> int | None:
        """Seconds until ``member`` is likely up, as a ``Retry-After`` would say (the queue ahead
        and the swap times measured), for a held stream's keep-alive; None when no swap to it is
        under way on this replica."""
        swap = self.swaps.get((pool, member))
        return self.retry_after(swap) if swap is not None else None

    # -- the one public call ---------------------------------------------------------------------

    async def upstream(self, route: Route) -> str:
        """A URL to dispatch ``route`` to now; raises a :class:`ProxyError` subclass."""
        if route.pool is None:
            urls = self.view.member_urls(route.member)
            if not urls:
                raise BackendUnavailable(f"{route.member} has no ready endpoint")
            return urls[0]
        self.local.routed(route.pool, route.member)
        url = self.ready_url(route.pool, route.member)
        if url is not None:
            return url  # fast path
        return await self.hold(route.pool, route.member)

    async def hold(self, pool: str, member: str) -> str:
        """Hold until ``member`` of ``pool`` is ready (within budget), joining its swap: a span
        ``hold`` whose outcome says how it ended. Beyond :attr:`max_held` requests held on this
        replica, a 503 at once: never an unbounded queue."""
        if self.held >= self.max_held:
            raise HoldFull(
                f"this router-proxy replica already holds {self.held} requests, its limit; "
                f"retry for {member}",
                retry_after=self.expected_in(pool, member) or MIN_RETRY_AFTER_SECONDS,
            )
        self.held += 1
        try:
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
        budget = self.budget(pool)
        started = self.clock()
        gauge = metrics.HELD_REQUESTS.labels(pool)
        gauge.inc()
        answered = self.local.hold(pool, member)
        try:
            with anyio.move_on_after(budget):
                while True:
                    event = self.notifier.snapshot()
                    url = self.ready_url(pool, member) or self._direct_url(swap)
                    if url is not None:
                        return url
                    if swap.error is not None:
                        raise swap.error
                    if self.stopping:
                        raise ProxyStopping(
                            f"this router-proxy replica is stopping; retry for {member}",
                            retry_after=self.retry_after(swap),
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
        retry = self.retry_after(swap)
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
        key = (pool, member)
        swap = self.swaps.get(key)
        if swap is None or swap.finished:
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
            self.swaps[key] = swap
            self._group.start_soon(self._drive, swap)
        swap.waiters += 1
        return swap

    # -- driving one swap ------------------------------------------------------------------------

    def _direct_url(self, swap: Swap) -> str | None:
        """The address our own probe found the target up at, while we hold the Lease for it and
        the endpoint is still listed (not terminating)."""
        url = swap.direct_url
        if url is None or not swap.holding:
            return None
        listed = url in self.view.member_starting_urls(swap.member)
        return url if listed or url in self.view.member_urls(swap.member) else None

    def _end(self, swap: Swap) -> str | None:
        """Why ``swap`` ends now, or None while it goes on."""
        if self.ready_url(swap.pool, swap.member) is not None:
            return "ready"
        isvc = self.view.isvc(swap.member)
        if isvc is not None and (isvc.get("status") or {}).get("phase") == PHASE_FAILED:
            swap.error = ActivationFailed(f"pool {swap.pool}: member {swap.member} is Failed")
            return "failed"
        unattended = swap.waiters <= 0
        if unattended and (not swap.holding or self.clock() >= swap.linger_until):
            return "abandoned"
        return None

    async def _drive(self, swap: Swap) -> None:
        with trace.use_span(swap.span, end_on_exit=False):
            await self._drive_swap(swap)

    async def _drive_swap(self, swap: Swap) -> None:
        next_claim = 0.0
        try:
            while (outcome := self._end(swap)) is None:
                event = self.progress.snapshot()
                wait = POLL_SECONDS  # woken earlier by any change; this is the backstop
                if swap.holding:
                    if not await self._keep(swap):
                        continue  # lost: judged again at once, claim again or wait for the holder
                    self._follow_origin(swap)
                    wait = self._holder_sleep(swap)
                    if self.direct_ready is not None and swap.direct_url is None:
                        wait = min(wait, await self._probe_direct(swap, self.direct_ready))
                else:
                    turn = self.schedule.turn(swap.pool)
                    swap.busy = turn.member != swap.member
                    swap.evict = turn.evict
                    if swap.busy:
                        self._give_up_turn(swap)
                        if turn.recheck_at is not None:
                            wait = min(wait, max(0.0, turn.recheck_at - self.clock()))
                    elif self.turns.setdefault(swap.pool, swap) is swap:
                        if self.clock() >= next_claim:
                            await self._claim(swap, self.origin(swap))
                            next_claim = self.clock() + CLAIM_RETRY_SECONDS
                        if not swap.holding:
                            wait = max(0.0, next_claim - self.clock())
                await Notifier.wait(event, wait)
            swap.outcome = outcome
        except anyio.get_cancelled_exc_class():
            swap.outcome = "stopped"
            swap.error = ProxyStopping(
                f"this router-proxy replica stopped while bringing up {swap.member}",
                retry_after=self.retry_after(swap),
            )
            self._stop()
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self._finish(swap)

    async def _probe_direct(self, swap: Swap, direct: DirectReady) -> float:
        """Ask the granted target's starting pods ``/health`` (of a pool with a slot server: the
        server's ``/models``); at the first 200 (the model loaded), hand its address to the held
        requests. How long until the next probe (the backstop when nothing to ask)."""
        pool = self.view.pool(swap.pool)
        isvc = self.view.isvc(swap.member)
        if serves_from_slot_server(pool):
            # No pod starts: the model loads in the pool's server, which says when in /models.
            ready = self.view.member_urls(swap.member)
            urls = slot_server_candidates(pool, swap.member, ready)
            if not urls:
                return POLL_SECONDS  # the pool's grant wakes us
            url = await direct.first_loaded(urls, model_name(isvc, swap.member))
        else:
            starting = self.view.member_starting_urls(swap.member)
            urls = direct_candidates(pool, isvc, swap.member, starting)
            if not urls:
                return POLL_SECONDS  # a change of the pool or its slices wakes us
            url = await direct.first_healthy(urls)
        if url is None:
            return direct.interval
        swap.direct_url = url
        # The requests it answers leave the swap unattended; it must still run (and hold the
        # intent) until the pool names the target resident, within the budget.
        swap.linger_until = max(swap.linger_until, self.clock() + self.budget(swap.pool))
        swap.span.add_event("healthy by direct probe", {"url.full": url})
        log.info("pool %s: member %s healthy by direct probe at %s", swap.pool, swap.member, url)
        self.notifier.notify()
        return POLL_SECONDS

    def _give_up_turn(self, swap: Swap) -> None:
        """A swap the scheduler passed over leaves this replica's turn to the one it picks,
        unless a claim of its own may still stand (then it stays until that is settled)."""
        if self.turns.get(swap.pool) is swap and not swap.maybe_held:
            del self.turns[swap.pool]

    def _holder_sleep(self, swap: Swap) -> float:
        """How long a holder may sleep without missing its next renewal or its linger's end."""
        now = self.clock()
        wait = min(POLL_SECONDS, swap.renew_sent_at + self.coordinator.renew_interval - now)
        if swap.waiters <= 0:
            wait = min(wait, swap.linger_until - now)
        return max(0.0, wait)

    async def _claim(self, swap: Swap, origin: str) -> None:
        sent = self.clock()
        try:
            claim = await self.coordinator.claim(
                swap.pool, swap.member, traceparent_of(swap.span), swap.evict
            )
        except LeaseUnavailable as err:
            log.warning("pool %s: claiming for %s failed: %s", swap.pool, swap.member, err.message)
            swap.lease_error = err
            swap.maybe_held = True  # the write may have landed with its answer lost
            return
        swap.lease_error = None
        swap.maybe_held = False
        if claim.held:
            swap.holding = True
            swap.origin = origin
            swap.claimed_at = swap.renew_sent_at = swap.renewed_ok_at = sent
            log.info("pool %s: claimed the Lease for %s", swap.pool, swap.member)
        else:
            log.debug("pool %s: Lease held by %s for %s", swap.pool, claim.holder, claim.target)

    async def _keep(self, swap: Swap) -> bool:
        """Renew when due; False (and no longer holding) when the Lease is not ours any more or
        was not renewed in time."""
        now = self.clock()
        if now - swap.renew_sent_at >= self.coordinator.renew_interval:
            swap.renew_sent_at = now
            renewal = await self.coordinator.renew(swap.pool, swap.member)
            if renewal is Renewal.RENEWED:
                swap.renewed_ok_at = now
            elif renewal is Renewal.LOST:
                self._lose(swap, "it is no longer ours")
                return False
        if self.clock() - swap.renewed_ok_at >= self.coordinator.duration:
            self._lose(swap, f"it was not renewed within {self.coordinator.duration} s")
            swap.maybe_held = True  # it may still read as ours: release it if we end
            return False
        return True

    def _lose(self, swap: Swap, why: str) -> None:
        log.warning("pool %s: lost the Lease while bringing up %s: %s", swap.pool, swap.member, why)
        swap.holding = False
        swap.direct_url = None  # found under a Lease we no longer hold: asked again if regained

    async def _finish(self, swap: Swap) -> None:
        pool, member = swap.pool, swap.member
        self.notifier.notify()  # waiters answer now; the release below may take a while
        if swap.outcome == "ready":
            self.history.record(pool, member, self.clock() - swap.started_at)
            if swap.holding and swap.origin != member:
                metrics.SWAPS_TOTAL.labels(pool, swap.origin, member).inc()
                metrics.SWAP_DURATION.labels(pool).observe(self.clock() - swap.claimed_at)
                log.info("pool %s: swap %s -> %s done", pool, swap.origin or "-", member)
        elif swap.holding and swap.outcome in ("failed", "abandoned"):
            log.warning("pool %s: swap to %s %s; releasing the intent", pool, member, swap.outcome)
        if swap.holding or swap.maybe_held:
            await self._release(swap)
        swap.span.set_attribute("modelpool.outcome", swap.outcome)
        swap.span.set_attribute("modelpool.swap.from", swap.origin)
        if swap.outcome not in ("ready", "pending"):
            swap.span.set_status(trace.StatusCode.ERROR, swap.outcome)
        swap.span.end()
        swap.holding = False
        swap.finished = True
        if self.swaps.get((pool, member)) is swap:
            del self.swaps[(pool, member)]
        if self.turns.get(pool) is swap:
            del self.turns[pool]
        self.notifier.notify()

    async def _release(self, swap: Swap) -> bool:
        """Release our claim for the swap's target, retrying while it could still count."""
        patience = RELEASE_WHILE_STOPPING_SECONDS if self.stopping else self.coordinator.duration
        deadline = self.clock() + patience
        while True:
            try:
                return await self.coordinator.release(swap.pool, swap.member)
            except ReleaseFailed:
                if self.clock() >= deadline:
                    log.warning("pool %s: gave up releasing; it expires by itself", swap.pool)
                    return False
                await anyio.sleep(RELEASE_RETRY_SECONDS)
