"""The pure part of the kind-tier switch benchmark (:mod:`bench.kind_switch_bench`): the
timestamps read from ``kubectl logs --timestamps`` and llama-server's own lines, the marks of one
switch of each mode, phase by phase, and the report with its one readable last line. No I/O but
the report's printing, so each rule is read (and tested) apart from the cluster it measures.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from controlplane.api.v1alpha1.activation import pool_lease_name
from controlplane.controllers.inferenceservice.desired import ISVC_LABEL

#: The target of issue 22: our switch above the model's own load, median.
OVERHEAD_TARGET_MS: Final = 300.0
#: The target of issue 22: the new member seen ready after its /health first answers 200.
READINESS_TARGET_MS: Final = 100.0


def cri_time(stamp: str) -> float:
    """An RFC 3339 timestamp of ``kubectl logs --timestamps`` (nanoseconds) as epoch seconds."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    base = datetime.fromisoformat(whole + "+00:00").timestamp()
    return base + float(f"0.{fraction or '0'}")


def timestamped(text: str) -> list[tuple[float, str]]:
    """``kubectl logs --timestamps`` output as (epoch seconds, line)."""
    found: list[tuple[float, str]] = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            found.append((cri_time(stamp), rest))
        except ValueError:
            continue
    return found


# --- the server's log: start, healthy -----------------------------------------------------------

#: llama-server's own stamp on each line: minutes.seconds.milliseconds.microseconds since start.
SERVER_STAMP: Final = re.compile(r"(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")
#: The line llama-server logs as it turns /health 200 (checked against a 1 ms /health poll on
#: this build: within 5-50 ms on a loaded 2-core machine, the poller's own delay included).
LOADED_LINE: Final = "llama_server: model loaded"


def server_clock(line: str) -> float | None:
    match = SERVER_STAMP.search(line)
    if match is None:
        return None
    minutes, seconds, ms, us = (int(g) for g in match.groups())
    return minutes * 60 + seconds + ms / 1e3 + us / 1e6


def server_times(lines: list[tuple[float, str]]) -> tuple[float, float] | None:
    """A llama-server's start (its first line's time less its own stamp: the process's start)
    and the time it logged the model loaded; None when either is missing."""
    start = loaded = None
    for at, line in lines:
        own = server_clock(line)
        if start is None and own is not None:
            start = at - own
        if LOADED_LINE in line:
            loaded = at
            break
    return (start, loaded) if start is not None and loaded is not None else None


# --- one switch, phase by phase -----------------------------------------------------------------

#: The phases of a switch, in order; each is the time from the previous mark to this one. The
#: columns: the phase, then its mark for ours (member pods), router mode and ours with a slot
#: server (one llama-server in router mode that the pool loads and unloads models in).
PHASES: Final = (
    ("hold, intent", "request sent → pool's Lease claimed", "request → queued for its model",
     "request sent → pool's Lease claimed"),
    ("drain wait", "→ old pod Terminating (idle gate, scale to 0)", "→ idle child evicted",
     "→ resident released (idle gate on `/slots?model=`, status written)"),
    ("old pod gone", "→ old pod deleted", "→ old child exited",
     "→ old child exited (`POST /models/unload`)"),
    ("new pod created", "→ new pod in the watch", "—",
     "→ target granted (the unload seen on `/models`)"),
    ("new pod scheduled", "→ new pod bound to the node", "→ new child spawned",
     "→ new child spawned (`POST /models/load`)"),
    ("container started", "→ llama-server process started", "→ child process started",
     "→ child process started"),
    ("server healthy (the load)", "→ `model loaded` (/health 200)", "→ `model loaded`",
     "→ `model loaded`"),
    ("readiness seen", "→ proxy's direct probe / EndpointSlice ready", "→ router proxies to it",
     "→ the server proxies our request to it"),
    ("first token", "→ first token at the client", "→ first token at the client",
     "→ first token at the client"),
    ("answer complete", "→ last token at the client", "→ last token at the client",
     "→ last token at the client"),
)  # fmt: skip
#: Where the marks of the server's start, its health and its readiness seen are in PHASES.
STARTED, HEALTHY, SEEN = 5, 6, 7


@dataclass
class Switch:
    """One switch: the client's request and the marks of its phases (epoch seconds; None where a
    mode has no such step)."""

    record: dict[str, Any]
    marks: list[float | None]
    readiness_source: str = ""

    @property
    def total(self) -> float:
        return float(self.record["done"]) - float(self.record["sent"])

    def phase(self, index: int) -> float | None:
        """The time of phase ``index``: from the last mark before it to its own."""
        mark = self.marks[index]
        if mark is None:
            return None
        before = [m for m in self.marks[:index] if m is not None]
        return mark - (before[-1] if before else float(self.record["sent"]))

    @property
    def load(self) -> float:
        started, healthy = self.marks[STARTED], self.marks[HEALTHY]
        assert started is not None
        assert healthy is not None
        return healthy - started

    @property
    def readiness(self) -> float:
        ready, healthy = self.marks[SEEN], self.marks[HEALTHY]
        assert ready is not None
        assert healthy is not None
        return ready - healthy


@dataclass
class Run:
    """A mode's run: the first request, each switch, each request after a switch."""

    first: dict[str, Any]
    switches: list[Switch]
    nexts: list[dict[str, Any]] = field(default_factory=list)


def in_window(at: float, record: dict[str, Any]) -> bool:
    return float(record["sent"]) <= at <= float(record["done"])


def first_event(
    events: list[tuple[float, str, dict[str, Any]]],
    pod: str,
    test: Callable[[str, dict[str, Any]], bool],
) -> float | None:
    for at, kind, obj in events:
        if obj.get("metadata", {}).get("name") == pod and test(kind, obj):
            return at
    return None


def running(_kind: str, pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return any("running" in (s.get("state") or {}) for s in statuses)


def ours_switch(
    record: dict[str, Any],
    pool: str,
    pods: list[tuple[float, str, dict[str, Any]]],
    slices: list[tuple[float, str, dict[str, Any]]],
    member_logs: dict[str, list[tuple[float, str]]],
    probe_lines: list[tuple[float, str]],
    leases: list[tuple[float, str, dict[str, Any]]],
) -> Switch:
    """The marks of one switch of ours, from the watches and the logs."""
    target = record["model"]

    def label(obj: dict[str, Any]) -> str | None:
        return (obj.get("metadata", {}).get("labels") or {}).get(ISVC_LABEL)

    terminating = [
        (at, obj["metadata"]["name"])
        for at, kind, obj in pods
        if label(obj) not in (None, target)
        and obj["metadata"].get("deletionTimestamp")
        and in_window(at, record)
    ]
    created = [
        (at, obj["metadata"]["name"])
        for at, kind, obj in pods
        if kind == "ADDED" and label(obj) == target and in_window(at, record)
    ]
    if not terminating or not created:
        raise SystemExit(f"switch {record['index']} to {target}: the watch saw no old pod "
                         f"terminating or no new pod in the request's time")  # fmt: skip
    drained, old = terminating[0]
    claimed = next(
        (
            at
            for at, _kind, obj in leases
            if obj.get("metadata", {}).get("name") == pool_lease_name(pool)
            and (obj.get("spec") or {}).get("holderIdentity")
            and in_window(at, record)
        ),
        None,
    )
    new_at, new = created[0]
    gone = first_event(pods, old, lambda kind, _obj: kind == "DELETED")
    bound = first_event(pods, new, lambda _k, obj: bool((obj.get("spec") or {}).get("nodeName")))
    times = server_times(member_logs.get(new, []))
    if times is None:
        raise SystemExit(f"switch {record['index']}: no start or `{LOADED_LINE}` in {new}'s log")
    started, healthy = times
    probed = [at for at, member in probe_lines if member == target and in_window(at, record)]
    source = "proxy's direct probe"
    seen: float | None = probed[0] if probed else None
    if seen is None:
        source = "EndpointSlice"
        for at, _kind, obj in slices:
            for endpoint in obj.get("endpoints") or ():
                ref = (endpoint.get("targetRef") or {}).get("name")
                if ref == new and (endpoint.get("conditions") or {}).get("ready"):
                    seen = at
                    break
            if seen is not None:
                break
    marks: list[float | None] = [claimed, drained, gone, new_at, bound, started, healthy, seen,
                                 float(record["first_token"]), float(record["done"])]  # fmt: skip
    if any(m is None for m in marks):
        raise SystemExit(f"switch {record['index']}: a mark is missing: {marks}")
    return Switch(record, marks, source)


#: Router mode's own lines (the parent's; a child's come prefixed with ``[PORT]``).
QUEUED: Final = re.compile(r"request for name=(\S+) queued")
EVICTED: Final = re.compile(r"evicting idle LRU name=(\S+)")
EXITED: Final = re.compile(r"run: instance name=(\S+) exited")
SPAWNED: Final = re.compile(r"spawning server instance with name=(\S+) on port (\d+)")
PROXYING: Final = re.compile(r"proxying request to model (\S+) on port (\d+)")
CHILD: Final = re.compile(r"^\[(\d+)\] (.*)$")


def _first(
    window: list[tuple[float, str]],
    pattern: re.Pattern[str],
    test: Callable[[re.Match[str]], bool],
) -> float | None:
    for at, line in window:
        match = pattern.search(line)
        if match is not None and test(match):
            return at
    return None


def _child_marks(
    window: list[tuple[float, str]], target: str
) -> tuple[float | None, float | None, float | None, float | None]:
    """In a router-mode server's log: the target's child spawned, its process's start, its
    ``model loaded`` line (the child's lines come prefixed with its port), and the router's first
    request proxied to it; None for each not found."""
    port = ""
    spawned = None
    for at, line in window:
        match = SPAWNED.search(line)
        if match is not None and match.group(1) == target:
            spawned, port = at, match.group(2)
            break
    child = [
        (at, match.group(2))
        for at, line in window
        if (match := CHILD.match(line)) is not None and match.group(1) == port
    ]
    times = server_times(child)
    proxied = _first(window, PROXYING, lambda m: m.group(1) == target and m.group(2) == port)
    started, healthy = times if times is not None else (None, None)
    return spawned, started, healthy, proxied


def router_mode_switch(record: dict[str, Any], lines: list[tuple[float, str]]) -> Switch:
    """The marks of one switch in router mode, from its pod's log."""
    window = [(at, line) for at, line in lines if in_window(at, record)]
    target = record["model"]
    queued = _first(window, QUEUED, lambda m: m.group(1) == target)
    evicted = _first(window, EVICTED, lambda m: m.group(1) != target)
    exited = _first(window, EXITED, lambda m: m.group(1) != target)
    spawned, started, healthy, proxied = _child_marks(window, target)
    if None in (queued, evicted, exited, spawned, started, healthy, proxied):
        raise SystemExit(f"router mode, switch {record['index']}: its log lacks a step "
                         f"{[evicted, exited, spawned, started, healthy, proxied]}")  # fmt: skip
    marks: list[float | None] = [queued, evicted, exited, None, spawned, started, healthy, proxied,
                                 float(record["first_token"]), float(record["done"])]  # fmt: skip
    return Switch(record, marks, "its proxying line")


#: The pool controller's lines (``NAMESPACE/POOL: ...``) as a decision is written: the resident
#: released once its idle gate passed, and the target granted once nothing else is loaded. The
#: pool's key is put in front (:func:`decision_patterns`): in a JSON log the message is quoted.
RELEASED: Final = r": (\S+) released: drained"
GRANTED: Final = r": (\S+) granted the slot"


def decision_patterns(pool_key: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The released and granted lines of the pool ``pool_key`` (``NAMESPACE/POOL``)."""
    key = re.escape(pool_key)
    return re.compile(key + RELEASED), re.compile(key + GRANTED)


def slot_server_switch(
    record: dict[str, Any],
    pool_key: str,
    leases: list[tuple[float, str, dict[str, Any]]],
    operator_lines: list[tuple[float, str]],
    server_lines: list[tuple[float, str]],
) -> Switch:
    """The marks of one switch of ours with a slot server: the pool's Lease claimed (the watch),
    the resident released and the target granted (the operator's log, ``pool_key`` being
    ``NAMESPACE/POOL``), then the old child's exit, the new child's spawn, start, load and the
    request proxied to it (the slot server's own log, llama.cpp's router mode)."""
    target = record["model"]
    pool = pool_key.rsplit("/", 1)[-1]
    claimed = next(
        (
            at
            for at, _kind, obj in leases
            if obj.get("metadata", {}).get("name") == pool_lease_name(pool)
            and (obj.get("spec") or {}).get("holderIdentity")
            and in_window(at, record)
        ),
        None,
    )
    decisions = [(at, line) for at, line in operator_lines if in_window(at, record)]
    release_line, grant_line = decision_patterns(pool_key)
    released = _first(decisions, release_line, lambda m: m.group(1) != target)
    granted = _first(decisions, grant_line, lambda m: m.group(1) == target)
    window = [(at, line) for at, line in server_lines if in_window(at, record)]
    exited = _first(window, EXITED, lambda m: m.group(1) != target)
    spawned, started, healthy, proxied = _child_marks(window, target)
    client = [float(record["first_token"]), float(record["done"])]
    marks: list[float | None] = [claimed, released, exited, granted, spawned, started, healthy,
                                 proxied, *client]  # fmt: skip
    if any(m is None for m in marks):
        raise SystemExit(f"slot server, switch {record['index']} to {target}: a mark is missing "
                         f"(Lease, released, exited, granted, spawned, started, loaded, proxied, "
                         f"first token, done): {marks}")  # fmt: skip
    return Switch(record, marks, "its proxying line")


# --- the report ---------------------------------------------------------------------------------


def _ms(values: list[float]) -> str:
    if not values:
        return "—"
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.0f} ({min(ms):.0f} to {max(ms):.0f})"


def median_ms(values: Iterator[float] | list[float]) -> float:
    return statistics.median(list(values)) * 1000


def report(ours: Run, router_mode: Run, slot: Run | None = None) -> str:
    """The table (with ``slot``, a column for ours with a slot server beside the others), the
    targets, then the final line (returned too). The slot server's own line comes before the
    final one, so a script reading the last line reads what it always did."""
    runs = {"ours": ours, "router mode": router_mode}
    if slot is not None:
        runs["slot server"] = slot
    columns = list(runs.values())
    print(f"\n{len(ours.switches)} switches per mode; ms, median (min to max); each phase is the "
          "time from the previous mark to its own")  # fmt: skip
    head = "| phase | ours: mark | ours | router mode: mark | router mode |"
    rule = "|---|---|---|---|---|"
    if slot is not None:
        head += " slot server: mark | slot server |"
        rule += "---|---|"
    print(head)
    print(rule)
    for index, (label, *marks) in enumerate(PHASES):
        cells = []
        for run in columns:
            values = [p for s in run.switches if (p := s.phase(index)) is not None]
            cells.append(_ms(values))
        row = f"| {label} | {marks[0]} | {cells[0]} | {marks[1]} | {cells[1]} |"
        if slot is not None:
            row += f" {marks[2]} | {cells[2]} |"
        print(row)
    rows: list[tuple[str, Callable[[Run], str]]] = [
        ("**the request that switched** (sent → answer complete)",
         lambda r: _ms([s.total for s in r.switches])),
        ("of which the server's own load (start → healthy)",
         lambda r: _ms([s.load for s in r.switches])),
        ("**overhead above the load** (switch minus load, per switch)",
         lambda r: _ms([s.total - s.load for s in r.switches])),
        ("the next request (no switch)",
         lambda r: _ms([float(n["done"]) - float(n["sent"]) for n in r.nexts])),
        ("prompt tokens processed after a switch",
         lambda r: f"{statistics.median(s.record.get('prompt_n') or 0 for s in r.switches):g}"),
    ]  # fmt: skip
    for label, cell in rows:
        print("| " + label + " |" + "".join(f" | {cell(run)} |" for run in columns))

    ours_ms = median_ms([s.total for s in ours.switches])
    router_ms = median_ms([s.total for s in router_mode.switches])
    overhead = median_ms([s.total - s.load for s in ours.switches])
    router_overhead = median_ms([s.total - s.load for s in router_mode.switches])
    readiness = median_ms([s.readiness for s in ours.switches])
    sources = sorted({s.readiness_source for s in ours.switches})
    met = {True: "met", False: "NOT met"}
    print(f"\ntargets (issue 22): overhead above the load ≤ {OVERHEAD_TARGET_MS:.0f} ms: "
          f"{met[overhead <= OVERHEAD_TARGET_MS]} ({overhead:.0f}); readiness seen "
          f"≤ {READINESS_TARGET_MS:.0f} ms after /health 200: "
          f"{met[readiness <= READINESS_TARGET_MS]} ({readiness:.0f})")  # fmt: skip
    if slot is not None:
        slot_overhead = median_ms([s.total - s.load for s in slot.switches])
        print(f"targets (issue 22), slot server: overhead above the load "
              f"≤ {OVERHEAD_TARGET_MS:.0f} ms: {met[slot_overhead <= OVERHEAD_TARGET_MS]} "
              f"({slot_overhead:.0f})")  # fmt: skip
        print(slot_line(slot, router_mode))
    line = (
        f"kind switch: ours {ours_ms:.0f} ms (overhead {overhead:.0f} ms above the load of "
        f"{median_ms([s.load for s in ours.switches]):.0f} ms), router mode {router_ms:.0f} ms "
        f"(overhead {router_overhead:.0f} ms above the load of "
        f"{median_ms([s.load for s in router_mode.switches]):.0f} ms), ratio "
        f"{ours_ms / router_ms:.1f}x; readiness seen {readiness:.0f} ms after /health 200 "
        f"({' + '.join(sources)})"
    )
    print(line)
    return line


def slot_line(slot: Run, router_mode: Run) -> str:
    """The script line of ours with a slot server against router mode in one pod, medians."""
    slot_ms = median_ms([s.total for s in slot.switches])
    router_ms = median_ms([s.total for s in router_mode.switches])
    return (
        f"kind switch (slot server): ours {slot_ms:.0f} ms (overhead "
        f"{median_ms([s.total - s.load for s in slot.switches]):.0f} ms above the load of "
        f"{median_ms([s.load for s in slot.switches]):.0f} ms), router mode {router_ms:.0f} ms, "
        f"ratio {slot_ms / router_ms:.1f}x"
    )
