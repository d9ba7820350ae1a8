"""Which member owns a pool's slot: the activation intent, read from the pool's Lease.

The protocol (:mod:`controlplane.api.v1alpha1.activation`): an activator that wants a member
holds the pool's Lease (``modelpool-pool-<pool>``, labelled with the pool) with the annotation
``inference.modelpool.dev/target: <member>``. The intent is valid while the Lease has a holder and
has not expired.

**Expiry is judged on our own clock** (:class:`~controlplane.runtime.leaserecord.ExpiryObserver`,
the same helper the framework's leader election uses): the intent is expired once the Lease's
record has stayed unchanged for longer than ``leaseDurationSeconds`` as seen by the controller.
The cost: after the operator starts, an orphaned intent is honoured for up to one lease duration
before it counts as expired.

**The owner** (:func:`choose_owner`), first rule that holds:

1. a valid intent whose target is a member of the pool: the target;
2. the current resident (``status.residentMember``): sticky;
3. the pool's ``default``: a cold pool is warmed;
4. nobody: the pool is cold.

An intent naming something that is not a member is ignored (and said so). A withdrawn or expired
intent simply stops counting: the owner falls back to the resident, the default, or nobody, so the
controller never keeps scaling an abandoned target.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.api.v1alpha1.activation import pool_for_lease, read_activation
from controlplane.api.v1alpha1.demand import pool_of_demand_lease
from controlplane.clock import TimeSource
from controlplane.runtime.informer import DeletedFinalStateUnknown
from controlplane.runtime.leaserecord import ExpiryObserver, lease_key


@dataclass(frozen=True, slots=True)
class Intent:
    """A valid request for ``target`` by ``holder``, good for ``expires_in`` more seconds;
    ``traceparent`` is the trace context of the swap that asks (None: not traced)."""

    holder: str
    target: str
    expires_in: float
    traceparent: str | None = None
    #: Of a pool with a budget: the residents the holder asks to leave for ``target``.
    evict: tuple[str, ...] = ()


class LeaseObserver:
    """The intents of pool Leases, with expiry judged on our clock.

    Subscribed to the Lease informer as an event handler, so the moment a record is seen to change
    is the moment the watch delivered it, not when a reconcile got round to it. Leases that are not
    a pool's (:func:`~controlplane.api.v1alpha1.activation.pool_for_lease`) are ignored.
    """

    def __init__(self, clock: TimeSource = time.monotonic) -> None:
        self.expiry = ExpiryObserver(clock)

    def intent(self, lease: Mapping[str, Any] | None) -> Intent | None:
        """The intent ``lease`` carries: held, targeted, and not expired on our clock."""
        if lease is None or pool_for_lease(lease) is None:
            return None
        activation = read_activation(lease)
        left = self.expiry.remaining(lease)
        if not activation.requested or activation.target is None or left < 0:
            return None
        return Intent(
            holder=activation.holder,
            target=activation.target,
            expires_in=left,
            traceparent=activation.traceparent,
            evict=activation.evict,
        )

    # -- informer event handler ------------------------------------------------------------------

    def on_add(self, obj: dict[str, Any], initial: bool) -> None:
        if pool_for_lease(obj) is not None or pool_of_demand_lease(obj) is not None:
            self.expiry.observe(obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.on_add(new, False)

    def on_delete(self, obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
        final = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        self.expiry.forget(lease_key(final))


class OwnerReason(enum.StrEnum):
    REQUESTED = "Requested"
    RESIDENT = "Resident"
    DEFAULT = "Default"
    COLD = "Cold"
    #: The resident was idle for ``spec.scheduling.idleAfter``: the slot goes back to the
    #: default, or to nobody (:mod:`~controlplane.controllers.modelpool.idle`).
    RECLAIMED = "Reclaimed"


@dataclass(frozen=True, slots=True)
class Owner:
    """The member the slot belongs to (None: cold), why, and an intent that was not followed."""

    name: str | None
    reason: OwnerReason
    intent: Intent | None = None
    ignored: str | None = None


def choose_owner(
    members: Sequence[str],
    default: str | None,
    resident: str | None,
    intent: Intent | None,
) -> Owner:
    """The owner, by the rules in the module docstring (first match wins)."""
    ignored = None
    if intent is not None:
        if intent.target in members:
            return Owner(intent.target, OwnerReason.REQUESTED, intent)
        ignored = f"{intent.holder} requested {intent.target}, which is not a member of the pool"
    if resident is not None and resident in members:
        return Owner(resident, OwnerReason.RESIDENT, ignored=ignored)
    if default is not None and default in members:
        return Owner(default, OwnerReason.DEFAULT, ignored=ignored)
    return Owner(None, OwnerReason.COLD, ignored=ignored)
