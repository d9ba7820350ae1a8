"""The activator: hold a cross-model request, coalesce, coordinate one swap, answer in budget.

DESIGN 4 ("Activator, inside each router-proxy replica"). A request for a pool member that is not
ready is *held* (never refused with 429) for at most the pool's ``swapBudget``. Every held request
for the same target joins one :class:`Swap` on this replica; its driver task

* waits while the incumbent has in-flight requests *on this replica* (``pool_busy`` if the budget
  runs out that way; the pool controller's ``/slots`` gate protects across replicas);
* claims the pool's Lease for the target (:class:`~controlplane.router.lease.LeaseCoordinator`),
  or, when another replica holds it, waits: for the same target it waits for the member that
  holder brings up, for a different one until the Lease is released or expires, then claims;
* renews at a third of the Lease's duration while the target comes up;
* releases the Lease as soon as the target is the pool's Ready resident with a ready endpoint.

A swap is *abandoned* when every request held for it has given up (budget elapsed), and *failed*
when the target's InferenceService is Failed. Either way the holder scales the target back down
(an optimistic write; a 409 is a ``MemberWriteConflict`` retried from a fresh read) and releases.
Only the replica that held the Lease while the target became ready counts the swap in metrics.

Nothing is dispatched on belief alone: readiness is read from the informer caches at the moment
a request is dispatched (:meth:`Activator.ready_url`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.inferenceservice import PHASE_FAILED, PHASE_READY
from controlplane.api.v1alpha1.modelpool import DEFAULT_SWAP_BUDGET
from controlplane.router import metrics
from controlplane.router.errors import (
    ActivationFailed,
    ActivationTimeout,
    BackendUnavailable,
    PoolBusy,
    ProxyError,
)
from controlplane.router.inflight import InFlight
from controlplane.router.lease import RENEW_INTERVAL_SECONDS, LeaseCoordinator, ObjectApi
from controlplane.router.routing import Route, parse_duration
from controlplane.runtime.errors import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

ISVC = InferenceService.resource()
DEFAULT_BUDGET_SECONDS = parse_duration(DEFAULT_SWAP_BUDGET, 300.0)
#: Backstop wake-up of waiting loops (progress is driven by cache events).
POLL_SECONDS = 1.0
#: A failed claim (held by another replica) is retried no sooner than this.
CLAIM_RETRY_SECONDS = 0.25
#: Attempts to scale an abandoned target down through write conflicts.
SCALE_DOWN_ATTEMPTS = 5

Object = Mapping[str, Any]


class ClusterView(Protocol):
    """What the activator reads: the informer caches of the proxy's namespace."""

    def pool(self, name: str) -> Object | None: ...

    def isvc(self, name: str) -> Object | None: ...

    def member_urls(self, member: str) -> list[str]: ...


class Notifier:
    """Wakes every waiter on any change (cache event, in-flight release, swap state)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    def snapshot(self) -> anyio.Event:
        """The event the next change sets; take it *before* reading the state it guards."""
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
    waiters: int = 0
    busy: bool = False  # the incumbent has in-flight requests here: not claimed yet
    lost: bool = False  # we held the Lease and lost it
    holding: bool = False
    error: ProxyError | None = None
    finished: bool = False
    outcome: str = field(default="pending")


class Activator:
    """Turns a route into a ready upstream URL, holding and swapping as needed."""

    needs_leader_election = False

    def __init__(
        self,
        view: ClusterView,
        coordinator: LeaseCoordinator,
        client: ObjectApi,
        namespace: str,
        *,
        inflight: InFlight | None = None,
        notifier: Notifier | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = view
        self.coordinator = coordinator
        self.client = client
        self.namespace = namespace
        self.notifier = notifier or Notifier()
        self.inflight = inflight or InFlight(self.notifier.notify)
        self.clock = clock
        self.swaps: dict[tuple[str, str], Swap] = {}
        self._group: anyio.abc.TaskGroup | None = None
        self._started = anyio.Event()

    async def start(self) -> None:
        """Run swap drivers until cancelled (a manager runnable)."""
        async with anyio.create_task_group() as group:
            self._group = group
            self._started.set()
            await anyio.sleep_forever()

    # -- reading the caches ----------------------------------------------------------------------

    def ready_url(self, pool_name: str, member: str) -> str | None:
        """The member's URL if it is the pool's Ready resident with a ready endpoint, else None."""
        pool = self.view.pool(pool_name)
        if pool is None or (pool.get("status") or {}).get("residentMember") != member:
            return None
        isvc = self.view.isvc(member)
        if isvc is None or (isvc.get("status") or {}).get("phase") != PHASE_READY:
            return None
        urls = self.view.member_urls(member)
        return urls[0] if urls else None

    def budget(self, pool_name: str) -> float:
        pool = self.view.pool(pool_name) or {}
        text = (pool.get("spec") or {}).get("swapBudget")
        return parse_duration(text, DEFAULT_BUDGET_SECONDS)

    # -- the one public call ---------------------------------------------------------------------

    async def upstream(self, route: Route) -> str:
        """A URL to dispatch ``route`` to now; raises a :class:`ProxyError` subclass."""
        if route.pool is None:
            urls = self.view.member_urls(route.member)
            if not urls:
                raise BackendUnavailable(f"{route.member} has no ready endpoint")
            return urls[0]
        url = self.ready_url(route.pool, route.member)
        if url is not None:
            return url  # fast path
        return await self.hold(route.pool, route.member)

    async def hold(self, pool: str, member: str) -> str:
        """Hold until ``member`` of ``pool`` is ready (within budget), joining its swap."""
        budget = self.budget(pool)
        started = self.clock()
        gauge = metrics.HELD_REQUESTS.labels(pool)
        gauge.inc()
        swap = self._join(pool, member)
        try:
            with anyio.move_on_after(budget):
                while True:
                    event = self.notifier.snapshot()
                    url = self.ready_url(pool, member)
                    if url is not None:
                        return url
                    if swap.error is not None:
                        raise swap.error
                    if swap.finished:  # ended without making it ready (e.g. readiness flickered)
                        swap.waiters -= 1
                        swap = self._join(pool, member)
                    await Notifier.wait(event, POLL_SECONDS)
            if swap.busy:
                raise PoolBusy(
                    f"pool {pool}: the resident member is busy; {member} was not activated "
                    f"within the swap budget ({budget:g} s)"
                )
            if swap.lost:
                raise ActivationFailed(
                    f"pool {pool}: {member} did not become ready and the pool's Lease was lost"
                )
            raise ActivationTimeout(
                f"pool {pool}: {member} did not become ready within the swap budget ({budget:g} s)"
            )
        finally:
            swap.waiters -= 1
            gauge.dec()
            metrics.HOLD_DURATION.labels(pool).observe(self.clock() - started)
            self.notifier.notify()

    def _join(self, pool: str, member: str) -> Swap:
        key = (pool, member)
        swap = self.swaps.get(key)
        if swap is None or swap.finished:
            swap = Swap(pool, member)
            self.swaps[key] = swap
            if self._group is None:
                raise RuntimeError("the activator is not running")
            self._group.start_soon(self._drive, swap)
        swap.waiters += 1
        return swap

    # -- driving one swap ------------------------------------------------------------------------

    async def _drive(self, swap: Swap) -> None:
        pool, member = swap.pool, swap.member
        claimed_at = 0.0
        renewed_at = 0.0
        next_claim = 0.0
        origin = ""
        try:
            while True:
                event = self.notifier.snapshot()
                if self.ready_url(pool, member) is not None:
                    swap.outcome = "ready"
                    break
                isvc = self.view.isvc(member)
                if isvc is not None and (isvc.get("status") or {}).get("phase") == PHASE_FAILED:
                    swap.outcome = "failed"
                    swap.error = ActivationFailed(f"pool {pool}: member {member} is Failed")
                    break
                if swap.waiters <= 0:
                    swap.outcome = "abandoned"
                    break
                now = self.clock()
                if not swap.holding:
                    resident = ((self.view.pool(pool) or {}).get("status") or {}).get(
                        "residentMember"
                    )
                    swap.busy = bool(
                        resident and resident != member and self.inflight.count(resident) > 0
                    )
                    if not swap.busy and now >= next_claim:
                        try:
                            claim = await self.coordinator.claim(pool, member)
                        except ProxyError as err:
                            swap.outcome = "lease_unavailable"
                            swap.error = err
                            break
                        next_claim = self.clock() + CLAIM_RETRY_SECONDS
                        if claim.held:
                            swap.holding = True
                            claimed_at = renewed_at = self.clock()
                            origin = str(resident or "")
                            log.info("pool %s: claimed the Lease for %s", pool, member)
                        else:
                            log.debug(
                                "pool %s: Lease held by %s for %s", pool, claim.holder, claim.target
                            )
                elif now - renewed_at >= RENEW_INTERVAL_SECONDS:
                    renewed_at = now
                    if not await self.coordinator.renew(pool, member):
                        log.warning("pool %s: lost the Lease while bringing up %s", pool, member)
                        swap.holding = False
                        swap.lost = True
                        continue
                wait = POLL_SECONDS
                if swap.holding:
                    wait = min(wait, renewed_at + RENEW_INTERVAL_SECONDS - self.clock())
                elif not swap.busy:
                    wait = min(wait, max(0.0, next_claim - self.clock()))
                await Notifier.wait(event, wait)
        finally:
            with anyio.CancelScope(shield=True):
                await self._finish(swap, origin, claimed_at)

    async def _finish(self, swap: Swap, origin: str, claimed_at: float) -> None:
        pool, member = swap.pool, swap.member
        if swap.holding:
            if swap.outcome == "ready":
                metrics.SWAPS_TOTAL.labels(pool, origin, member).inc()
                metrics.SWAP_DURATION.labels(pool).observe(self.clock() - claimed_at)
                log.info("pool %s: swap %s -> %s done", pool, origin or "-", member)
            else:
                log.warning("pool %s: swap to %s %s; scaling it down", pool, member, swap.outcome)
                await self.scale_down(member)
            await self.coordinator.release(pool)
            swap.holding = False
        swap.finished = True
        if self.swaps.get((pool, member)) is swap:
            del self.swaps[(pool, member)]
        self.notifier.notify()

    async def scale_down(self, member: str) -> None:
        """Set the member's ``spec.replicas`` to 0 with its resourceVersion; retry on 409."""
        for _ in range(SCALE_DOWN_ATTEMPTS):
            try:
                isvc = dict(await self.client.get(ISVC, member, self.namespace))
                spec = dict(isvc.get("spec") or {})
                if spec.get("replicas") == 0:
                    return
                spec["replicas"] = 0
                isvc["spec"] = spec
                await self.client.update(ISVC, isvc)
                log.info("scaled %s down after an abandoned or failed swap", member)
                return
            except NotFound:
                return
            except Conflict:
                log.warning("MemberWriteConflict: %s changed under us; re-reading", member)
                continue
            except KubeError as err:
                log.warning("could not scale %s down: %s", member, err)
                return
