"""The pool invariant monitor: at every instant at most one member of a pool runs (of a pool with
``spec.capacity``: the members that run fit in it).

The contract: docs/modelpool.md ("The grant").

Every e2e test that runs pools gets one (``start_node`` in :mod:`tests.e2e.operator_process`
attaches it to the node stand-in). It records a residency timeline from two sources and fails
the test, at teardown, with the record of every violation it saw:

* **Pods not yet gone** (exact). A watch on the namespace's Pods, through the project's own
  informer: a member pod occupies the slot from its ``ADDED`` event to its ``DELETED`` event,
  Terminating included (GPU memory is freed when the process exits, not when the pod is marked).
  One watch delivers a resource's events in resourceVersion order, the order in which etcd
  committed them, so "pod B was added while pod A of the same pool still existed" is judged on
  the exact order of writes, not on when we happened to look. The pod's member is its
  ``inference.modelpool.dev/inferenceservice`` label; pools and their members come from a watch
  on ModelPools. This source needs nothing but the API, so the kind tier can use it alone
  (``sample_processes=False``).
* **Processes alive** (sampled). The node stand-in starts each member pod's server (a simulator,
  or the real llama-server) with its identity in the environment (``MODELPOOL_POD``,
  ``MODELPOOL_MEMBER``; see :func:`controlplane.standin.process.identity_env`). A thread lists
  ``/proc`` every :data:`SAMPLE_INTERVAL_SECONDS`, reads the environment of each new process once,
  and counts a server as running until its ``/proc`` entry is gone or it is a zombie (its memory
  is freed). Two members of one pool alive in one sample is a violation. The thread sleeps at
  least nine times as long as a sample took, so it never uses more than a tenth of a core.

**A pool with a budget** (``spec.capacity``, docs/modelpool.md "Several residents") is judged by
the same sources: a pod's arrival, or a sample, is a violation when the footprints of the members
with a pod not yet gone (or a live process) exceed the capacity
(:func:`~controlplane.scheduling.budget.pool_budget`, the product's own reading of the spec).

The two sources are merged into one timeline for the record, but each is judged on its own: a
pod's ``DELETED`` reaches this watch some milliseconds after the stand-in saw it, so comparing a
process sample with the watch's view would report overlaps that never happened.

**Settled** (checked at teardown, with a deadline for a swap still in flight): for each pool at most
one member (of a pool with a budget: what fits) has pods or processes, and each is the pool's
``status.residentMember``, one of its ``status.residents`` or the target of its currently held
Lease. Held means a holder and not expired on this machine's clock
(the local control plane shares it; this is a test's judgement, not the product's). Leases still
held are reported; :meth:`PoolInvariantMonitor.settle` with ``leases_released=True`` (the storm)
makes them violations.

The monitor runs in threads of its own (an event loop for the watches, one for sampling), so a
test's own event loop, a sync fixture, or a frozen API server cannot make it miss what it must see.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.activation import pool_lease_name, read_activation
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.informer import DeletedFinalStateUnknown, Informer
from controlplane.runtime.resources import LEASES, PODS
from controlplane.scheduling.budget import Budget, pool_budget
from controlplane.standin.process import MEMBER_ENV, POD_ENV
from controlplane.standin.slotserver import SLOT_SERVER_ENV

#: How often ``/proc`` is sampled (the brief: every 10 to 20 ms).
SAMPLE_INTERVAL_SECONDS: Final = 0.015
#: A sample may use at most 1/CPU_SHARE_INVERSE of a core: the sleep is at least this many times
#: the sample's own duration.
CPU_SHARE_INVERSE: Final = 9
#: A process without an identity is re-read for this long, and at least IDENTIFY_RETRY_READS
#: times: between fork and exec a child still has its parent's environment. The count matters on a
#: loaded machine, where the sampler slows down (it sleeps nine times a sample's duration) and one
#: second may hold a single sample: a member first seen before its exec was then never read again,
#: and the monitor was blind to it (a CI run with the kind tier beside the e2e tier).
IDENTIFY_RETRY_SECONDS: Final = 1.0
IDENTIFY_RETRY_READS: Final = 5
#: How long the settle check waits for a swap in flight to end.
SETTLE_TIMEOUT_SECONDS: Final = 45.0
#: How long :meth:`PoolInvariantMonitor.start` waits for the watches' first lists.
START_TIMEOUT_SECONDS: Final = 30.0
#: llama.cpp's router names a child's model in its environment when not on its command line.
ALIAS_ENV: Final = "LLAMA_ARG_ALIAS"
#: The environment variables a process's identity is read from.
_IDENTITY_ENV: Final = frozenset({MEMBER_ENV, POD_ENV, SLOT_SERVER_ENV, ALIAS_ENV})
#: Timeline entries shown in a report.
REPORT_TAIL: Final = 60

Object = dict[str, Any]
#: (kind, pool, members, what was seen)
_Problem = tuple[str, str, tuple[str, ...], str]

_test_failed = False


def note_test_outcome(failed: bool) -> None:
    """Told by the e2e conftest whether the running test's body failed: a failed test leaves its
    pools wherever it stopped, so the settle check is skipped (overlaps are still reported)."""
    global _test_failed
    _test_failed = failed


def last_test_failed() -> bool:
    return _test_failed


class PoolInvariantViolated(AssertionError):
    """The monitor saw two members of a pool run together, or a pool that did not settle."""


@dataclass(frozen=True)
class Violation:
    """One breach of the invariant, with what was seen."""

    kind: str  # "overlap" | "unrequested" | "lease-held" | "not-settled"
    source: str  # "pod" | "process" | "settle"
    pool: str
    members: tuple[str, ...]
    detail: str
    at: float  # seconds since the monitor started
    wall: str

    def describe(self) -> str:
        members = ", ".join(self.members)
        return (
            f"[{self.wall} +{self.at:.3f}s] {self.kind} ({self.source}) pool {self.pool}: "
            f"{members}: {self.detail}"
        )


@dataclass(frozen=True)
class TimelineEntry:
    """A residency event: a pod or process coming or going, or a pool's resident changing."""

    at: float
    source: str  # "pod" | "process" | "pool" | "lease"
    what: str
    subject: str
    detail: str = ""

    def describe(self) -> str:
        return f"+{self.at:8.3f}s {self.source:7} {self.what:11} {self.subject} {self.detail}"


@dataclass(frozen=True)
class ResidencyChange:
    """``status.residentMember`` of a pool moved, as the watch delivered it (in order)."""

    pool: str
    old: str
    new: str
    resource_version: str
    at: float


@dataclass(frozen=True)
class ResidentJoin:
    """A member joined ``status.residents`` of a pool, as the watch delivered it (in order);
    ``beside``: the residents it joined (empty: the pool was cold)."""

    pool: str
    member: str
    beside: tuple[str, ...]
    resource_version: str
    at: float


@dataclass(frozen=True)
class _Lease:
    holder: str
    target: str
    expires: float | None  # wall-clock seconds, None when the record has no renewTime

    def held(self, now: float) -> bool:
        return bool(self.holder) and (self.expires is None or self.expires > now)


@dataclass(frozen=True)
class _Proc:
    pid: int
    member: str  # namespace/member
    pod: str  # namespace/pod
    start_ticks: str
    #: A slot server's child (its model), not a member pod's own server.
    in_slot_server: bool = False


@dataclass
class _Unknown:
    first_seen: float
    reads: int = 1


@dataclass
class _PodSeen:
    member: str
    name: str
    added_rv: str
    terminating: bool = False


def _now_wall() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _read_stat(pid: int) -> tuple[str, str] | None:
    """``(state, starttime)`` of ``pid`` from ``/proc/<pid>/stat``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode(errors="replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _served_model(pid: int, environ: Mapping[str, str]) -> str | None:
    """The model a slot server's child serves (its ``--alias``, or ``LLAMA_ARG_ALIAS``, as
    llama.cpp's router gives it); None for the router itself, which serves none."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = [a.decode(errors="replace") for a in cmdline.read().split(b"\0")]
    except OSError:
        return None
    for flag, value in itertools.pairwise(argv):
        if flag in ("--alias", "-a"):
            return value
    return environ.get(ALIAS_ENV)


def _read_identity(
    pid: int, namespace: str, models: Mapping[str, str]
) -> tuple[str, str, bool] | None:
    """``(member, pod, in a slot server)`` from the process's environment, or None (not ours, or
    not readable).
    A slot server's child of ``namespace`` is the member whose model it serves (``models``: model
    name -> ``namespace/member``); the router itself is no member."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            raw = environ.read()
    except OSError:
        return None
    if MEMBER_ENV.encode() not in raw and SLOT_SERVER_ENV.encode() not in raw:
        return None
    found: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key.decode(errors="replace") in _IDENTITY_ENV:
            found[key.decode()] = value.decode(errors="replace")
    if MEMBER_ENV in found:
        return found[MEMBER_ENV], found.get(POD_ENV, ""), False
    server = found.get(SLOT_SERVER_ENV)
    if server is None or server.partition("/")[0] != namespace:
        return None  # not a slot server, or another namespace's (``models`` is this one's)
    model = _served_model(pid, found)
    if model is None or model not in models:
        return None
    return models[model], found.get(POD_ENV, ""), True


class _Handler:
    """Adapts informer callbacks (run on the monitor's loop, in watch order) to the monitor."""

    def __init__(self, kind: str, monitor: PoolInvariantMonitor) -> None:
        self.kind = kind
        self.monitor = monitor

    def on_add(self, obj: Object, initial: bool) -> None:
        self.monitor._event(self.kind, "ADDED", None, obj)

    def on_update(self, old: Object, new: Object) -> None:
        self.monitor._event(self.kind, "MODIFIED", old, new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self.monitor._note(
                self.kind, "relisted", obj.key, "a deletion seen only by a relist: order not exact"
            )
            obj = obj.obj
        self.monitor._event(self.kind, "DELETED", obj, None)


class _ModelNames:
    """Keeps the monitor's model name -> member map (a slot server's child names its model only)."""

    def __init__(self, monitor: PoolInvariantMonitor) -> None:
        self.monitor = monitor

    def on_add(self, obj: Object, initial: bool) -> None:
        self.on_update(obj, obj)

    def on_update(self, old: Object, new: Object) -> None:
        model = ((new.get("spec") or {}).get("model") or {}).get("name")
        if model:
            member = f"{self.monitor.namespace}/{new['metadata']['name']}"
            self.monitor._models = {**self.monitor._models, str(model): member}

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        pass  # a name once seen keeps its member: a child may outlive its InferenceService


class PoolInvariantMonitor:
    """Watches one namespace's pools; :meth:`start`, then :meth:`settle` and :meth:`stop`."""

    def __init__(
        self,
        config: ClientConfig,
        namespace: str,
        *,
        sample_processes: bool = True,
        sample_interval: float = SAMPLE_INTERVAL_SECONDS,
    ) -> None:
        self.config = config
        self.namespace = namespace
        self.sample_processes = sample_processes
        self.sample_interval = sample_interval
        self._lock = threading.Lock()
        self._started_at = time.monotonic()
        self.violations: list[Violation] = []
        self.timeline: list[TimelineEntry] = []
        self.residency: list[ResidencyChange] = []
        self.joins: list[ResidentJoin] = []
        #: Snapshots, replaced whole (never mutated) so other threads can read them.
        self._members: Mapping[str, tuple[str, ...]] = {}  # pool -> members
        self._pools_of: Mapping[str, tuple[str, ...]] = {}  # member -> pools
        self._status: Mapping[str, Object] = {}  # pool -> status
        self._budgets: Mapping[str, Budget] = {}  # pool -> its budget, when it has one
        self._leases: Mapping[str, _Lease] = {}  # lease name -> lease
        self._occupying: Mapping[str, frozenset[str]] = {}  # member -> pod names
        self._live: Mapping[int, _Proc] = {}  # pid -> simulator process, latest sample
        self._models: Mapping[str, str] = {}  # model name -> namespace/member, of slot servers
        # The loop thread's own state.
        self._pods: dict[str, _PodSeen] = {}  # pod uid -> what we know of it
        # The sampler thread's own state.
        self._known: dict[int, _Proc | _Unknown] = {}
        self._process_overlaps: set[tuple[str, frozenset[str]]] = set()
        self.samples = 0
        self.sample_seconds = 0.0
        self._portal_cm: Any = None
        self._portal: BlockingPortal | None = None
        self._main: Future[None] | None = None
        self._ready = threading.Event()
        self._stop_sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self._stop_event: anyio.Event | None = None
        self._stopped = False

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> PoolInvariantMonitor:
        """Start the watches and the sampler; return once the first lists are in."""
        self._portal_cm = start_blocking_portal("asyncio")
        self._portal = self._portal_cm.__enter__()
        self._main = self._portal.start_task_soon(self._run)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self._ready.wait(0.05):
            if self._main.done():
                self._main.result()  # raises what stopped it
                raise RuntimeError("the pool invariant monitor ended before it synced")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the pool invariant monitor's watches did not sync")
        if self.sample_processes:
            self._sample()  # what runs already, before anything else can start
            self._sampler = threading.Thread(
                target=self._sample_loop, name=f"pool-invariants-{self.namespace}", daemon=True
            )
            self._sampler.start()
        return self

    def stop(self) -> None:
        """Stop watching and sampling (idempotent); the record stays readable."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_sampling.set()
        if self._sampler is not None:
            self._sampler.join(timeout=10)
        if self._portal is not None:
            stop_event = self._stop_event
            if stop_event is not None:
                with contextlib.suppress(Exception):
                    self._portal.call(stop_event.set)
            if self._main is not None:
                with contextlib.suppress(Exception):
                    self._main.result(timeout=15)
            with contextlib.suppress(Exception):
                self._portal_cm.__exit__(None, None, None)

    async def _run(self) -> None:
        self._stop_event = anyio.Event()
        async with KubeClient(self.config) as client:
            pools = Informer(client, ModelPool.resource(), self.namespace)
            leases = Informer(client, LEASES, self.namespace)
            pods = Informer(client, PODS, self.namespace, label_selector=ISVC_LABEL)
            isvcs = Informer(client, InferenceService.resource(), self.namespace)
            isvcs.add_handler(_ModelNames(self))
            pools.add_handler(_Handler("pool", self))
            leases.add_handler(_Handler("lease", self))
            pods.add_handler(_Handler("pod", self))
            async with anyio.create_task_group() as group:
                # Pools first: a pod's first event is judged against the pools already known.
                for informer in (isvcs, pools, leases, pods):
                    group.start_soon(informer.run)
                    await informer.wait_for_sync()
                self._ready.set()
                await self._stop_event.wait()
                group.cancel_scope.cancel()

    # -- the record ----------------------------------------------------------------------------

    def _elapsed(self) -> float:
        return time.monotonic() - self._started_at

    def _note(self, source: str, what: str, subject: str, detail: str = "") -> None:
        with self._lock:
            self.timeline.append(TimelineEntry(self._elapsed(), source, what, subject, detail))

    def _violate(
        self, kind: str, source: str, pool: str, members: tuple[str, ...], detail: str
    ) -> Violation:
        found = Violation(kind, source, pool, members, detail, self._elapsed(), _now_wall())
        with self._lock:
            self.violations.append(found)
            self.timeline.append(
                TimelineEntry(found.at, source, "VIOLATION", pool, f"{kind}: {detail}")
            )
        return found

    @property
    def overlaps(self) -> list[Violation]:
        with self._lock:
            return [v for v in self.violations if v.kind == "overlap"]

    def residency_changes(self, pool: str | None = None) -> list[ResidencyChange]:
        with self._lock:
            return [c for c in self.residency if pool is None or c.pool == pool]

    def held_leases(self) -> dict[str, tuple[str, str]]:
        """Pool Leases held now: lease name -> (holder, target)."""
        now = time.time()
        return {
            name: (lease.holder, lease.target)
            for name, lease in self._leases.items()
            if lease.held(now)
        }

    def report(self, tail: int = REPORT_TAIL) -> str:
        with self._lock:
            violations = list(self.violations)
            timeline = list(self.timeline)
        lines = [f"pool invariant monitor, namespace {self.namespace}:"]
        lines += [f"  VIOLATION {v.describe()}" for v in violations] or ["  no violation"]
        if self.sample_processes:
            mean = self.sample_seconds / self.samples * 1000 if self.samples else 0.0
            lines.append(f"  /proc samples: {self.samples} (mean {mean:.2f} ms each)")
        held = self.held_leases()
        if held:
            lines.append(f"  pool Leases held: {held}")
        lines.append(f"  timeline (last {min(tail, len(timeline))} of {len(timeline)}):")
        lines += [f"    {entry.describe()}" for entry in timeline[-tail:]]
        return "\n".join(lines)

    def check(self) -> None:
        """Raise :class:`PoolInvariantViolated` with the record if anything was violated."""
        if self.violations:
            raise PoolInvariantViolated(self.report())

    # -- watch events (the monitor's loop thread, in each watch's order) ----------------------

    def _event(self, kind: str, type_: str, old: Object | None, new: Object | None) -> None:
        if kind == "pod":
            self._pod_event(type_, old, new)
        elif kind == "pool":
            self._pool_event(type_, old, new)
        else:
            self._lease_event(type_, new if new is not None else old)

    def _pool_event(self, type_: str, old: Object | None, new: Object | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        name = obj["metadata"]["name"]
        members = dict(self._members)
        status = dict(self._status)
        budgets = dict(self._budgets)
        budgets.pop(name, None)
        if new is None:
            members.pop(name, None)
            status.pop(name, None)
        else:
            refs = (new.get("spec") or {}).get("members") or ()
            members[name] = tuple(
                str((m.get("inferenceServiceRef") or {}).get("name", "")) for m in refs
            )
            status[name] = dict(new.get("status") or {})
            budget = pool_budget(new.get("spec") or {})
            if budget is not None:
                budgets[name] = budget
        self._budgets = budgets
        pools_of: dict[str, list[str]] = {}
        for pool, names in members.items():
            for member in names:
                pools_of.setdefault(member, []).append(pool)
        self._members = members
        self._pools_of = {m: tuple(p) for m, p in pools_of.items()}
        self._status = status
        if new is not None:
            self._note_joins(name, old, new)
        before = ((old or {}).get("status") or {}).get("residentMember") or ""
        after = ((new or {}).get("status") or {}).get("residentMember") or ""
        if new is not None and before != after:
            version = str(new["metadata"].get("resourceVersion", ""))
            with self._lock:
                self.residency.append(
                    ResidencyChange(name, before, after, version, self._elapsed())
                )
            self._note(
                "pool", "resident", name, f"{before or '-'} -> {after or '-'} (rv {version})"
            )
        if type_ == "ADDED":
            self._note("pool", "listed", name, f"members {members[name]}")

    def _note_joins(self, pool: str, old: Object | None, new: Object) -> None:
        before = [str(m) for m in ((old or {}).get("status") or {}).get("residents") or ()]
        after = [str(m) for m in (new.get("status") or {}).get("residents") or ()]
        version = str(new["metadata"].get("resourceVersion", ""))
        for member in after:
            if member not in before:
                with self._lock:
                    self.joins.append(
                        ResidentJoin(pool, member, tuple(before), version, self._elapsed())
                    )

    def has_budget(self, pool: str) -> bool:
        """``pool`` has a ``spec.capacity``: several residents."""
        return pool in self._budgets

    def resident_joins(self, pool: str | None = None) -> list[ResidentJoin]:
        with self._lock:
            return [j for j in self.joins if pool is None or j.pool == pool]

    def _lease_event(self, type_: str, obj: Object | None) -> None:
        if obj is None:
            return
        name = obj["metadata"]["name"]
        leases = dict(self._leases)
        if type_ == "DELETED":
            leases.pop(name, None)
        else:
            spec = obj.get("spec") or {}
            activation = read_activation(obj)
            renewed = _parse_time(spec.get("renewTime") or spec.get("acquireTime"))
            duration = activation.duration
            expires = renewed + float(duration) if renewed is not None and duration else None
            lease = _Lease(activation.holder, activation.target or "", expires)
            previous = self._leases.get(name)
            if previous is None or (previous.holder, previous.target) != (
                lease.holder,
                lease.target,
            ):
                self._note(
                    "lease", "holder", name, f"{lease.holder or '-'} -> {lease.target or '-'}"
                )
            leases[name] = lease
        self._leases = leases

    def _pod_event(self, type_: str, old: Object | None, new: Object | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        meta = obj["metadata"]
        uid, name = meta["uid"], meta["name"]
        member = str((meta.get("labels") or {}).get(ISVC_LABEL) or "")
        version = str(meta.get("resourceVersion", ""))
        if not member:
            return
        seen = self._pods.get(uid)
        if new is None:  # DELETED: the slot is free of this pod
            if seen is not None:
                del self._pods[uid]
                self._publish_occupancy()
                self._note("pod", "gone", f"{member}/{name}", f"rv {version}")
            return
        if seen is None:  # ADDED (or a pod first seen on an update): it occupies from now
            self._judge_pod_arrival(member, name, version)
            self._pods[uid] = _PodSeen(member, name, version)
            self._publish_occupancy()
            self._note("pod", "added", f"{member}/{name}", f"rv {version}")
        elif meta.get("deletionTimestamp") and not seen.terminating:
            seen.terminating = True
            self._note("pod", "terminating", f"{member}/{name}", f"rv {version}")

    def over(self, pool: str, running: Collection[str]) -> bool:
        """``running`` (members of ``pool`` with a pod or a process) breaks the invariant: more
        than one in an exclusive pool, more than the capacity in a pool with a budget."""
        budget = self._budgets.get(pool)
        if budget is None:
            return len(set(running)) > 1
        return budget.used(running) > budget.capacity

    def _judge_pod_arrival(self, member: str, name: str, version: str) -> None:
        for pool in self._pools_of.get(member, ()):
            others = {
                other: sorted(
                    f"{p.name} (added rv {p.added_rv})"
                    for p in self._pods.values()
                    if p.member == other
                )
                for other in self._members.get(pool, ())
                if other != member
            }
            others = {m: pods for m, pods in others.items() if pods}
            if others and self.over(pool, {member, *others}):
                self._violate(
                    "overlap",
                    "pod",
                    pool,
                    (member, *sorted(others)),
                    f"pod {name} of {member} added at rv {version} while pods not yet gone: "
                    + "; ".join(f"{m}: {', '.join(p)}" for m, p in sorted(others.items())),
                )

    def _publish_occupancy(self) -> None:
        occupying: dict[str, set[str]] = {}
        for pod in self._pods.values():
            occupying.setdefault(pod.member, set()).add(pod.name)
        self._occupying = {m: frozenset(names) for m, names in occupying.items()}

    # -- /proc sampling (the sampler thread) ---------------------------------------------------

    def _sample_loop(self) -> None:
        while not self._stop_sampling.is_set():
            began = time.perf_counter()
            self._sample()
            spent = time.perf_counter() - began
            self._stop_sampling.wait(max(self.sample_interval, spent * CPU_SHARE_INVERSE))

    def _sample(self) -> None:
        began = time.perf_counter()
        now = time.monotonic()
        try:
            pids = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}
        except OSError:
            return
        known = self._known
        for pid in [pid for pid in known if pid not in pids]:
            del known[pid]
        prefix = f"{self.namespace}/"
        live: dict[int, _Proc] = {}
        for pid in pids:
            entry = known.get(pid)
            if (
                isinstance(entry, _Unknown)
                and now - entry.first_seen > IDENTIFY_RETRY_SECONDS
                and entry.reads >= IDENTIFY_RETRY_READS
            ):
                continue
            stat = _read_stat(pid)
            if stat is None:
                continue
            state, ticks = stat
            if isinstance(entry, _Proc) and entry.start_ticks != ticks:
                entry = None  # the pid was reused
            if not isinstance(entry, _Proc):
                identity = _read_identity(pid, self.namespace, self._models)
                if identity is None or not identity[0].startswith(prefix):
                    if isinstance(entry, _Unknown):
                        entry.reads += 1
                    else:
                        known[pid] = _Unknown(now)
                    continue
                entry = _Proc(pid, identity[0], identity[1], ticks, identity[2])
                known[pid] = entry
            if state not in ("Z", "X"):  # a zombie's memory is already freed
                live[pid] = entry
        self._publish_processes(live)
        self.samples += 1
        self.sample_seconds += time.perf_counter() - began

    def _publish_processes(self, live: dict[int, _Proc]) -> None:
        before = self._live
        for pid in live.keys() - before.keys():
            proc = live[pid]
            self._note("process", "started", proc.member, f"pid {pid} pod {proc.pod}")
        for pid in before.keys() - live.keys():
            proc = before[pid]
            self._note("process", "exited", proc.member, f"pid {pid} pod {proc.pod}")
        self._live = live
        by_member: dict[str, list[_Proc]] = {}
        for proc in live.values():
            by_member.setdefault(proc.member.partition("/")[2], []).append(proc)
        overlapping: set[tuple[str, frozenset[str]]] = set()
        for pool, members in self._members.items():
            running = frozenset(m for m in members if m in by_member)
            # A member's own pod beside a slot server's child (its model, or another's) is two
            # residents too: the slot server turned on or off while the other way still runs.
            ways = frozenset(
                f"{m} in the slot server" if p.in_slot_server else m
                for m in running
                for p in by_member[m]
            )
            two_ways = self._budgets.get(pool) is None and len(ways) > 1
            if not (self.over(pool, running) or two_ways):
                continue
            key = (pool, ways)
            overlapping.add(key)
            if key in self._process_overlaps:
                continue  # the same episode, already recorded
            procs = "; ".join(
                f"{m}: pid {p.pid} pod {p.pod}{' (slot server)' if p.in_slot_server else ''}"
                for m in sorted(running)
                for p in by_member[m]
            )
            self._violate("overlap", "process", pool, tuple(sorted(running)), procs)
        self._process_overlaps = overlapping

    # -- settling ------------------------------------------------------------------------------

    def running_members(self, pool: str) -> dict[str, list[str]]:
        """Members of ``pool`` with a pod not yet gone or a live simulator, and what shows it."""
        found: dict[str, list[str]] = {}
        for member in self._members.get(pool, ()):
            pods = sorted(self._occupying.get(member, ()))
            procs = [
                f"pid {p.pid}"
                for p in self._live.values()
                if p.member == f"{self.namespace}/{member}"
            ]
            if pods or procs:
                found[member] = [*(f"pod {p}" for p in pods), *procs]
        return found

    def _settle_problems(self, leases_released: bool) -> list[_Problem]:
        problems: list[_Problem] = []
        now = time.time()
        for pool in sorted(self._members):
            running = self.running_members(pool)
            status = self._status.get(pool) or {}
            resident = str(status.get("residentMember") or "")
            lease = self._leases.get(pool_lease_name(pool))
            allowed = ({resident} | {str(m) for m in status.get("residents") or ()}) - {""}
            if lease is not None and lease.held(now) and lease.target:
                allowed.add(lease.target)
            seen = "; ".join(f"{m}: {', '.join(what)}" for m, what in sorted(running.items()))
            if self.over(pool, running):
                problems.append(("overlap", pool, tuple(sorted(running)), seen))
            elif running and not set(running) <= allowed:
                problems.append(
                    (
                        "unrequested",
                        pool,
                        tuple(running),
                        f"{seen}; resident {resident or '-'}, held Lease target "
                        f"{(lease.target if lease and lease.held(now) else '') or '-'}",
                    )
                )
            if leases_released and lease is not None and lease.held(now):
                problems.append(
                    (
                        "lease-held",
                        pool,
                        (lease.target,),
                        f"Lease {pool_lease_name(pool)} held by {lease.holder} for {lease.target}",
                    )
                )
        return problems

    def settle(
        self, timeout: float = SETTLE_TIMEOUT_SECONDS, *, leases_released: bool = False
    ) -> list[Violation]:
        """Wait (up to ``timeout``) for every pool to settle; record and return what did not."""
        deadline = time.monotonic() + timeout
        while True:
            problems = self._settle_problems(leases_released)
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        found = [
            self._violate(kind, "settle", pool, members, f"after {timeout:.0f} s: {detail}")
            for kind, pool, members, detail in problems
        ]
        self._note("settle", "checked", self.namespace, f"{len(found)} problem(s)")
        return found


@contextlib.contextmanager
def watching_pools(
    config: ClientConfig,
    namespace: str,
    *,
    sample_processes: bool = True,
    settle: bool = True,
    leases_released: bool = False,
) -> Iterator[PoolInvariantMonitor]:
    """A monitor for the block; at its end the pools must settle and no violation may be seen.

    The settle check is skipped when the block raises (the test failed where it failed)."""
    monitor = PoolInvariantMonitor(config, namespace, sample_processes=sample_processes).start()
    try:
        yield monitor
        if settle:
            monitor.settle(leases_released=leases_released)
    finally:
        monitor.stop()
    monitor.check()


__all__ = [
    "PoolInvariantMonitor",
    "PoolInvariantViolated",
    "ResidencyChange",
    "ResidentJoin",
    "TimelineEntry",
    "Violation",
    "last_test_failed",
    "note_test_outcome",
    "watching_pools",
]
