"""The pool's Lease as an activation intent: claim, renew, release (docs/modelpool.md).

A claim is *for a target*: a replica holds the Lease ``modelpool-pool-<pool>`` for one member,
and only a claim by the same holder for the same target is "ours". So:

* :meth:`LeaseCoordinator.claim` takes the Lease when it does not exist, has no holder, or has
  expired as observed on our clock (:class:`~controlplane.runtime.leaserecord.ExpiryObserver`,
  never the holder's ``renewTime`` against our clock). A live Lease held by anyone else, *this
  replica included for another target*, is not free: treating "the holder is me" as free let a
  second request retarget a running swap. A Lease that is ours for this target already (a claim
  whose answer was lost) is simply renewed.
* :meth:`~LeaseCoordinator.renew` and :meth:`~LeaseCoordinator.release` act only when the Lease
  is still held by us **for that target**: one swap's release can never clear another's claim.
* Every write carries the resourceVersion that was read; a 409 means someone else wrote first, so
  the Lease is re-read and judged again. Every API call is bounded by :attr:`call_timeout`, below
  the renew interval, so one hung call cannot eat the Lease's lifetime.
* A Lease of our name that is not a pool's (no :data:`POOL_LABEL`) is never written over.
* A claim carries the swap's W3C ``traceparent`` onto the Lease
  (:data:`~controlplane.api.v1alpha1.activation.TRACEPARENT_ANNOTATION`), so the pool controller's
  spans for it join the request's trace. Each call is a span (``lease.claim``, ``lease.renew``,
  ``lease.release``) whose ``modelpool.outcome`` says what it found.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import anyio
from opentelemetry import trace

from controlplane.api.v1alpha1.activation import (
    POOL_LABEL,
    claimed,
    new_pool_lease,
    pool_for_lease,
    pool_lease_name,
    read_activation,
    released,
    renewed,
)
from controlplane.clock import TimeSource
from controlplane.router.errors import LeaseUnavailable
from controlplane.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound
from controlplane.runtime.leaserecord import ExpiryObserver
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import LEASES, Resource

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.router.lease")

#: How long a claim lasts without renewal; the holder renews every third of it.
DEFAULT_LEASE_DURATION_SECONDS = 45
#: Writes retried after a 409 before the attempt gives up (the caller tries again later).
CONFLICT_RETRIES = 3

T = TypeVar("T")


class ObjectApi(Protocol):
    """The verbs the coordinator needs (the framework's ``KubeClient`` has them)."""

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object: ...

    async def create(
        self, resource: Resource, obj: Object, namespace: str | None = None
    ) -> Object: ...

    async def update(self, resource: Resource, obj: Object) -> Object: ...


@dataclass(frozen=True)
class Claim:
    """The outcome of one claim attempt: ours, or whose it is and for which member."""

    held: bool
    holder: str = ""
    target: str | None = None


class Renewal(enum.Enum):
    """What a renew attempt found."""

    RENEWED = "renewed"
    #: The Lease is no longer ours for this target (released, taken over, retargeted, deleted).
    LOST = "lost"
    #: The API did not answer in time or failed: still ours as far as we know.
    FAILED = "failed"


class LeaseCoordinator:
    """Claims, renews and releases pools' Leases as ``identity`` in ``namespace``."""

    def __init__(
        self,
        client: ObjectApi,
        namespace: str,
        identity: str,
        *,
        duration: int = DEFAULT_LEASE_DURATION_SECONDS,
        clock: TimeSource = time.monotonic,
    ) -> None:
        if duration < 1:
            raise ValueError(f"a pool Lease lasts at least 1 s, got {duration}")
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.duration = duration
        #: The holder renews this often while its swap runs.
        self.renew_interval = duration / 3
        #: Each API call's time limit: half the renew interval, so a hung call leaves time for
        #: another attempt before the Lease could expire.
        self.call_timeout = self.renew_interval / 2
        self.expiry = ExpiryObserver(clock)

    async def _call(self, call: Awaitable[T]) -> T:
        with anyio.fail_after(self.call_timeout):
            return await call

    async def _read(self, pool: str) -> Object | None:
        try:
            lease = await self._call(self.client.get(LEASES, pool_lease_name(pool), self.namespace))
        except NotFound:
            return None
        if pool_for_lease(lease) != pool:
            raise LeaseUnavailable(
                f"Lease {self.namespace}/{pool_lease_name(pool)} exists but is not pool {pool}'s "
                f"(it lacks the label {POOL_LABEL}={pool}); it is left alone"
            )
        self.expiry.observe(lease)
        return lease

    def _span(self, name: str, pool: str, target: str) -> trace.Span:
        return tracer.start_span(
            name,
            attributes={
                "k8s.namespace.name": self.namespace,
                "k8s.lease.name": pool_lease_name(pool),
                "modelpool.pool": pool,
                "modelpool.member": target,
                "modelpool.holder": self.identity,
            },
        )

    async def claim(
        self, pool: str, target: str, traceparent: str | None = None, evict: Sequence[str] = ()
    ) -> Claim:
        """Hold the Lease for ``target`` (recording ``traceparent``, the swap's trace context, and
        ``evict``, the residents that leave for it in a pool with a budget), or say who holds it.
        Raises :class:`LeaseUnavailable` when the API cannot be read or written (the write may
        have landed: see the activator)."""
        span = self._span("lease.claim", pool, target)
        with trace.use_span(span, end_on_exit=True):
            try:
                found = await self._claim(pool, target, traceparent, evict)
            except LeaseUnavailable as err:
                span.set_attribute("modelpool.outcome", "lease_unavailable")
                span.set_status(trace.StatusCode.ERROR, err.message)
                raise
            span.set_attribute("modelpool.outcome", "held" if found.held else "held_by_other")
            if not found.held and found.holder:
                span.set_attribute("modelpool.lease.holder", found.holder)
            return found

    async def _claim(
        self, pool: str, target: str, traceparent: str | None, evict: Sequence[str]
    ) -> Claim:
        try:
            for _ in range(CONFLICT_RETRIES):
                lease = await self._read(pool)
                try:
                    if lease is None:
                        body = new_pool_lease(
                            self.namespace,
                            pool,
                            self.identity,
                            target,
                            self.duration,
                            traceparent,
                            evict,
                        )
                        self.expiry.observe(await self._call(self.client.create(LEASES, body)))
                        return Claim(True, self.identity, target)
                    activation = read_activation(lease)
                    if activation.is_claim_of(self.identity, target):
                        updated = await self._call(self.client.update(LEASES, renewed(lease)))
                        self.expiry.observe(updated)
                        return Claim(True, self.identity, target)
                    if activation.holder and self.expiry.remaining(lease) >= 0:
                        return Claim(False, activation.holder, activation.target)
                    taken = claimed(lease, self.identity, target, self.duration, traceparent, evict)
                    self.expiry.observe(await self._call(self.client.update(LEASES, taken)))
                    return Claim(True, self.identity, target)
                except (AlreadyExists, Conflict):
                    continue  # someone else wrote first: re-read and judge again
        except (KubeError, TimeoutError) as err:
            raise LeaseUnavailable(f"the Lease of pool {pool} is unavailable: {err!r}") from err
        return Claim(False)

    async def renew(self, pool: str, target: str) -> Renewal:
        """Move ``renewTime`` if the Lease is ours for ``target``. Never raises."""
        span = self._span("lease.renew", pool, target)
        with trace.use_span(span, end_on_exit=True):
            outcome = await self._renew(pool, target)
            span.set_attribute("modelpool.outcome", outcome.value)
            return outcome

    async def _renew(self, pool: str, target: str) -> Renewal:
        for _ in range(CONFLICT_RETRIES):
            try:
                lease = await self._read(pool)
                if lease is None or not read_activation(lease).is_claim_of(self.identity, target):
                    return Renewal.LOST
                self.expiry.observe(await self._call(self.client.update(LEASES, renewed(lease))))
                return Renewal.RENEWED
            except Conflict:
                continue
            except LeaseUnavailable:
                return Renewal.LOST  # the name now belongs to a Lease that is not a pool's
            except (KubeError, TimeoutError) as err:
                log.warning("renewing the Lease of pool %s failed: %r", pool, err)
                return Renewal.FAILED
        return Renewal.FAILED

    async def release(self, pool: str, target: str) -> bool:
        """Clear holder and target if the Lease is ours for ``target``; True when this call
        cleared it (it was ours), False when it was not ours (idempotent). Raises
        :class:`ReleaseFailed` when the API could not be read or written."""
        span = self._span("lease.release", pool, target)
        with trace.use_span(span, end_on_exit=True):
            cleared = await self._release(pool, target)
            span.set_attribute("modelpool.outcome", "released" if cleared else "not_ours")
            return cleared

    async def _release(self, pool: str, target: str) -> bool:
        for _ in range(CONFLICT_RETRIES):
            try:
                lease = await self._read(pool)
                if lease is None or not read_activation(lease).is_claim_of(self.identity, target):
                    return False
                self.expiry.observe(await self._call(self.client.update(LEASES, released(lease))))
                log.info("%s: released pool %s's Lease (%s)", self.identity, pool, target)
                return True
            except Conflict:
                continue
            except LeaseUnavailable:
                return False
            except (KubeError, TimeoutError) as err:
                log.warning("releasing the Lease of pool %s failed: %r", pool, err)
                raise ReleaseFailed(repr(err)) from err
        raise ReleaseFailed("conflicts on every attempt")


class ReleaseFailed(Exception):
    """A release could not be written (the caller retries while the claim may still count)."""
