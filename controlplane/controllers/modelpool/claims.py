"""One member, one pool: which pool's claim on a member stands when several list it.

Two pools deciding about one Deployment would break the promise each makes (never two residents,
the drain's idle gate): each grants and releases it on its own. So the claim of a member belongs
to one pool, and every other pool that lists it is refused: ``MembersValid=False``, reason
``MemberInAnotherPool``, naming the pool that holds it; a refused pool is Degraded and changes no
slot, as for a missing member (docs/modelpool.md, "One member, one pool").

Which claim stands is the one rule the router-proxy applies too
(:func:`~controlplane.api.v1alpha1.membership.claim_order`): a pool that has already decided about
the member over one that has not, then the pool created first, then the name.

A pool being deleted claims nothing (:func:`~controlplane.controllers.modelpool.grant.
listing_pools`: deleting a pool hands its members back).

Pure: the reconciler passes the namespace's pools from its cache; a pool's claim is judged the
same way by every pool that lists the member, so they agree without writing anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from controlplane.api.v1alpha1.membership import claim_order
from controlplane.controllers.modelpool.grant import listed_members, listing_pools

_Pool = TypeVar("_Pool", bound=Mapping[str, Any])


def claim_holder(pools: Iterable[Mapping[str, Any]], member: str) -> Mapping[str, Any] | None:
    """The pool (of ``pools``, one namespace's) whose claim on ``member`` stands; None when no
    pool lists it."""
    listing = listing_pools(pools, member)
    return min(listing, key=lambda p: claim_order(p, member)) if listing else None


def standing_pools(pools: Iterable[_Pool], member: str) -> list[_Pool]:
    """``pools`` without those that list ``member`` and are refused it: what the
    InferenceService controller reads, so that a refused pool changes nothing about a member it
    lists (neither its slot nor whether a slot server serves it)."""
    listed = list(pools)
    holder = claim_holder(listed, member)
    return [
        pool
        for pool in listed
        if pool is holder
        or pool["metadata"].get("deletionTimestamp")
        or member not in listed_members(pool)
    ]


def claimed_elsewhere(
    pool: Mapping[str, Any], members: Iterable[str], pools: Iterable[Mapping[str, Any]]
) -> dict[str, str]:
    """Of ``pool``'s ``members``, each one whose claim another of ``pools`` (the namespace's)
    holds, with that pool's name."""
    name = pool["metadata"]["name"]
    pools = list(pools)
    refused: dict[str, str] = {}
    for member in members:
        rivals = [p for p in listing_pools(pools, member) if p["metadata"]["name"] != name]
        if not rivals:
            continue
        first = min([pool, *rivals], key=lambda p: claim_order(p, member))
        if first is not pool:
            refused[member] = str(first["metadata"]["name"])
    return refused
