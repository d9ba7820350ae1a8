"""The slot grant: how the pool stays the only authority on its members' replicas.

See docs/modelpool.md, "grant".

``spec.replicas`` alone cannot say "run": it is absent (= 1) on a freshly applied member, so an
InferenceService controller that simply copied it would start every member of a pool applied
together, before the pool has chosen. So the pool controller, in the same optimistic write that
sets its owner's ``spec.replicas: 1``, annotates the owner with
``inference.modelpool.dev/granted-by: <pool>`` (:data:`GRANTED_BY_ANNOTATION`), and removes the
annotation in the same write that sets a member to 0.

The InferenceService controller then computes its Deployment's replicas with
:func:`deployment_replicas`:

* not listed by any pool: ``spec.replicas``, as for any standalone server;
* listed and granted by a pool that lists it: ``spec.replicas``;
* listed and not granted: never more than the Deployment already has. Lowering is always allowed;
  raising needs the grant. A member that was running when a pool came to list it keeps running
  until the pool drains it through the idle gate like any non-owner: it is not killed unprobed.

Pure functions of objects (no I/O), shared by both controllers so they read the grant alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from controlplane.runtime.objects import ObjectView

#: Names the pool that granted this InferenceService its slot; absent: no grant.
GRANTED_BY_ANNOTATION: Final = "inference.modelpool.dev/granted-by"


def granted_by(isvc: ObjectView) -> str | None:
    """The pool named by the grant annotation, if any."""
    annotations = (isvc.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(GRANTED_BY_ANNOTATION)
    return str(value) if value else None


def set_grant(isvc: dict[str, Any], pool: str | None) -> None:
    """Grant the slot of ``pool`` on ``isvc`` in place (``None`` revokes), for the write that also
    sets its replicas: grant and replicas move together or not at all."""
    annotations = isvc.setdefault("metadata", {}).setdefault("annotations", {})
    if pool is None:
        annotations.pop(GRANTED_BY_ANNOTATION, None)
    else:
        annotations[GRANTED_BY_ANNOTATION] = pool


def lists_member(pool: ObjectView, member: str) -> bool:
    refs = (pool.get("spec") or {}).get("members") or ()
    return any((ref.get("inferenceServiceRef") or {}).get("name") == member for ref in refs)


def pools_listing(pools: Iterable[ObjectView], member: str) -> list[str]:
    """Names of the pools (of one namespace) that list ``member``, sorted; deleted ones excluded,
    since deleting a pool hands its members back to their own ``spec.replicas``."""
    return sorted(
        str(pool["metadata"]["name"])
        for pool in pools
        if not pool["metadata"].get("deletionTimestamp") and lists_member(pool, member)
    )


def deployment_replicas(
    wanted: int, pools: Iterable[str], grant: str | None, current: int | None
) -> int:
    """The replicas the member's Deployment may have.

    ``wanted`` is ``spec.replicas`` (absent = 1), ``pools`` the pools listing the InferenceService,
    ``grant`` the pool its annotation names, ``current`` the Deployment's replicas (``None``: no
    Deployment yet). A grant counts only from a pool that lists it: a grant left behind by a pool
    it has left, or forged by hand for another pool, starts nothing.
    """
    pools = list(pools)
    if not pools or grant in pools:
        return wanted
    return min(wanted, current or 0)


def withheld_by(wanted: int, pools: Iterable[str], grant: str | None) -> str | None:
    """The pool that holds this member back (it asks to run but has no grant), else ``None``."""
    pools = list(pools)
    if wanted == 0 or not pools or grant in pools:
        return None
    return ", ".join(pools)
