"""Leader election through a ``coordination.k8s.io/v1`` Lease, with client-go's rules.

* A candidate takes the Lease when it does not exist, when it has no holder (released), or when
  the holder has not renewed for ``lease_duration`` **as observed on the candidate's own clock**:
  the time the candidate last saw the record change, never the timestamps written in it, so
  clock skew between machines cannot make a live holder look expired.
* Every write carries the ``resourceVersion`` it read: two candidates racing for an expired
  Lease cannot both win; the loser gets ``409 Conflict``.
* The leader renews every ``retry_period``; if no renewal succeeds within ``renew_deadline`` of
  the last one, it stops leading. Since ``renew_deadline < lease_duration``, it has stopped before
  anyone else can consider the Lease expired.
* On cancellation the leader releases the Lease (empty holder), so a graceful restart hands over
  immediately instead of after ``lease_duration``.

**Fencing** (client-go does none; docs/faults.md, "Fencing"). A leader that is paused (SIGSTOP, a
frozen VM, a long GC) for longer than the Lease wakes up believing it leads, with caches as old as
the pause, while a successor has already acted. Leading is therefore also judged on our own
monotonic clock, which keeps running while the process is stopped: :meth:`LeaderElector.holds_lease`
is true only until ``renew_deadline`` after the start of the last renewal that succeeded, and
:meth:`LeaderElector.write_refusal` is the guard the manager puts in front of every write its
controllers make (:meth:`~controlplane.runtime.client.KubeClient.fenced`). A successor takes over
no earlier than ``lease_duration`` after it saw that renewal, so a write let through has at least
``lease_duration - renew_deadline`` (5 s by default) to reach the API server before anyone else
leads. The renew loop stops leading on the same judgement, so a leader woken past its deadline
stops at once, and a renewal that finds another holder ends the leadership at once instead of
retrying until the renew deadline.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from controlplane.clock import TimeSource
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound, NotLeading
from controlplane.runtime.leaserecord import ExpiryObserver, LeaseRecord
from controlplane.runtime.resources import LEASES
from controlplane.runtime.timeutil import micro_time

log = logging.getLogger(__name__)

DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
#: Retries while campaigning are spread by up to this factor (client-go's JitterFactor 1.2).
CAMPAIGN_JITTER = 1.2
#: How long a release may take during shutdown.
RELEASE_TIMEOUT = 5.0


class LeadershipLost(Exception):
    """The leader could not renew its Lease in time, or found it taken; whatever it led has been
    stopped."""


class LeaseTaken(Exception):
    """A renewal found another holder (raised and handled inside the elector)."""


@dataclass
class LeaderElectionConfig:
    """Which Lease, who we are, and client-go's timing defaults (15 s / 10 s / 2 s)."""

    lease_name: str
    namespace: str
    identity: str
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > retry_period > 0, got "
                f"{self.lease_duration} / {self.renew_deadline} / {self.retry_period}"
            )


@dataclass
class LeaderElector:
    """Campaigns for a Lease and runs a callable only while holding it."""

    client: KubeClient
    config: LeaderElectionConfig
    clock: TimeSource = time.monotonic
    rand: Callable[[], float] = random.random
    on_change: Callable[[bool], None] | None = None
    _expiry: ExpiryObserver = field(init=False)
    _leading: bool = field(default=False, init=False)
    #: On ``clock``: until when the last successful renewal lets us act as the leader.
    _valid_until: float = field(default=float("-inf"), init=False)
    _lost_because: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self._expiry = ExpiryObserver(self.clock)

    @property
    def is_leader(self) -> bool:
        return self._leading

    def holds_lease(self) -> bool:
        """Leading, and the last renewal is recent enough on our clock that no successor can
        have taken the Lease yet (see "Fencing" above)."""
        return self._leading and self.clock() < self._valid_until

    def write_refusal(self, method: str, path: str) -> None:
        """The manager's write guard: raises :class:`NotLeading` unless :meth:`holds_lease`."""
        if self.holds_lease():
            return
        late = self.clock() - self._valid_until
        why = (
            f"not leading {self.config.namespace}/{self.config.lease_name}"
            if not self._leading
            else f"the last renewal of {self.config.namespace}/{self.config.lease_name} is "
            f"{late:.1f} s past its renew deadline"
        )
        log.warning("%s: %s %s refused: %s", self.config.identity, method, path, why)
        raise NotLeading(f"{method} {path} not sent: {why}")

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Campaign, then run ``lead`` while leading.

        Returns when ``lead`` returns (after releasing). Raises :class:`LeadershipLost` when
        renewal fails, after cancelling ``lead``. On cancellation, releases the Lease.
        """
        await self._campaign()
        lost = False
        try:
            async with anyio.create_task_group() as group:

                async def lead_then_stop() -> None:
                    await lead()
                    group.cancel_scope.cancel()

                async def renew_or_stop() -> None:
                    nonlocal lost
                    await self._keep_renewing()
                    lost = True
                    group.cancel_scope.cancel()

                group.start_soon(lead_then_stop)
                group.start_soon(renew_or_stop)
        finally:
            was_leading = self._leading
            self._set_leading(False)
            if was_leading and not lost and self.config.release_on_cancel:
                with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT):
                    await self.release()
        if lost:
            raise LeadershipLost(
                f"{self.config.identity} lost lease "
                f"{self.config.namespace}/{self.config.lease_name}: {self._lost_because}"
            )

    async def _campaign(self) -> None:
        name = f"{self.config.namespace}/{self.config.lease_name}"
        log.info("%s: campaigning for lease %s", self.config.identity, name)
        while True:
            if await self.try_acquire_or_renew():
                break
            await anyio.sleep(self.config.retry_period * (1 + CAMPAIGN_JITTER * self.rand()))
        log.info("%s: acquired lease %s", self.config.identity, name)
        self._set_leading(True)

    async def _keep_renewing(self) -> None:
        """Return once leadership is over: no renewal succeeded before the renew deadline of
        the last one, or a renewal found another holder. Both are :meth:`holds_lease` turning
        false, the same judgement the write fence makes, so a leader woken from a pause past its
        deadline stops without asking the API server."""
        while True:
            await anyio.sleep(self.config.retry_period)
            if self.holds_lease():
                with anyio.move_on_after(self._valid_until - self.clock()):
                    await self.try_acquire_or_renew(leading=True)
            if not self.holds_lease():
                if not self._lost_because:
                    self._lost_because = f"not renewed within {self.config.renew_deadline:g} s"
                log.error("%s: %s", self.config.identity, self._lost_because)
                return

    def _set_leading(self, leading: bool) -> None:
        if not leading:
            self._valid_until = float("-inf")
        if leading != self._leading:
            self._leading = leading
            if self.on_change is not None:
                self.on_change(leading)

    async def try_acquire_or_renew(self, *, leading: bool = False) -> bool:
        """One attempt; True when we hold the Lease afterwards. Never raises API errors. When
        ``leading`` and another identity holds the Lease, our leadership is over at once:
        :meth:`holds_lease` is false from then on."""
        started = self.clock()
        try:
            held = await self._try_acquire_or_renew(leading)
        except LeaseTaken as taken:
            self._valid_until = float("-inf")
            self._lost_because = str(taken)
            return False
        except KubeError as err:
            log.warning("%s: lease attempt failed: %s", self.config.identity, err)
            return False
        if held:
            self._valid_until = started + self.config.renew_deadline
        return held

    async def _try_acquire_or_renew(self, leading: bool) -> bool:
        cfg = self.config
        now = micro_time()
        try:
            lease = await self.client.get(LEASES, cfg.lease_name, cfg.namespace)
        except NotFound:
            spec: dict[str, Any] = {
                "holderIdentity": cfg.identity,
                "leaseDurationSeconds": round(cfg.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            }
            try:
                created = await self.client.create(
                    LEASES,
                    {
                        "metadata": {"name": cfg.lease_name, "namespace": cfg.namespace},
                        "spec": spec,
                    },
                )
            except AlreadyExists:
                return False
            self._expiry.observe(created)
            return True

        holder = LeaseRecord.of(lease).holder
        if leading and holder and holder != cfg.identity:
            raise LeaseTaken(f"it is held by {holder} now")
        if self._expiry.held_by_other(lease, cfg.identity):
            return False  # someone else holds it and has renewed recently enough
        spec = dict(lease.get("spec") or {})
        if holder != cfg.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            holderIdentity=cfg.identity,
            leaseDurationSeconds=round(cfg.lease_duration),
            renewTime=now,
        )
        lease["spec"] = spec
        try:
            updated = await self.client.update(LEASES, lease)  # carries the resourceVersion read
        except Conflict:
            return False
        self._expiry.observe(updated)
        return True

    async def release(self) -> None:
        """Clear the holder if it is still us. Idempotent; conflicts and absence are fine."""
        cfg = self.config
        try:
            lease = await self.client.get(LEASES, cfg.lease_name, cfg.namespace)
            if LeaseRecord.of(lease).holder != cfg.identity:
                return
            spec = dict(lease.get("spec") or {})
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time())
            lease["spec"] = spec
            await self.client.update(LEASES, lease)
            log.info("%s: released lease %s/%s", cfg.identity, cfg.namespace, cfg.lease_name)
        except (NotFound, Conflict):
            return
        except KubeError as err:
            log.warning("%s: could not release the lease: %s", cfg.identity, err)
