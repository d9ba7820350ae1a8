"""Giving an idle slot back: when a resident counts as idle, and what its reclaim changes. Pure.

docs/modelpool.md ("Giving an idle slot back"). A pool with ``spec.scheduling.idleAfter`` gives
its slot back once nobody uses it: a resident that has had no request in flight and none held for
it that long is drained, through the same ``/slots`` gate as a swap, back to ``spec.default``
(``idleAction: Default``) or to nothing at all (``Release``).

:func:`judge_idle`
    The clocks and the verdict. It reads the demand every router-proxy replica reports (pooled:
    one replica's view is not enough, :mod:`controlplane.api.v1alpha1.demand`), never a replica's
    own. A member is *quiet* when no report has a request held for it or in flight on it (a
    report's ``active`` also covers the moment after its last request ended: a client looping
    back to back is not gone); in a pool without a budget, a request held for *any* member stops
    every clock too, since the slot's turn is about to pass anyway. Each resident has a clock of
    its own (``status.members[].idleSince``: a pool with a budget reclaims each on its own), and
    the pool one for the whole (``status.idleSince``, what ``kubectl get -o wide`` shows). A
    clock starts the first time the controller sees the member quiet, keeps its start while it
    stays quiet, and stops at the first demand. Without ``idleAfter`` there are no clocks at all:
    the feature costs no status write.

    A resident is *due* once its clock has run ``idleAfter`` (the default of a ``Default`` pool
    never is: it is where the slot goes back to). In a pool without a budget, a valid intent
    suspends the reclaim: the slot is moving on request already. A due resident is written into
    ``status.reclaiming`` first, which closes admission to it on every replica (new requests are
    held: demand, which stops its clock and ends the reclaim), and only a resident that was
    already there when the reconcile began is *acted on*: given up by the owner and not kept, so
    the plan probes and releases it. Every replica has had that status write's watch event to
    close admission before the ``/slots`` probe that may release it.

:func:`reclaimed_owner`
    The owner after the reclaim: a resident acted on gives way to the default (``Default``) or to
    nobody (``Release``); a pool that released its slot (phase ``Idle``) stays cold, rather than
    warming its default (with ``Release``), until a request names a member.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from controlplane.api.v1alpha1.modelpool import (
    IDLE_ACTION_DEFAULT,
    IDLE_ACTION_RELEASE,
    PHASE_IDLE,
    parse_duration,
)
from controlplane.controllers.modelpool.intent import Owner, OwnerReason
from controlplane.runtime.objects import ObjectView


@dataclass(frozen=True, slots=True)
class Activity:
    """One member's demand summed over every replica's live report."""

    held: int = 0
    active: bool = False

    @property
    def quiet(self) -> bool:
        return self.held == 0 and not self.active


@dataclass(frozen=True, slots=True)
class IdleSettings:
    """``spec.scheduling.idleAfter`` in seconds (None: never), the action it leads to, and the
    pool's default."""

    after: float | None = None
    action: str = IDLE_ACTION_RELEASE
    default: str | None = None

    def reclaimable(self, member: str) -> bool:
        """Whether ``member`` can be given back: the default of a ``Default`` pool is where the
        slot returns to, never reclaimed itself."""
        return not (self.action == IDLE_ACTION_DEFAULT and member == self.default)


def idle_settings(spec: ObjectView) -> IdleSettings:
    """The pool's idle settings, read from its spec: an unset ``idleAction`` is ``Default``
    when the pool has a default, else ``Release``."""
    scheduling = spec.get("scheduling") or {}
    default = spec.get("default") or None
    text = scheduling.get("idleAfter")
    after = parse_duration(text, 0.0) if text else None
    action = scheduling.get("idleAction") or (
        IDLE_ACTION_DEFAULT if default else IDLE_ACTION_RELEASE
    )
    return IdleSettings(after or None, str(action), str(default) if default else None)


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """The clocks to write, the residents due (``status.reclaiming``), those acted on now, and
    in how many seconds the next clock falls due (None: none runs)."""

    pool_since: datetime | None = None
    member_since: Mapping[str, datetime] = field(default_factory=dict)
    due: tuple[str, ...] = ()
    act: tuple[str, ...] = ()
    next_due_in: float | None = None


def judge_idle(
    activity: Mapping[str, Activity],
    residents: Sequence[str],
    settings: IdleSettings,
    *,
    shared: bool,
    requested: bool,
    pool_since: datetime | None,
    member_since: Mapping[str, datetime | None],
    published: Collection[str],
    now: datetime,
) -> IdleVerdict:
    """The verdict for this snapshot (rules in the module docstring). ``activity``: pooled demand
    per member (members absent are quiet); ``residents``: who holds the slot now; ``shared``: the
    pool has a budget; ``requested``: a valid intent stands; ``pool_since``, ``member_since``:
    the clocks as last written; ``published``: ``status.reclaiming`` as last written."""
    if settings.after is None:
        return IdleVerdict()
    after = settings.after
    idle = Activity()
    held_anywhere = any(a.held > 0 for a in activity.values())
    pool_quiet = all(a.quiet for a in activity.values())
    start = _whole_second_after(now)
    clocks: dict[str, datetime] = {}
    for member in residents:
        quiet = activity.get(member, idle).quiet and (shared or not held_anywhere)
        if quiet:
            clocks[member] = member_since.get(member) or start
    due = tuple(
        member
        for member, since in clocks.items()
        if (now - since).total_seconds() >= after and settings.reclaimable(member)
    )
    if requested and not shared:
        due = ()
    waits = [
        after - (now - since).total_seconds()
        for member, since in clocks.items()
        if member not in due and settings.reclaimable(member)
    ]
    return IdleVerdict(
        pool_since=(pool_since or start) if pool_quiet else None,
        member_since=clocks,
        due=tuple(sorted(due)),
        act=tuple(sorted(m for m in due if m in published)),
        next_due_in=max(0.0, min(waits)) if waits else None,
    )


def _whole_second_after(now: datetime) -> datetime:
    """A clock starts on a whole second, as the status writes it, rounded up: a reclaim may
    come up to a second late, never early."""
    whole = now.replace(microsecond=0)
    return whole if whole == now else whole + timedelta(seconds=1)


def reclaimed_owner(
    owner: Owner, act: Collection[str], settings: IdleSettings, previous_phase: str | None
) -> Owner:
    """The owner once the reclaim is applied (rules in the module docstring)."""
    release = settings.action == IDLE_ACTION_RELEASE
    if owner.reason is OwnerReason.RESIDENT and owner.name in act:
        target = None if release else settings.default
        return Owner(target, OwnerReason.RECLAIMED, ignored=owner.ignored)
    stays_cold = owner.name is None or (owner.reason is OwnerReason.DEFAULT and release)
    if previous_phase == PHASE_IDLE and owner.reason is not OwnerReason.REQUESTED and stays_cold:
        return Owner(None, OwnerReason.RECLAIMED, ignored=owner.ignored)
    return owner


def parse_stamp(stamp: str | None) -> datetime | None:
    """A ``date-time`` as written in the status (``...Z``, seconds), or None."""
    if not stamp:
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def stamp(moment: datetime | None) -> str | None:
    """``moment`` as the status writes it (RFC 3339, to the second)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None
