"""The activation intent: how an activator asks a pool for a member (docs/modelpool.md).

A request for a member is an explicit, revocable intent written by the activator that holds the
pool's Lease; the pool controller reads it and decides who owns the slot. The intent **is** the
Lease:

* a ``coordination.k8s.io/v1`` Lease named :func:`pool_lease_name` (``modelpool-pool-<pool>``)
  in the pool's namespace, labelled :data:`POOL_LABEL` ``= <pool>``;
* with a non-empty ``spec.holderIdentity`` (the activator), a positive
  ``spec.leaseDurationSeconds``, a ``spec.renewTime`` the holder moves at least every third of
  the duration while the swap runs;
* and the annotation :data:`TARGET_ANNOTATION` naming the member it wants;
* optionally the annotation :data:`TRACEPARENT_ANNOTATION`: the W3C ``traceparent`` of the swap
  the holder drives for that target, so the pool controller's spans for it join the trace of the
  request that started it (DESIGN 4.11). It is written with the claim, kept by renewals, and
  cleared with the target on release: a trace context never outlives the intent it belongs to.
* in a pool with ``spec.capacity``, optionally the annotation :data:`EVICT_ANNOTATION`: the
  residents (comma-separated) that leave to make room for the target, as the holder's scheduler
  chose them (:mod:`controlplane.scheduling.budget`). Admission closes for those residents only,
  and the pool controller drains exactly them (through the idle gate); it still grants the target
  only once it fits. Written with the claim, cleared with the target.

**A Lease is a pool's only by its label.** A name pattern alone let the operator's own leader
Lease (``modelpool-operator``) read as the intent of a pool called ``operator``. Both sides
select pool Leases by :data:`POOL_LABEL` and accept one only when its name is the one
:func:`pool_lease_name` gives for the labelled pool (:func:`pool_for_lease`), so no other Lease,
whatever it is called, is ever read as an intent, and an activator refuses to write over a Lease of
that name that is not a pool's.

Releasing the Lease (clearing ``holderIdentity`` and the target) withdraws the intent at once; a
holder that stops renewing loses it when the Lease expires (judged on the reader's clock,
:class:`~controlplane.runtime.leaserecord.ExpiryObserver`). The activator never writes a member:
only the pool controller decides, in its own status, granting the member it has chosen as owner.
After a failed or abandoned swap the activator releases the Lease, and the pool, whose owner falls
back to its resident, releases the target.

Both sides (and the tests that play either) import these names and builders, so the protocol has
one spelling and one parsing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from controlplane.runtime.leaserecord import LeaseRecord
from controlplane.runtime.objects import Object
from controlplane.runtime.timeutil import micro_time

#: Annotation on the pool's Lease naming the member the holder wants resident.
TARGET_ANNOTATION: Final = "inference.modelpool.dev/target"
#: Annotation on the pool's Lease: the W3C ``traceparent`` of the swap the holder drives.
TRACEPARENT_ANNOTATION: Final = "inference.modelpool.dev/traceparent"
#: Annotation on the pool's Lease: the residents that leave to make room (a pool with a budget).
EVICT_ANNOTATION: Final = "inference.modelpool.dev/evict"
#: Label on a pool's Lease naming the pool; Lease informers select on it.
POOL_LABEL: Final = "inference.modelpool.dev/pool"
#: Prefix of a pool's Lease name; the rest is the pool's name.
POOL_LEASE_PREFIX: Final = "modelpool-pool-"


def pool_lease_name(pool: str) -> str:
    """The name of the Lease that carries ``pool``'s activation intent (same namespace)."""
    return f"{POOL_LEASE_PREFIX}{pool}"


def pool_for_lease(lease: Mapping[str, Any]) -> str | None:
    """The pool whose intent ``lease`` carries, or None for any other Lease.

    A pool's Lease is labelled with the pool's name *and* named after it; either alone is not
    enough (a user's Lease may carry any name, or copy a label)."""
    meta = lease.get("metadata") or {}
    pool = (meta.get("labels") or {}).get(POOL_LABEL)
    if not pool or meta.get("name") != pool_lease_name(str(pool)):
        return None
    return str(pool)


@dataclass(frozen=True, slots=True)
class Activation:
    """What a pool's Lease says: who holds it (``""``: nobody), for which member, and the trace
    context of the swap it asks for (``None``: none recorded)."""

    holder: str
    target: str | None
    duration: int | None
    traceparent: str | None = None
    #: The residents the holder asks to leave for the target (a pool with a budget).
    evict: tuple[str, ...] = ()

    @property
    def requested(self) -> bool:
        """A holder asks for a target: an intent, if it has not expired."""
        return bool(self.holder) and bool(self.target) and bool(self.duration)

    def is_claim_of(self, identity: str, target: str) -> bool:
        """``identity`` holds it for ``target``: renew and release check both."""
        return self.holder == identity and self.target == target


def read_activation(lease: Mapping[str, Any]) -> Activation:
    """The one parsing of a pool Lease's holder, target, duration and trace context."""
    record = LeaseRecord.of(lease)
    annotations = dict(record.annotations)
    target = annotations.get(TARGET_ANNOTATION) or None
    duration = record.duration if record.duration is not None and record.duration > 0 else None
    traceparent = annotations.get(TRACEPARENT_ANNOTATION) or None
    evict = tuple(
        sorted({m.strip() for m in (annotations.get(EVICT_ANNOTATION) or "").split(",")} - {""})
    )
    return Activation(record.holder, target, duration, traceparent, evict)


def _annotations(target: str, traceparent: str | None, evict: Sequence[str] = ()) -> dict[str, str]:
    annotations = {TARGET_ANNOTATION: target}
    if traceparent:
        annotations[TRACEPARENT_ANNOTATION] = traceparent
    if evict:
        annotations[EVICT_ANNOTATION] = ",".join(sorted(evict))
    return annotations


def new_pool_lease(
    namespace: str,
    pool: str,
    holder: str,
    target: str,
    duration: int,
    traceparent: str | None = None,
    evict: Sequence[str] = (),
) -> Object:
    """A pool Lease held by ``holder`` for ``target``, to create; ``traceparent`` is the trace
    context of the swap, carried to the pool controller; ``evict`` the residents to leave."""
    now = micro_time()
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": pool_lease_name(pool),
            "namespace": namespace,
            "labels": {POOL_LABEL: pool},
            "annotations": _annotations(target, traceparent, evict),
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        },
    }


def _with_target(
    lease: Mapping[str, Any],
    target: str | None,
    traceparent: str | None = None,
    evict: Sequence[str] = (),
) -> Object:
    """``lease`` for ``target`` with ``traceparent`` and ``evict`` (those of an earlier claim never
    stay: they belong to another swap), or with none of them for ``None``."""
    metadata = dict(lease.get("metadata") or {})
    annotations = dict(metadata.get("annotations") or {})
    for key in (TARGET_ANNOTATION, TRACEPARENT_ANNOTATION, EVICT_ANNOTATION):
        annotations.pop(key, None)
    if target is not None:
        annotations.update(_annotations(target, traceparent, evict))
    metadata["annotations"] = annotations
    return {**lease, "metadata": metadata}


def claimed(
    lease: Mapping[str, Any],
    holder: str,
    target: str,
    duration: int,
    traceparent: str | None = None,
    evict: Sequence[str] = (),
) -> Object:
    """``lease`` (as read, resourceVersion included) taken by ``holder`` for ``target``, with
    the trace context of the swap that takes it and the residents it asks to leave."""
    now = micro_time()
    spec = dict(lease.get("spec") or {})
    if read_activation(lease).holder != holder:
        spec["acquireTime"] = now
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec.update(holderIdentity=holder, leaseDurationSeconds=duration, renewTime=now)
    return {**_with_target(lease, target, traceparent, evict), "spec": spec}


def renewed(lease: Mapping[str, Any]) -> Object:
    """``lease`` with its ``renewTime`` moved: a sign of life from its holder."""
    return {**lease, "spec": {**(lease.get("spec") or {}), "renewTime": micro_time()}}


def released(lease: Mapping[str, Any]) -> Object:
    """``lease`` with no holder, no target and no trace context: the intent withdrawn."""
    spec = {**(lease.get("spec") or {}), "holderIdentity": "", "renewTime": micro_time()}
    return {**_with_target(lease, None), "spec": spec}
