"""Who is resident in a pool with a budget (``spec.capacity``): pure, beside the plan.

docs/modelpool.md ("Several residents"). An exclusive pool has one resident, the owner once Ready
(:mod:`~controlplane.controllers.modelpool.plan`). A pool with a budget keeps several:

:func:`kept_residents`
    The residents that stay beside the owner while it comes up: every one still granted, less
    those the intent names to leave (the swap's driver chose them,
    :mod:`controlplane.scheduling.budget`). The plan drains every other member through the idle
    gate and grants the owner only when it fits beside what stays and what still holds a share.
:func:`shared_residents`, :func:`budget_status`, :func:`exclusive_budget`
    ``status.residents`` and ``status.budget`` after a reconcile.
:func:`newly_resident`
    Which member a status change made resident: a swap completed (an event, a metric). In a pool
    with a budget ``residentMember`` may move back to a member resident all along; that is none.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from controlplane.api.v1alpha1.modelpool import SLOT_GRANTED, BudgetStatus, ModelPoolStatus
from controlplane.controllers.modelpool.member import MemberState
from controlplane.scheduling.budget import Budget


def kept_residents(
    members: Mapping[str, MemberState],
    residents: Sequence[str],
    owner: str | None,
    evict: Collection[str],
    budget: Budget | None,
) -> tuple[str, ...]:
    """Of a pool with a budget: the residents that stay beside ``owner``. Every resident still
    granted stays, except those the intent asks to leave (``evict``); a member granted but never
    resident (a swap abandoned before it was up) is not kept, so it is drained. Should the granted
    ones (the owner among them once granted) not fit together (the capacity was lowered), those
    granted longest ago leave first; an owner not granted yet waits for room, taking none."""
    if budget is None:
        return ()
    kept = [
        name
        for name in residents
        if name != owner
        and name in members
        and members[name].slot == SLOT_GRANTED
        and name not in evict
    ]
    kept.sort(key=lambda name: members[name].since or "", reverse=True)
    granted_owner = [owner] if owner is not None and members[owner].slot == SLOT_GRANTED else []
    while kept and budget.used([*kept, *granted_owner]) > budget.capacity:
        kept.pop()
    return tuple(sorted(kept))


def shared_residents(
    previous: Sequence[str],
    owner: str | None,
    members: Mapping[str, MemberState],
    slots: Mapping[str, str | None],
) -> list[str]:
    """Of a pool with a budget: who is resident after this reconcile. A member stays resident
    while its grant stands (a crash does not take the title, as an exclusive pool's resident keeps
    it); the owner joins once it is Ready."""
    residents = [m for m in previous if m in members and slots.get(m) == SLOT_GRANTED]
    if owner is not None and owner not in residents and members[owner].ready:
        residents.append(owner)
    return sorted(residents)


def exclusive_budget(slots: Mapping[str, str | None]) -> BudgetStatus | None:
    """An exclusive pool shows no budget, except while a capacity just removed still has several
    members granted (the schema allows several grants only beside a budget): one member's
    capacity, and the grants, until the drain leaves one."""
    granted = sum(1 for slot in slots.values() if slot == SLOT_GRANTED)
    return BudgetStatus(capacity="1", used=str(granted)) if granted > 1 else None


def budget_status(
    budget: Budget, members: Mapping[str, MemberState], slots: Mapping[str, str | None]
) -> BudgetStatus:
    """The capacity, and what the members that hold part of it (granted, or with a pod or a
    Deployment not yet at 0) use together."""
    holding = [
        name
        for name, state in members.items()
        if slots.get(name) == SLOT_GRANTED or state.pods > 0 or not state.deployment_drained
    ]
    return BudgetStatus(
        capacity=budget.describe(budget.capacity), used=budget.describe(budget.used(holding))
    )


def newly_resident(before: ModelPoolStatus, after: ModelPoolStatus) -> str | None:
    """The member a status change made resident (a swap completed), or None. A pool with a
    budget may also move ``residentMember`` back to a member that was resident all along (the
    latest one left): that completes nothing."""
    resident = after.resident_member
    if resident is None or resident == before.resident_member or resident in before.residents:
        return None
    return resident
