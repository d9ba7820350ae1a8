"""Reading a ``coordination.k8s.io/v1`` Lease, and judging its expiry on our own clock.

Every user of a Lease (the manager's leader election, and whatever a program builds on Leases)
needs the same two things, so they live here once:

* :class:`LeaseRecord`: the fields that make up a Lease's *record*, parsed one way. Any change of
  the record (holder, duration, acquire or renew time, transitions, annotations) is a sign of
  life from its holder.
* :class:`ExpiryObserver`: when this process saw each Lease's record last change, on its own
  monotonic clock. A Lease is expired once its record has stayed unchanged for longer than its
  ``leaseDurationSeconds``. ``renewTime`` is never compared with our clock: it was written by the
  holder's clock, and a few seconds of skew between two machines would make a live holder look
  expired, or a dead one live. Only durations cross the machine boundary, never instants (the
  rule client-go's leader election follows).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.clock import TimeSource


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What counts as a change of a Lease: its spec and its annotations."""

    holder: str
    duration: int | None
    acquire_time: str | None
    renew_time: str | None
    transitions: int | None
    annotations: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=duration if isinstance(duration, int) else None,
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=transitions if isinstance(transitions, int) else None,
            annotations=tuple(sorted((str(k), str(v)) for k, v in annotations.items())),
        )

    @property
    def held(self) -> bool:
        """Someone holds it: a holder and a positive duration."""
        return bool(self.holder) and self.duration is not None and self.duration > 0


def lease_key(lease: Mapping[str, Any]) -> str:
    meta = lease.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


class ExpiryObserver:
    """Remembers, per Lease, when its record last changed as seen on our clock."""

    def __init__(self, clock: TimeSource = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, tuple[LeaseRecord, float]] = {}

    def observe(self, lease: Mapping[str, Any]) -> float:
        """Record ``lease`` as seen now; return when its current record was first seen."""
        key, record = lease_key(lease), LeaseRecord.of(lease)
        seen = self._seen.get(key)
        if seen is None or seen[0] != record:
            seen = (record, self.clock())
            self._seen[key] = seen
        return seen[1]

    def remaining(self, lease: Mapping[str, Any]) -> float:
        """Seconds until the current record expires (negative once expired; 0 when not held)."""
        record = LeaseRecord.of(lease)
        observed_at = self.observe(lease)
        if not record.held or record.duration is None:
            return 0.0
        return observed_at + record.duration - self.clock()

    def held_by_other(self, lease: Mapping[str, Any], identity: str) -> bool:
        """Someone other than ``identity`` holds it and has shown life within its duration."""
        record = LeaseRecord.of(lease)
        return record.held and record.holder != identity and self.remaining(lease) >= 0

    def forget(self, key: str) -> None:
        self._seen.pop(key, None)
