"""Pooled demand: what this replica holds, what every replica reports, and the reports it writes.

docs/modelpool.md ("Scheduling the slot"). The pool's scheduler decides on the demand of every
replica (:mod:`controlplane.api.v1alpha1.demand` is the protocol), so this module has three jobs:

* :class:`LocalDemand`: this replica's own held requests per pool and member (how many, and when
  the oldest arrived, on our monotonic clock), and which pool a member was last routed in;
* :class:`PoolLeases`: an informer event handler over the namespace's pool Leases (the intent and
  every replica's demand report), judging each one's expiry on our clock as the pool controller
  does; :meth:`PoolLeases.pooled` merges our own demand with every live report of the others
  (a report's ``waited`` is placed on our clock at the moment we saw it), and
  :meth:`PoolLeases.live_intent` says which member a live intent asks for;
* :class:`DemandReporter`: writes our report Lease for every pool we route, held for as long as
  we route it: when the demand summary changes, at most once per ``interval`` and never per
  request; at once when our acknowledgement of the pool's closed admission changes (the fenced
  drain, :func:`admission_ack`); renewed at a third of its duration; emptied (no holder) on the
  way out. A replica admits to a pool only once its own report is written
  (:meth:`DemandReporter.live`), so a replica that has just started sends nothing the pool cannot
  see.

A malformed report from another replica is ignored and logged (never a crash, never a forced
turn); an expired one stops counting, so a dead replica loses only its own demand.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from controlplane.api.v1alpha1.activation import Activation, pool_for_lease, read_activation
from controlplane.api.v1alpha1.demand import (
    AdmissionAck,
    LiveReport,
    ReportedDemand,
    demand_lease,
    demand_lease_name,
    live_reports,
)
from controlplane.api.v1alpha1.modelpool import status_admission
from controlplane.clock import TimeSource
from controlplane.router.inflight import InFlightRequests
from controlplane.router.lease import ObjectApi
from controlplane.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound
from controlplane.runtime.informer import DeletedFinalStateUnknown
from controlplane.runtime.leaserecord import ExpiryObserver, lease_key
from controlplane.runtime.objects import ObjectView
from controlplane.runtime.resources import LEASES
from controlplane.scheduling.policy import MemberDemand

log = logging.getLogger(__name__)

#: A member whose last request ended less than this long ago still has demand (a client looping
#: back to back is between two requests, not gone).
DEFAULT_ACTIVITY_WINDOW_SECONDS = 2.0
#: A replica writes its report at most this often.
DEFAULT_REPORT_INTERVAL_SECONDS = 0.5
#: A report not renewed for this long stops counting (the replica renews at a third of it).
DEFAULT_REPORT_DURATION_SECONDS = 15


class LocalDemand:
    """This replica's held requests per (pool, member), and the pool each member was routed in."""

    def __init__(self, clock: TimeSource = time.monotonic) -> None:
        self.clock = clock
        self._held: dict[tuple[str, str], dict[int, float]] = {}
        self._ids = itertools.count()
        #: member -> pool, from the routes seen (a member is in one pool: docs/modelpool.md).
        self.pool_of: dict[str, str] = {}

    def routed(self, pool: str, member: str) -> None:
        self.pool_of[member] = pool

    def hold(self, pool: str, member: str) -> Callable[[], None]:
        """Count one held request that arrived now; call the result when it is answered."""
        self.routed(pool, member)
        key, ticket = (pool, member), next(self._ids)
        self._held.setdefault(key, {})[ticket] = self.clock()

        def release() -> None:
            arrivals = self._held.get(key)
            if arrivals is not None:
                arrivals.pop(ticket, None)
                if not arrivals:
                    del self._held[key]

        return release

    def held(self, pool: str) -> dict[str, tuple[int, float]]:
        """Per member of ``pool``: requests held here and the oldest one's arrival."""
        return {
            member: (len(arrivals), min(arrivals.values()))
            for (p, member), arrivals in self._held.items()
            if p == pool and arrivals
        }

    def pools(self) -> set[str]:
        return {pool for pool, _ in self._held} | set(self.pool_of.values())


class PoolLeases:
    """The namespace's pool Leases as this replica sees them, expiry judged on our clock (the
    router may not import the pool controller's ``LeaseObserver``; both read reports through
    :func:`~controlplane.api.v1alpha1.demand.live_reports`).

    Subscribed to the pool-Lease informer, so the moment a record is seen to change is the moment
    the watch delivered it."""

    def __init__(self, identity: str, clock: TimeSource = time.monotonic) -> None:
        self.identity = identity
        self.expiry = ExpiryObserver(clock)
        self._malformed: dict[str, str] = {}

    # -- informer event handler ------------------------------------------------------------------

    def on_add(self, obj: dict[str, Any], initial: bool) -> None:
        self.expiry.observe(obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.expiry.observe(new)

    def on_delete(self, obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
        final = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        self.expiry.forget(lease_key(final))

    # -- reading -----------------------------------------------------------------------------------

    def live_intent(self, pool: str, leases: Iterable[Mapping[str, Any]]) -> Activation | None:
        """What a live intent on ``pool``'s Lease asks (its target, the residents that leave for
        it), or None."""
        for lease in leases:
            if pool_for_lease(lease) == pool:
                activation = read_activation(lease)
                live = activation.requested and self.expiry.remaining(lease) >= 0
                return activation if live else None
        return None

    def reports(self, pool: str, leases: Iterable[Mapping[str, Any]]) -> list[LiveReport]:
        """The live, well-formed demand reports of ``pool`` by replicas other than us."""
        return live_reports(
            leases,
            pool,
            self.expiry,
            skip_holder=self.identity,
            on_malformed=self._note_malformed,
        )

    def _note_malformed(self, key: str, why: str) -> None:
        if self._malformed.get(key) != why:
            self._malformed[key] = why
            log.warning("demand report %s ignored: %s", key, why)

    def pooled(
        self,
        pool: str,
        leases: Iterable[Mapping[str, Any]],
        local: LocalDemand,
        inflight: InFlightRequests,
        priorities: Mapping[str, int],
        activity_window: float,
    ) -> dict[str, MemberDemand]:
        """Every replica's demand for ``pool``'s members, on our clock (members unknown to the
        pool are dropped: a report cannot invent a member)."""
        held: dict[str, int] = {}
        oldest: dict[str, float] = {}
        active: dict[str, bool] = {}
        #: Ours counted; another replica's only known as active: one each.
        in_flight: dict[str, int] = {member: inflight.count(member) for member in priorities}
        for member, (count, arrived) in local.held(pool).items():
            held[member] = held.get(member, 0) + count
            oldest[member] = min(oldest.get(member, arrived), arrived)
        for member in priorities:  # the pool's members (a member is in one pool)
            if inflight.active(member, activity_window):
                active[member] = True
        for report in self.reports(pool, leases):
            for member, entry in report.demand.items():
                if entry.held > 0:
                    held[member] = held.get(member, 0) + entry.held
                    arrived = report.seen_at - entry.waited
                    oldest[member] = min(oldest.get(member, arrived), arrived)
                if entry.active:
                    active[member] = True
                    in_flight[member] = in_flight.get(member, 0) + 1
        return {
            member: MemberDemand(
                held=held.get(member, 0),
                oldest=oldest.get(member),
                active=active.get(member, False),
                priority=priority,
                in_flight=in_flight.get(member, 0),
            )
            for member, priority in priorities.items()
        }


def own_report(
    pool: str,
    local: LocalDemand,
    inflight: InFlightRequests,
    activity_window: float,
    now: float,
) -> dict[str, ReportedDemand]:
    """What this replica reports for ``pool``: its held requests and the members active here."""
    report: dict[str, ReportedDemand] = {}
    for member, (count, arrived) in local.held(pool).items():
        report[member] = ReportedDemand(held=count, waited=max(0.0, now - arrived))
    for member, in_pool in local.pool_of.items():
        if in_pool == pool and inflight.active(member, activity_window):
            entry = report.get(member, ReportedDemand())
            report[member] = ReportedDemand(entry.held, entry.waited, active=True)
    return report


def admission_ack(pool: ObjectView | None, inflight: InFlightRequests) -> AdmissionAck:
    """What we acknowledge of ``pool``'s closed admission, read from our cache: the generation of
    its status (every admission decision we make from now on reads that status) and our requests
    in flight on each member it closes. A request is counted in flight before its admission is
    checked (:mod:`~controlplane.router.app`), so nothing admitted is missing here."""
    closed, generation = status_admission((pool or {}).get("status") or {})
    return AdmissionAck(generation, {m: n for m in closed if (n := inflight.count(m))})


def _summary(report: Mapping[str, ReportedDemand], now: float) -> tuple[Any, ...]:
    """What a change of the report is: counts, activity, and the oldest arrival to 0.1 s (the
    ``waited`` of an unchanged oldest request grows by itself and is no change)."""
    return tuple(
        (m, d.held, d.active, round(now - d.waited, 1) if d.held else None)
        for m, d in sorted(report.items())
    )


@dataclass(frozen=True, slots=True)
class _Written:
    """A report as we last wrote it: its demand summary, its acknowledgement, and when (our
    clock, taken before the write was sent)."""

    summary: tuple[Any, ...]
    ack: AdmissionAck | None
    at: float


class DemandReporter:
    """Writes this replica's report per pool: held while we route the pool, on a change of demand
    (at most once per ``interval``), at once on a change of our acknowledgement, renewed at a
    third of ``duration``, emptied on the way out."""

    needs_leader_election = False

    def __init__(
        self,
        client: ObjectApi,
        namespace: str,
        identity: str,
        local: LocalDemand,
        inflight: InFlightRequests,
        *,
        interval: float = DEFAULT_REPORT_INTERVAL_SECONDS,
        duration: int = DEFAULT_REPORT_DURATION_SECONDS,
        activity_window: float = DEFAULT_ACTIVITY_WINDOW_SECONDS,
        clock: TimeSource = time.monotonic,
        routed: Callable[[], Iterable[str]] = lambda: (),
        acknowledgement: Callable[[str], AdmissionAck | None] = lambda pool: None,
        wake: Callable[[], anyio.Event] | None = None,
        on_live: Callable[[], None] = lambda: None,
    ) -> None:
        if interval <= 0 or duration < 1:
            raise ValueError("the report interval must be positive and its duration at least 1 s")
        self.client, self.namespace, self.identity = client, namespace, identity
        self.local, self.inflight = local, inflight
        self.interval, self.duration, self.activity_window = interval, duration, activity_window
        self.clock = clock
        #: The pools our router routes (its pool backends), reported from our start.
        self.routed = routed
        #: Our acknowledgement of a pool's closed admission (:func:`admission_ack`).
        self.acknowledgement = acknowledgement
        #: The event the next change that may alter a report sets (cache events, in-flight
        #: ends): a notifier's ``snapshot``.
        self.wake = wake
        #: Called when a pool's report becomes live (held requests waiting for it look again).
        self.on_live = on_live
        self._written: dict[str, _Written] = {}
        #: Per pool: when its last write failed (our clock).
        self._failed_at: dict[str, float] = {}
        #: Per pool: the report Lease as the API server last returned it.
        self._objects: dict[str, Any] = {}
        self.writes = 0
        #: Each write's time limit, so a hung API call cannot outlive the report.
        self.call_timeout = max(1.0, duration / 6)

    def live(self, pool: str) -> bool:
        """Our report of ``pool`` has been written, held: the pool's fenced drain can see us.
        Admission to the pool waits for it, so a replica that has just started (a rollout, a
        scale-up) sends nothing the pool does not know of.

        *Why not also stop admitting when a renewal fails:* a replica that cannot reach the API
        server for longer than its report's duration would then stop serving even the resident
        during every control-plane upgrade of a one-node cluster; the pool cannot drain while it
        cannot write either. The cost is said in docs/modelpool.md ("The fenced drain"): a
        replica cut off from the API server alone, past its report's expiry, is no longer
        waited for."""
        written = self._written.get(pool)
        return written is not None and written.ack is not None

    async def start(self) -> None:
        """Report until cancelled; on the way out, empty every report we wrote (best effort)."""
        try:
            next_tick = self.clock()
            while True:
                change = self.wake() if self.wake is not None else None
                tick = self.clock() >= next_tick
                if tick:
                    next_tick = self.clock() + self.interval
                await self.report_once(demand=tick)
                wait = max(0.0, next_tick - self.clock())
                with anyio.move_on_after(wait):
                    await (change.wait() if change is not None else anyio.sleep(wait))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                for pool, written in list(self._written.items()):
                    if written.summary or written.ack is not None:
                        await self._write(pool, {}, None)

    async def report_once(self, demand: bool = True) -> None:
        """Write each report that changed. The demand is looked at only on the interval's tick
        (``demand``): a request passes for a moment between held and in flight, and a report
        written on that wake-up would tell every replica its member had no demand. Our
        acknowledgement is looked at on every wake-up and written at once: a drain waits on
        it."""
        now = self.clock()
        routed = set(self.routed()) | self.local.pools()
        for pool in sorted(routed | set(self._written)):
            ack = self.acknowledgement(pool) if pool in routed else None
            last = self._written.get(pool)
            if not demand and last is not None and last.ack == ack:
                continue
            if now - self._failed_at.get(pool, -self.interval) < self.interval:
                continue  # the last write failed: no retry per wake-up
            report = own_report(pool, self.local, self.inflight, self.activity_window, now)
            summary = _summary(report, now)
            if last is None and not report and ack is None:
                continue  # never reported, nothing to report
            held = bool(report) or ack is not None
            if (
                last is None
                or last.summary != summary
                or last.ack != ack
                or (held and now - last.at >= self.duration / 3)
            ):
                await self._write(pool, report, ack)

    async def _write(
        self, pool: str, report: Mapping[str, ReportedDemand], ack: AdmissionAck | None
    ) -> None:
        """One write of the report, over the object we wrote last (its resourceVersion); a 409
        or a report we never wrote is read first."""
        name = demand_lease_name(pool, self.identity)
        now = self.clock()
        current = self._objects.get(pool)
        was_live = self.live(pool)
        try:
            with anyio.fail_after(self.call_timeout):
                await self._write_attempts(pool, name, report, ack, now, current)
        except (KubeError, TimeoutError) as err:
            self._objects.pop(pool, None)
            self._failed_at[pool] = now
            log.warning("pool %s: writing the demand report failed: %r", pool, err)
        if not was_live and self.live(pool):
            self.on_live()

    async def _write_attempts(
        self,
        pool: str,
        name: str,
        report: Mapping[str, ReportedDemand],
        ack: AdmissionAck | None,
        now: float,
        current: Any,
    ) -> None:
        for _ in range(3):
            if current is None:
                try:
                    current = await self.client.get(LEASES, name, self.namespace)
                except NotFound:
                    current = None
            body = demand_lease(
                self.namespace, pool, self.identity, self.duration, report, current, ack
            )
            try:
                if current is None:
                    written = await self.client.create(LEASES, body)
                else:
                    written = await self.client.update(LEASES, body)
            except (AlreadyExists, Conflict):
                current = None
                continue
            self.writes += 1
            self._objects[pool] = written
            self._written[pool] = _Written(_summary(report, now), ack, now)
            return
