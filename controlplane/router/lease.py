"""The pool's Lease as an activation intent: claim, renew, release (DESIGN 4.3, docs/modelpool.md).

A replica that wants a member claims the Lease ``modelpool-<pool>``: it creates it, or takes it
when it is released (no holder) or expired. Expiry is judged as the framework's leader election
does: by *when this replica saw the record last change* on its own monotonic clock, never by
comparing the holder's ``renewTime`` with our clock. Every write carries the resourceVersion that
was read; a 409 means someone else wrote first, so the Lease is re-read and judged again.

The holder renews at a third of the duration while its swap runs and releases (clears the holder
and the target annotation) when it is done; release is idempotent and never raises.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from controlplane.api.v1alpha1.activation import TARGET_ANNOTATION, pool_lease_name
from controlplane.router.errors import LeaseUnavailable
from controlplane.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound
from controlplane.runtime.resources import LEASES, Resource
from controlplane.runtime.timeutil import micro_time

log = logging.getLogger(__name__)

#: How long a claim lasts without renewal; renewed every third of it.
LEASE_DURATION_SECONDS = 45
RENEW_INTERVAL_SECONDS = LEASE_DURATION_SECONDS / 3
#: Writes retried after a 409 before the attempt gives up (the caller tries again later).
CONFLICT_RETRIES = 3

Object = dict[str, Any]


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


def _target(lease: Object) -> str | None:
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(TARGET_ANNOTATION)
    return str(value) if value else None


def _record(lease: Object) -> tuple[Any, ...]:
    spec = lease.get("spec") or {}
    return (
        spec.get("holderIdentity"),
        spec.get("leaseDurationSeconds"),
        spec.get("acquireTime"),
        spec.get("renewTime"),
        spec.get("leaseTransitions"),
        _target(lease),
    )


class LeaseCoordinator:
    """Claims, renews and releases pools' Leases as ``identity`` in ``namespace``."""

    def __init__(
        self,
        client: ObjectApi,
        namespace: str,
        identity: str,
        *,
        duration: int = LEASE_DURATION_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self._observed: dict[str, tuple[tuple[Any, ...], float]] = {}

    def _observe(self, lease: Object) -> float:
        """When this replica saw ``lease``'s record last change (now, if it just changed)."""
        name = str((lease.get("metadata") or {}).get("name"))
        record = _record(lease)
        seen = self._observed.get(name)
        if seen is None or seen[0] != record:
            seen = (record, self.clock())
            self._observed[name] = seen
        return seen[1]

    def _expired(self, lease: Object) -> bool:
        since = self._observe(lease)
        duration = float((lease.get("spec") or {}).get("leaseDurationSeconds") or 0)
        return self.clock() - since > duration

    async def claim(self, pool: str, target: str) -> Claim:
        """Hold the Lease for ``target``, or say who holds it. Raises :class:`LeaseUnavailable`."""
        name = pool_lease_name(pool)
        try:
            for _ in range(CONFLICT_RETRIES):
                try:
                    lease = await self.client.get(LEASES, name, self.namespace)
                except NotFound:
                    try:
                        created = await self.client.create(LEASES, self._new(name, target))
                    except AlreadyExists:
                        continue  # someone else won: re-read
                    self._observe(created)
                    return Claim(True, self.identity, target)
                holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
                if holder and holder != self.identity and not self._expired(lease):
                    return Claim(False, holder, _target(lease))
                try:
                    updated = await self.client.update(LEASES, self._taken(lease, target))
                except Conflict:
                    continue
                self._observe(updated)
                return Claim(True, self.identity, target)
        except KubeError as err:
            raise LeaseUnavailable(f"the Lease of pool {pool} is unavailable: {err}") from err
        return Claim(False)

    async def renew(self, pool: str, target: str) -> bool:
        """Move ``renewTime``; False when the Lease is no longer ours (lost). Never raises."""
        name = pool_lease_name(pool)
        for _ in range(CONFLICT_RETRIES):
            try:
                lease = await self.client.get(LEASES, name, self.namespace)
                spec = dict(lease.get("spec") or {})
                if spec.get("holderIdentity") != self.identity or _target(lease) != target:
                    return False
                spec["renewTime"] = micro_time()
                updated = await self.client.update(LEASES, {**lease, "spec": spec})
                self._observe(updated)
                return True
            except NotFound:
                return False
            except Conflict:
                continue
            except KubeError as err:  # transient: the Lease lasts three renew intervals
                log.warning("renewing the Lease of pool %s failed: %s", pool, err)
                return True
        return True

    async def release(self, pool: str) -> None:
        """Clear the holder and the target if they are ours. Idempotent; never raises."""
        name = pool_lease_name(pool)
        for _ in range(CONFLICT_RETRIES):
            try:
                lease = await self.client.get(LEASES, name, self.namespace)
                spec = dict(lease.get("spec") or {})
                if spec.get("holderIdentity") != self.identity:
                    return
                spec.update(holderIdentity="", renewTime=micro_time())
                metadata = dict(lease.get("metadata") or {})
                annotations = dict(metadata.get("annotations") or {})
                annotations.pop(TARGET_ANNOTATION, None)
                metadata["annotations"] = annotations
                await self.client.update(LEASES, {**lease, "metadata": metadata, "spec": spec})
                log.info("%s: released the Lease of pool %s", self.identity, pool)
                return
            except NotFound:
                return
            except Conflict:
                continue
            except KubeError as err:
                log.warning("releasing the Lease of pool %s failed: %s", pool, err)
                return

    def _new(self, name: str, target: str) -> Object:
        now = micro_time()
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "annotations": {TARGET_ANNOTATION: target},
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }

    def _taken(self, lease: Object, target: str) -> Object:
        now = micro_time()
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.duration, renewTime=now)
        metadata = dict(lease.get("metadata") or {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}), TARGET_ANNOTATION: target}
        return {**lease, "metadata": metadata, "spec": spec}
