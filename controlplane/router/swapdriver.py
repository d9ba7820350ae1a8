"""The swap's driver: one task per target that waits for the turn, claims, renews, and ends.

*Why a module of its own:* a swap is a state machine over one :class:`Swap` (the turn, the claim,
the renewal, the direct probe, the linger and the finish), driven by one task per target on this
replica, with the pool's Lease as the only thing it writes. The held requests only read what it
leaves on the swap (``error``, ``finished``, ``direct_url``) and wake on its notifications; they
never drive it. Kept apart from the holding (:mod:`controlplane.router.activator`) and from
admission (:mod:`controlplane.router.admission`), it is the one file that the Lease's protocol
touches on this side (docs/router.md, "The activator"). Its driver

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

**Abandoned swaps linger for the retry they promised.** When its last held request times out, a
swap that holds the Lease keeps going until that ``Retry-After`` plus a grace has passed, so a
retrying client joins it and a member that loads more slowly than ``swapBudget`` can still become
resident. Only when nobody came back is it abandoned: the holder releases the Lease, and the pool
controller, whose owner falls back to the resident, drains the target through the idle gate. The
driver never writes a member: the pool's decisions are the pool's (docs/modelpool.md, "grant").

**Spans**: the driver runs under the swap's ``swap`` span, so the ``lease.claim``,
``lease.renew`` and ``lease.release`` calls are its children; the claim writes the span's
``traceparent`` onto the Lease, so the pool controller's reconciles for it are its children too.
Only the replica that held the Lease while the target became ready counts the swap in metrics,
and not when the API server named the target resident already at its claim (read once there: the
cache may not have seen another replica's finished swap yet).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from opentelemetry import trace

from controlplane.api.v1alpha1.inferenceservice import PHASE_FAILED
from controlplane.api.v1alpha1.modelpool import (
    ModelPool,
    serves_from_slot_server,
    status_residents,
)
from controlplane.clock import TimeSource
from controlplane.router import metrics
from controlplane.router.admission import Admission, ClusterView
from controlplane.router.directready import DirectReady, direct_candidates, slot_server_candidates
from controlplane.router.errors import (
    ActivationFailed,
    LeaseUnavailable,
    ProxyError,
    ProxyStopping,
)
from controlplane.router.lease import LeaseCoordinator, ReleaseFailed, Renewal
from controlplane.router.retryafter import SwapHistory
from controlplane.router.routing import model_name
from controlplane.router.schedule import PoolSchedule
from controlplane.router.wakeups import POLL_SECONDS, Notifier
from controlplane.runtime.errors import KubeError
from controlplane.runtime.tracing import traceparent_of

#: The log of the activator this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.router.activator")

#: A claim that found the Lease held by another, or failed, is retried no sooner than this.
CLAIM_RETRY_SECONDS = 0.25
#: Pause between attempts to release a claim the API did not confirm.
RELEASE_RETRY_SECONDS = 0.5
#: How long a stopping replica keeps trying to release (its pod has a grace period to honour;
#: an unreleased claim expires by itself).
RELEASE_WHILE_STOPPING_SECONDS = 2.0


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
    #: The API server named the target resident already when we claimed: another replica's
    #: swap brought it up (our cache had not seen it yet), so ours is not a swap to count.
    arrived: bool = False
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


class SwapDriver:
    """The swaps under way on this replica, one driver task each, and the pools' turns here.

    ``stopping`` says whether the replica is stopping (a release then has less patience), and
    ``stop`` is called when a driver is cancelled (the replica stops: no swap is started after)."""

    def __init__(
        self,
        view: ClusterView,
        coordinator: LeaseCoordinator,
        admission: Admission,
        schedule: PoolSchedule,
        history: SwapHistory,
        *,
        notifier: Notifier,
        progress: Notifier,
        clock: TimeSource,
        direct_ready: DirectReady | None,
        stopping: Callable[[], bool],
        stop: Callable[[], None],
    ) -> None:
        self.view = view
        self.coordinator = coordinator
        self.admission = admission
        self.schedule = schedule
        self.history = history
        self.notifier = notifier
        self.progress = progress
        self.clock = clock
        #: The driver's own ``/health`` probe of a granted target (None: wait for readiness).
        self.direct_ready = direct_ready
        self.stopping = stopping
        self.stop = stop
        self.swaps: dict[tuple[str, str], Swap] = {}
        #: Per pool, the one swap on this replica allowed to claim and drive.
        self.turns: dict[str, Swap] = {}

    def running(self, pool: str, member: str) -> Swap | None:
        """The swap to ``member`` under way on this replica, if one is (not finished)."""
        swap = self.swaps.get((pool, member))
        return None if swap is None or swap.finished else swap

    def start(self, swap: Swap, group: anyio.abc.TaskGroup) -> None:
        """Drive ``swap`` in ``group`` (its task copies the current context: the swap's span)."""
        self.swaps[(swap.pool, swap.member)] = swap
        group.start_soon(self._drive, swap)

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
        if swap.arrived or self.schedule.budget(swap.pool) is not None:
            return  # nothing to replace, or the residents that leave were chosen at the claim
        resident = self.origin(swap)
        if resident and resident != swap.member:
            swap.origin = resident

    def retry_after(self, swap: Swap) -> int:
        """When ``swap``'s target is likely up: the swap times measured here, and, while the
        target waits for its turn, the time until the scheduler gives it (the queue ahead)."""
        elapsed = self.clock() - swap.started_at
        budget = self.admission.budget(swap.pool)
        if not swap.busy:
            return self.history.retry_after(swap.pool, swap.member, elapsed, budget)
        # turn_in is at most maxWait (then the member is overdue and goes first)
        turn_in = self.schedule.turn_in(swap.pool, swap.member)
        return math.ceil(turn_in) + self.history.retry_after(swap.pool, swap.member, 0.0, budget)

    def _end(self, swap: Swap) -> str | None:
        """Why ``swap`` ends now, or None while it goes on."""
        if self.admission.ready_url(swap.pool, swap.member) is not None:
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
                    if self.schedule.fenced_off(swap.pool, swap.member):
                        # The pool drains what a probe finds (a slot server leaving its node, a
                        # pod changing): nothing found before the drain ends is handed on.
                        swap.direct_url = None
                    elif self.direct_ready is not None and swap.direct_url is None:
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
            self.stop()
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
        swap.linger_until = max(swap.linger_until, self.clock() + self.admission.budget(swap.pool))
        swap.span.add_event("healthy by direct probe", {"url.full": url})
        log.info("pool %s: member %s healthy by direct probe at %s", swap.pool, swap.member, url)
        self.notifier.notify()
        return POLL_SECONDS

    async def _resident_at_claim(self, swap: Swap) -> bool:
        """Whether the API server names ``swap``'s target resident now that we hold the Lease.

        Our cache can lag behind a swap another replica finished: it made the target resident,
        then released the Lease, and we claimed it for the same target before our cache saw the
        pool change. Judged by the cache, that swap would be counted a second time here (the kind
        storm's accounting caught it on a loaded machine). The Lease was released after the pool
        was written, so a read sent after our claim sees the pool at least as new as that release.
        A failed read says no: the cache's view stands, as it did before this read."""
        try:
            with anyio.fail_after(self.coordinator.call_timeout):
                pool = await self.coordinator.client.get(
                    ModelPool.resource(), swap.pool, self.coordinator.namespace
                )
        except (KubeError, TimeoutError) as err:
            log.debug("pool %s: reading the pool at the claim failed: %s", swap.pool, err)
            return False
        return swap.member in status_residents(pool.get("status") or {})

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
            swap.arrived = await self._resident_at_claim(swap)
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
            if swap.holding and not swap.arrived and swap.origin != member:
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
        patience = RELEASE_WHILE_STOPPING_SECONDS if self.stopping() else self.coordinator.duration
        deadline = self.clock() + patience
        while True:
            try:
                return await self.coordinator.release(swap.pool, swap.member)
            except ReleaseFailed:
                if self.clock() >= deadline:
                    log.warning("pool %s: gave up releasing; it expires by itself", swap.pool)
                    return False
                await anyio.sleep(RELEASE_RETRY_SECONDS)
