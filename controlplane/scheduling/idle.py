"""When a resident counts as idle, and when it is due to be given back: a pure rule.

docs/modelpool.md ("Giving an idle slot back") and docs/inferenceservice.md ("Scale to zero"). A
pool with ``spec.scheduling.idleAfter`` gives an idle resident back, and an InferenceService no
pool lists with ``spec.idleAfter`` scales to zero; both judge idleness by this rule, on the demand
every router-proxy replica reports (pooled: one replica's view is never enough).

:func:`judge_idle`
    A member is *quiet* when no report has a request held for it or in flight on it (a report's
    ``active`` also covers the moment after its last request ended: a client looping back to
    back is not gone); in a pool without a budget, a request held for *any* member stops every
    clock too, since the slot's turn is about to pass anyway. Each resident has a clock of its own
    (a pool with a budget gives each back on its own), and the whole has one (no member with a
    request). A clock starts the first time the caller sees the member quiet (on a whole second,
    rounded up, as a status writes it: a reclaim may come a second late, never early), keeps its
    start while it stays quiet, and stops at the first demand. Without ``idleAfter`` there are no
    clocks at all.

    A resident is *due* once its clock has run ``idleAfter`` (never the ``spared`` one: the
    default of a pool that drains back to it). In a pool without a budget, a valid intent
    suspends it: the slot is moving on request already. A due resident is *published* first (the
    caller writes it where every router-proxy replica reads it and closes admission to it: a
    request held for it is demand, which stops its clock and ends the reclaim), and only one that
    was already published when the caller began is *acted on*: every replica has had that write's
    watch event before the drain's ``/slots`` probe.

Pure: it imports nothing of the project (the scheduler's package rule).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True, slots=True)
class Activity:
    """One member's demand summed over every replica's live report."""

    held: int = 0
    active: bool = False

    @property
    def quiet(self) -> bool:
        return self.held == 0 and not self.active


def pooled_activity(entries: Iterable[tuple[str, int, bool]]) -> dict[str, Activity]:
    """Each member's demand over every report's ``(member, held, active)``: held requests
    summed, active if any report says so."""
    pooled: dict[str, Activity] = {}
    for member, held, active in entries:
        seen = pooled.get(member, Activity())
        pooled[member] = Activity(seen.held + held, seen.active or active)
    return pooled


@dataclass(frozen=True, slots=True)
class IdleSettings:
    """``idleAfter`` in seconds (None: never), and the member never given back (``spared``: the
    default of a pool that drains back to it)."""

    after: float | None = None
    spared: str | None = None

    def reclaimable(self, member: str) -> bool:
        return member != self.spared


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """The clocks to write, the residents due (to publish), those acted on now, and in how many
    seconds the next clock falls due (None: none runs)."""

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
    the clocks as last written; ``published``: the members published as last written."""
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
    # Suspended while a request moves an exclusive slot: nothing is due, and no clock is
    # looked at again for it (the intent's own end brings the next reconcile).
    running = {} if requested and not shared else clocks
    left = {
        member: after - (now - since).total_seconds()
        for member, since in running.items()
        if settings.reclaimable(member)
    }
    due = tuple(member for member, wait in left.items() if wait <= 0)
    waits = [wait for wait in left.values() if wait > 0]
    return IdleVerdict(
        pool_since=(pool_since or start) if pool_quiet else None,
        member_since=clocks,
        due=tuple(sorted(due)),
        act=tuple(sorted(m for m in due if m in published)),
        next_due_in=min(waits) if waits else None,
    )


def _whole_second_after(now: datetime) -> datetime:
    """A clock starts on a whole second, as a status writes it, rounded up: a reclaim may come
    up to a second late, never early."""
    whole = now.replace(microsecond=0)
    return whole if whole == now else whole + timedelta(seconds=1)


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
