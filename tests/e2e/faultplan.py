"""The fault harness's plan: which fault, at which point, and the table of what each run saw.

No I/O: the scenario (:mod:`tests.e2e.faultscenario`) runs one :class:`Injection` at a time and
reports a :class:`RunResult`; this module says which injections a plan holds, how the proxies
ask one run's injection (:class:`InjectedFault`), and prints the table (docs/faults.md).

**Write points come from a run, not from a list.** A fault-free run of the scenario records every
write each process made during the swap (:class:`~tests.e2e.faultproxy.Write`);
:func:`write_points` turns that trace into points named by the write's method, resource and the
member's role in the scenario (``a`` the resident, ``b`` the target), numbered when one kind of
write happens more than once (``PUT modelpools/pool/status #2``). Writes that are not the swap's
(events, the operator's own leader-election renewals) are left out: crashing after one is a
crash at a random moment, which the other points already cover.

**A point may also be named by what its write set** (:func:`marked_point`):
``PUT modelpools/pool/status [resident=b]`` is the first write of that kind whose summary has
``resident=b``, whatever its number. The pool's status is written more often than the swap's steps
(a condition or the waiting demand changes between two steps, or not, by timing), so "the grant"
or "the resident" is not always the same ``#N``; the bounded plan names such steps this way.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from tests.e2e.faultproxy import KILL, STOP, Action, Fault, Object, Write

#: The processes a fault can be injected into.
OPERATOR: Final = "operator"
ROUTER: Final = "router-proxy"

#: The patterns (docs/faults.md has what each does and why).
CRASH_AFTER_WRITE: Final = "crash after write"
PAUSED_LEADER: Final = "paused leader"
HELD_EVENTS: Final = "held-back events"
STALE_VIEW: Final = "stale view"

#: The scripted swap's timing: the pool's budget, how long the client keeps asking, and how long
#: the oracle waits for the pool to settle.
SWAP_BUDGET_SECONDS: Final = 40
CLIENT_DEADLINE_SECONDS: Final = 90.0
SETTLE_SECONDS: Final = 45.0

#: The fault-free run's pattern.
NO_FAULT: Final = "none"

#: Resources whose writes are not the swap's own.
NOT_SWAP_WRITES: Final = ("events", "selfsubjectaccessreviews", "selfsubjectrulesreviews")


@dataclass(frozen=True)
class WritePoint:
    """The ``ordinal``-th write of ``kind`` by ``process`` during the swap."""

    process: str
    kind: str  # "PATCH deployments/a"
    ordinal: int  # 1-based
    example: str = field(default="", compare=False)  # what the reference run's write set
    #: A marked point: the first write of ``kind`` whose summary has this token (``resident=b``),
    #: instead of the ``ordinal``-th (which is then only the reference run's number of it).
    sets: str = ""

    @property
    def name(self) -> str:
        if self.sets:
            return f"{self.kind} [{self.sets}]"
        return self.kind if self.ordinal == 1 else f"{self.kind} #{self.ordinal}"


def summary_tokens(summary: str) -> set[str]:
    """``resident=a pending=b a=Released,b=Granted`` as its tokens (``a=Released``, ...)."""
    return {token for token in re.split(r"[ ,]", summary) if token}


#: A marked point's name: ``KIND [TOKEN]``.
_MARKED = re.compile(r"^(?P<kind>.+) \[(?P<sets>[^\]]+)\]$")


def marked_point(process: str, name: str, points: Sequence[WritePoint]) -> WritePoint | None:
    """The point ``name`` (``KIND [TOKEN]``) of ``process``: the first of the reference run's
    ``points`` of that kind whose write set TOKEN; None if ``name`` is not marked or no write
    of the reference set it."""
    marked = _MARKED.match(name)
    if marked is None:
        return None
    kind, sets = marked["kind"], marked["sets"]
    return next(
        (
            WritePoint(process, kind, p.ordinal, p.example, sets)
            for p in points
            if p.process == process and p.kind == kind and sets in summary_tokens(p.example)
        ),
        None,
    )


def role_name(name: str, roles: dict[str, str]) -> str:
    """An object's name with the run's names replaced by their roles (``f3-a`` to ``a``)."""
    for real, role in sorted(roles.items(), key=lambda item: -len(item[0])):
        name = re.sub(rf"\b{re.escape(real)}\b", role, name)
    return name


#: A replica's demand report is named after its identity's hash (``...-6f0401e027``).
_REPLICA_HASH = re.compile(r"-[0-9a-f]{10}$")


def write_kind(write: Write, roles: dict[str, str]) -> str:
    """``PATCH deployments/a``, ``PUT modelpools/pool/status``: the write with roles for names."""
    resource, _, sub = write.resource.partition("/")
    name = _REPLICA_HASH.sub("-REPLICA", role_name(write.name, roles))
    path = "/".join(part for part in (resource, name, sub) if part)
    return f"{write.method} {path}"


def is_swap_write(write: Write, operator_lease: str | None) -> bool:
    """A write of the swap's: not an event or a review, not the leader election's renewal."""
    if write.resource.split("/")[0] in NOT_SWAP_WRITES:
        return False
    return not (operator_lease and write.resource == "leases" and write.name == operator_lease)


def write_points(
    process: str, writes: Iterable[Write], roles: dict[str, str], operator_lease: str | None
) -> list[WritePoint]:
    """The points of a reference run's trace, in the order they happened."""
    seen: dict[str, int] = {}
    points: list[WritePoint] = []
    for write in writes:
        if not write.succeeded or not is_swap_write(write, operator_lease):
            continue
        kind = write_kind(write, roles)
        seen[kind] = seen.get(kind, 0) + 1
        points.append(WritePoint(process, kind, seen[kind], role_name(write.summary, roles)))
    return points


class PointCounter:
    """Counts a live run's writes the way :func:`write_points` named them, to find the point."""

    def __init__(self, roles: dict[str, str], operator_lease: str | None) -> None:
        self.roles, self.operator_lease = roles, operator_lease
        self.seen: dict[str, int] = {}

    def matches(self, write: Write, point: WritePoint) -> bool:
        if not write.succeeded or not is_swap_write(write, self.operator_lease):
            return False
        kind = write_kind(write, self.roles)
        self.seen[kind] = self.seen.get(kind, 0) + 1
        if point.sets:
            if kind != point.kind:
                return False
            if point.sets not in summary_tokens(role_name(write.summary, self.roles)):
                return False
            self.seen[point.name] = self.seen.get(point.name, 0) + 1
            return self.seen[point.name] == 1
        return kind == point.kind and self.seen[kind] == point.ordinal


@dataclass(frozen=True)
class Injection:
    """One run's fault: a pattern into a process, at a point (a write, or an event kind)."""

    pattern: str
    process: str
    point: str
    write: WritePoint | None = None
    #: For held-back events and stale views: which resource's events, which event type
    #: ("" for any), and for how long.
    resource: str = ""
    event_type: str = ""
    hold_seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.pattern} | {self.process} | {self.point}"


@dataclass
class RunResult:
    injection: Injection
    injected: bool  # the point was reached and the fault happened
    failures: list[str]
    seen: str  # one line: what the oracle saw
    seconds: float

    @property
    def verdict(self) -> str:
        if self.failures:
            return "FAILED"
        return "ok" if self.injected else "not reached"


def event_injections(hold: float) -> list[Injection]:
    """Held-back events and stale views: the event kinds a swap waits on, into each side."""
    return [
        Injection(HELD_EVENTS, OPERATOR, "EndpointSlice events", resource="endpointslices",
                  hold_seconds=hold),
        Injection(HELD_EVENTS, OPERATOR, "Pod deletions", resource="pods",
                  event_type="DELETED", hold_seconds=hold),
        Injection(HELD_EVENTS, OPERATOR, "Lease updates", resource="leases",
                  event_type="MODIFIED", hold_seconds=hold),
        Injection(HELD_EVENTS, ROUTER, "EndpointSlice events", resource="endpointslices",
                  hold_seconds=hold),
        Injection(HELD_EVENTS, ROUTER, "Lease updates", resource="leases",
                  event_type="MODIFIED", hold_seconds=hold),
        Injection(STALE_VIEW, OPERATOR, "every watch", resource="*", hold_seconds=hold),
        Injection(STALE_VIEW, ROUTER, "every watch", resource="*", hold_seconds=hold),
    ]  # fmt: skip


def crash_injections(points: Sequence[WritePoint]) -> list[Injection]:
    return [Injection(CRASH_AFTER_WRITE, p.process, p.name, write=p) for p in points]


def pause_injections(points: Sequence[WritePoint]) -> list[Injection]:
    """The paused leader: the operator's points only (the proxies are not leader-elected)."""
    return [
        Injection(PAUSED_LEADER, p.process, p.name, write=p) for p in points
        if p.process == OPERATOR
    ]  # fmt: skip


def table(results: Sequence[RunResult], defects_found: int | None = None) -> str:
    """pattern, process, injection point, runs, failures, what the oracle saw; one row each."""
    rows: dict[tuple[str, str, str], list[RunResult]] = {}
    for result in results:
        injection = result.injection
        rows.setdefault((injection.pattern, injection.process, injection.point), []).append(result)
    lines = [
        "| pattern | process | injection point | runs | failures | oracle saw |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (pattern, process, point), runs in rows.items():
        failed = [r for r in runs if r.failures]
        reached = [r for r in runs if r.injected]
        seen = "; ".join(dict.fromkeys(r.seen for r in (failed or runs)))
        if not reached and pattern != NO_FAULT:
            seen = f"not reached: {seen}"
        lines.append(
            f"| {pattern} | {process} | `{point}` | {len(runs)} | {len(failed)} | {seen} |"
        )
    total_failed = sum(1 for r in results if r.failures)
    lines.append("")
    lines.append(
        f"{len(results)} runs, {sum(1 for r in results if r.injected)} with the fault injected, "
        f"{total_failed} failed"
        + (f"; {defects_found} real defects found before the fixes" if defects_found else "")
    )
    return "\n".join(lines)


class InjectedFault(Fault):
    """The run's :class:`Injection` as the proxies ask it: once, at its point or event."""

    def __init__(self, injection: Injection | None, roles: dict[str, str], lease: str) -> None:
        self.injection = injection
        self.counter = PointCounter(roles, lease)
        self.fired = False
        self.fired_at = 0.0
        self.window_end = 0.0
        self.armed_at = 0.0

    def after_write(self, write: Write) -> Action | None:
        injection = self.injection
        if injection is None or injection.write is None or self.fired:
            return None
        if not self.counter.matches(write, injection.write):
            return None
        self.fired, self.fired_at = True, time.monotonic()
        return STOP if injection.pattern == PAUSED_LEADER else KILL

    def hold(self, resource: str, event_type: str, obj: Object) -> float:
        injection = self.injection
        if injection is None or injection.write is not None:
            return 0.0
        now = time.monotonic()
        if injection.pattern == STALE_VIEW:
            if not self.fired:
                self.fired, self.fired_at = True, now
                self.window_end = now + injection.hold_seconds
            return max(0.0, self.window_end - now)
        if resource != injection.resource:
            return 0.0
        if injection.event_type and event_type != injection.event_type:
            return 0.0
        if not self.fired:
            self.fired, self.fired_at = True, now
            self.window_end = now + injection.hold_seconds
        return max(0.0, self.window_end - now)
