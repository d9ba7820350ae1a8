"""The activation intent: how an activator asks a pool for a member (DESIGN 4.1).

A request for a member is an explicit, revocable intent written by the activator that holds the
pool's Lease; the pool controller reads it and decides who owns the slot. The intent **is** the
Lease:

* a ``coordination.k8s.io/v1`` Lease named :func:`pool_lease_name` (``modelpool-<pool>``) in the
  pool's namespace;
* with a non-empty ``spec.holderIdentity`` (the activator), a positive
  ``spec.leaseDurationSeconds``, a ``spec.renewTime`` the holder moves at least every third of
  the duration while the swap runs;
* and the annotation :data:`TARGET_ANNOTATION` naming the member it wants.

Releasing the Lease (clearing ``holderIdentity``) withdraws the intent at once; a holder that
stops renewing loses it when the Lease expires. The activator never scales a member up: only the
pool controller does, for the member it has chosen as owner. After a failed or abandoned swap the
activator scales its target back down and releases the Lease.

Both sides import these names, so the protocol has one spelling.
"""

from __future__ import annotations

from typing import Final

#: Annotation on the pool's Lease naming the member the holder wants resident.
TARGET_ANNOTATION: Final = "inference.modelpool.dev/target"
#: Prefix of a pool's Lease name; the rest is the pool's name.
POOL_LEASE_PREFIX: Final = "modelpool-"


def pool_lease_name(pool: str) -> str:
    """The name of the Lease that carries ``pool``'s activation intent (same namespace)."""
    return f"{POOL_LEASE_PREFIX}{pool}"


def pool_for_lease(lease_name: str) -> str | None:
    """The pool whose intent a Lease of this name carries, or None for any other Lease."""
    if lease_name.startswith(POOL_LEASE_PREFIX) and len(lease_name) > len(POOL_LEASE_PREFIX):
        return lease_name[len(POOL_LEASE_PREFIX) :]
    return None
