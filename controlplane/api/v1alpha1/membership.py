"""Which pool a member belongs to: the one whose claim on it stands.

A member listed by several pools belongs to one (docs/modelpool.md, "One member, one pool"): the
pool controller refuses every other pool that lists it (``controllers/modelpool/claims.py``), and
the router-proxy must send a request for that member through the same pool, whether the router
names the pool (``poolRef``) or the member itself (``inferenceServiceRef``): a second path to a
pool member would bypass the pool's admission, demand and fenced drain, and the pool would drain
a member that router feeds (issue 46). So the rule lives here, in the API both read, and each
reader applies it to its own cache of the namespace's pools:

1. a pool that has decided about the member (``status.members[].slot`` written) over one that has
   not: a pool that comes to list a member another pool runs never takes it away;
2. the pool created first (``metadata.creationTimestamp``);
3. the pool whose name sorts first.

A pool being deleted claims nothing: deleting it hands its members back.

Pure: plain objects in, a name out.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.api.v1alpha1.modelpool import member_slot
from controlplane.runtime.objects import ObjectView


def lists(pool: ObjectView, member: str) -> bool:
    """Whether ``pool`` lists ``member`` (by ``spec.members[].inferenceServiceRef.name``)."""
    refs = (pool.get("spec") or {}).get("members") or ()
    return any((ref.get("inferenceServiceRef") or {}).get("name") == member for ref in refs)


def claim_order(pool: ObjectView, member: str) -> tuple[int, str, str]:
    """Sorts the pools that list ``member``: the first one's claim stands (rules above)."""
    meta = pool.get("metadata") or {}
    decided = member_slot(pool, member) is not None
    return (0 if decided else 1, str(meta.get("creationTimestamp") or ""), str(meta.get("name")))


def claiming_pool(pools: Iterable[ObjectView], member: str) -> str | None:
    """The name of the pool (of ``pools``, one namespace's) whose claim on ``member`` stands;
    None when no pool that is not being deleted lists it."""
    listing = [
        pool
        for pool in pools
        if not (pool.get("metadata") or {}).get("deletionTimestamp") and lists(pool, member)
    ]
    if not listing:
        return None
    return str(min(listing, key=lambda pool: claim_order(pool, member))["metadata"]["name"])
