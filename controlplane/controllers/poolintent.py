"""Which member owns a pool's slot: the activation intent, read from the pool's Lease.

The protocol (:mod:`controlplane.api.v1alpha1.activation`): an activator that wants a member
holds the pool's Lease ``modelpool-<pool>`` with the annotation
``inference.modelpool.dev/target: <member>``. The intent is valid while the Lease has a holder and
has not expired.

**Expiry is judged on our own clock.** ``renewTime + leaseDurationSeconds`` compares a timestamp
written by the activator's clock with ours; a few seconds of skew between two machines would make
a live intent look expired, or a dead one live. So, as the framework's leader election does (and
client-go's), :class:`LeaseObserver` remembers *when we saw the record last change* on the
controller's monotonic clock, and the intent is expired once the record has stayed unchanged for
longer than ``leaseDurationSeconds``. A holder renews by moving ``renewTime``, which changes the
record; only durations cross the machine boundary, never instants. The cost: after the operator
starts, an orphaned intent is honoured for up to one lease duration before it counts as expired.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.api.v1alpha1.activation import TARGET_ANNOTATION, pool_for_lease
from controlplane.runtime.cache import object_key
from controlplane.runtime.informer import DeletedFinalStateUnknown

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Intent:
    """A valid request for ``target`` by ``holder``, good for ``expires_in`` more seconds."""

    holder: str
    target: str
    expires_in: float


def lease_record(lease: Mapping[str, Any]) -> tuple[Any, ...]:
    """What counts as a change of the Lease: its spec and the target annotation."""
    spec = lease.get("spec") or {}
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    return (
        spec.get("holderIdentity") or "",
        spec.get("leaseDurationSeconds"),
        spec.get("acquireTime"),
        spec.get("renewTime"),
        spec.get("leaseTransitions"),
        annotations.get(TARGET_ANNOTATION) or "",
    )


def read_intent(lease: Mapping[str, Any] | None, observed_at: float, now: float) -> Intent | None:
    """The intent the Lease carries, if any: held, targeted, and unchanged for at most its
    duration on our clock (``observed_at`` is when we saw its record last change)."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    target = ((lease.get("metadata") or {}).get("annotations") or {}).get(TARGET_ANNOTATION) or ""
    duration = spec.get("leaseDurationSeconds")
    if not holder or not target or not isinstance(duration, int) or duration <= 0:
        return None
    left = observed_at + duration - now
    if left < 0:
        return None
    return Intent(holder=str(holder), target=str(target), expires_in=left)


class LeaseObserver:
    """Remembers, per pool Lease, when its record last changed on our clock.

    Subscribed to the Lease informer as an event handler, so the moment is the moment the watch
    delivered the change, not when a reconcile got round to it. Leases of other names are ignored.
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, tuple[tuple[Any, ...], float]] = {}

    def observe(self, lease: Mapping[str, Any]) -> float:
        """Record ``lease`` as seen now; return when its current record was first seen."""
        key = object_key(lease)
        record = lease_record(lease)
        seen = self._seen.get(key)
        if seen is None or seen[0] != record:
            seen = (record, self.clock())
            self._seen[key] = seen
        return seen[1]

    def intent(self, lease: Mapping[str, Any] | None) -> Intent | None:
        if lease is None:
            return None
        return read_intent(lease, self.observe(lease), self.clock())

    def forget(self, key: str) -> None:
        self._seen.pop(key, None)

    # -- informer event handler ------------------------------------------------------------------

    def on_add(self, obj: dict[str, Any], initial: bool) -> None:
        if pool_for_lease(obj["metadata"]["name"]) is not None:
            self.observe(obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.on_add(new, False)

    def on_delete(self, obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
        final = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        self.forget(object_key(final))


class OwnerReason(enum.StrEnum):
    REQUESTED = "Requested"
    RESIDENT = "Resident"
    DEFAULT = "Default"
    COLD = "Cold"


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
