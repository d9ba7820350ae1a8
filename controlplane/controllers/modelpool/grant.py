"""The slot grant: how the pool stays the only authority on its members' replicas.

See docs/modelpool.md, "grant".

The pool's decision lives in an object the pool owns: its status. ``status.members[].slot`` is
``Granted`` (it may run), ``Released`` (it must not) or unset (not decided yet). The pool
controller writes it with the rest of its status, through the status subresource and guarded by
the pool's ``resourceVersion``; the schema refuses a status in which two members hold the grant.
Nothing of the decision is written into the member's own object, so ``kubectl apply``, Helm or
Argo CD re-applying a member (its ``spec.replicas`` included) changes nothing the pool decided.

The InferenceService controller computes its Deployment's replicas with
:func:`deployment_replicas` from the slots of the pools that list the member:

* listed by no pool: ``spec.replicas``, as for any standalone server;
* granted by a pool that lists it: 1 (``spec.replicas`` is not read: the pool decides);
* released by a pool that lists it: 0;
* listed and not decided: never more than the Deployment already has. Lowering is always allowed;
  raising needs the grant. A member that was running when a pool came to list it keeps running
  until the pool drains it through the idle gate like any non-owner: it is not killed unprobed.

**A release counts once it is acknowledged.** The InferenceService controller raises a granted
member after a live read of the pools, and its raise may still be on its way when the pool
releases that member again (an abandoned swap); a pool that then saw the Deployment at 0 in its
cache would grant another member beside the raise landing late. So every decision carries
``status.members[].since`` (microseconds, set when the slot changes), and the InferenceService
controller, once the Deployment follows a decision, echoes it in the member's
``status.poolDecision`` with the Deployment's generation it applied (:func:`decision_seen`). It
reconciles one member at a time, so by then any earlier raise of it has landed. The pool counts a
member released only when it acknowledged exactly this release and the pool's cache shows that
Deployment generation (:func:`acknowledged`), and grants only after a live read of the pods.

Pure functions of objects (no I/O), shared by both controllers so they read the grant alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controlplane.api.v1alpha1.modelpool import (
    SLOT_GRANTED,
    SLOT_RELEASED,
    member_since,
    member_slot,
    serves_from_slot_server,
)
from controlplane.runtime.objects import ObjectView


def listed_members(pool: ObjectView) -> list[str]:
    """The names of the InferenceServices ``pool`` lists, read from the object as cached."""
    refs = (pool.get("spec") or {}).get("members") or ()
    return [
        str(name) for ref in refs if (name := (ref.get("inferenceServiceRef") or {}).get("name"))
    ]


def lists_member(pool: ObjectView, member: str) -> bool:
    return member in listed_members(pool)


def listing_pools(pools: Iterable[ObjectView], member: str) -> list[ObjectView]:
    """The pools (of one namespace) that list ``member``, by name; deleted ones excluded, since
    deleting a pool hands its members back to their own ``spec.replicas``."""
    found = [
        pool
        for pool in pools
        if not pool["metadata"].get("deletionTimestamp") and lists_member(pool, member)
    ]
    return sorted(found, key=lambda pool: str(pool["metadata"]["name"]))


def pools_listing(pools: Iterable[ObjectView], member: str) -> list[str]:
    """Names of the pools that list ``member``, sorted (:func:`listing_pools`)."""
    return [str(pool["metadata"]["name"]) for pool in listing_pools(pools, member)]


def decision_seen(
    pools: Iterable[ObjectView], member: str, deployment_generation: int | None
) -> dict[str, Any] | None:
    """The ``status.poolDecision`` that acknowledges the decision the Deployment was sized by
    (the first pool granting it, else the first releasing it; None when undecided)."""
    listing = listing_pools(pools, member)
    for wanted in (SLOT_GRANTED, SLOT_RELEASED):
        for pool in listing:
            if member_slot(pool, member) == wanted:
                seen: dict[str, Any] = {
                    "pool": str(pool["metadata"]["name"]),
                    "slot": wanted,
                    "since": member_since(pool, member),
                }
                if deployment_generation is not None:
                    seen["deploymentGeneration"] = deployment_generation
                return seen
    return None


def acknowledged(
    isvc: ObjectView, pool: str, since: str | None, deployment: ObjectView | None
) -> bool:
    """``isvc`` reports it carried out ``pool``'s release of ``since``, and ``deployment`` (as
    cached) is at least the generation it applied."""
    seen = (isvc.get("status") or {}).get("poolDecision") or {}
    if (seen.get("pool"), seen.get("slot"), seen.get("since")) != (pool, SLOT_RELEASED, since):
        return False
    applied = seen.get("deploymentGeneration")
    if applied is None:
        return True  # it had no Deployment then
    if deployment is None:
        return False  # the cache has not seen the Deployment it applied
    return int(deployment["metadata"].get("generation") or 0) >= int(applied)


def slot_server_pool(pools: Iterable[ObjectView], member: str) -> ObjectView | None:
    """The first pool listing ``member`` that serves it from a slot server (``spec.slotServer``):
    its Deployment then stays at 0 and its Service selects that server (docs/modelpool.md, "One
    slot server"); None when no such pool lists it."""
    return next(
        (pool for pool in listing_pools(pools, member) if serves_from_slot_server(pool)), None
    )


def member_slots(pools: Iterable[ObjectView], member: str) -> dict[str, str | None]:
    """The decision of each pool that lists ``member``, by pool name."""
    return {
        str(pool["metadata"]["name"]): member_slot(pool, member)
        for pool in listing_pools(pools, member)
    }


def deployment_replicas(wanted: int, slots: Mapping[str, str | None], current: int | None) -> int:
    """The replicas the member's Deployment may have.

    ``wanted`` is ``spec.replicas`` (absent = 1), ``slots`` the decision of each pool listing the
    member (:func:`member_slots`), ``current`` the Deployment's replicas (``None``: no Deployment
    yet). A grant counts only from a pool that lists the member: a pool it has left decides
    nothing about it.
    """
    if not slots:
        return wanted
    decided = set(slots.values())
    if SLOT_GRANTED in decided:
        return 1
    if SLOT_RELEASED in decided:
        return 0
    return min(1, current or 0)


def withheld_by(slots: Mapping[str, str | None]) -> str | None:
    """The pools that hold this member back (they list it and none grants it), else ``None``."""
    if not slots or SLOT_GRANTED in slots.values():
        return None
    return ", ".join(sorted(slots))
