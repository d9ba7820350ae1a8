"""``make bench-fairness``: who gets the slot, and when, under fixed arrival traces.

*Why one module of this size:* its three comparisons (the scheduler's traces, a budget of
several residents, quiet gaps) start the same systems with the same helpers and print one table
each; the pure judging parts are unit-tested in place (``tests/unit/test_fairness_*``), and
splitting the runners from them would only pass the same settings between files.

Three systems answer the same traces, one after another, in one run:

* ``ours``: the pool with its scheduler (this tree), the whole local system as ``make dev`` runs
  it (a real control plane, the operator, the node stand-in playing simulator members with a
  2 s load and two slots, the router's proxy);
* ``before``: the same system from the commit before the scheduler (``--baseline-rev``, checked
  out in a scratch worktree): a replica claimed only while the resident had no request in flight
  *on that replica*, and nothing pooled demand;
* ``llama-swap``: the peer (built by ``../shared/peers/build-llama-swap.sh``), our simulator as
  each of its models with the same load time, slots and token time.

The traces (:data:`TRACES`, seeded, 45 s each) are the issue's: steady load on one member with
sparse requests for another, from two clients and from four (the load that starves a member behind
a resident that never falls idle); two members alternating with gaps; steady load on one member
and two others asking at once, one of them with a higher priority. Every request's wait (sent to
answered) is recorded; the figures per system and trace are the max and p99 wait, the requests
refused or not answered, the swaps (changes of the answering model in completion order: what a
client sees), the requests served per swap, and the seconds the slot served nobody between two
models (from the last answer of one model to the first of the next).

The pool's scheduling is the default a user of the samples gets (swapBudget 120 s here: maxWait
30 s, minResidency 10 s); the third pool gives its third member priority 10.

``--budget N`` (issue 24, "Several residents within a GPU-memory budget") runs another set of
traces, :data:`BUDGET_TRACES`, on one pool of three members of which ``N`` may run at once, against
three systems: ``ours`` (the pool with ``spec.capacity: {members: N}``), ``exclusive`` (the same
pool without ``spec.capacity``: one member at a time) and ``llama-swap`` with the equivalent
``matrix`` (every set of ``N`` of the three models may run together, :func:`budget_matrix`). Each
trace starts on a fresh system with member ``a`` loaded. Besides the waits and the requests refused
or not answered, each row counts the **loads**: the model servers that became ready during the
trace (and the settling seconds after it), read from the simulators' own ``ready: model`` log
lines (:func:`load_counts`), the same line in every system.

``--idle`` (issue 40, "a trace with quiet gaps") runs one trace, :data:`IDLE_TRACE`: three clients
looping on ``a2`` for 8 s, then 22 s of quiet, three times (90 s), against three systems
(:data:`IDLE_SYSTEMS`): ``ours-held`` (the pool of ``a2`` and ``b2`` without ``idleAfter``: the
slot stays held), ``ours-release`` (the same pool with ``idleAfter: 5s`` and ``idleAction:
Release``) and ``llama-swap`` with ``ttl: 5`` on each model. Each starts fresh and answers one
request for ``a2`` before the trace, so that ``a2`` is loaded at its start. The **GPU-busy
seconds** are the trace's seconds in which any member's server process was alive: the processes
running ``controlplane.cli sim`` below the system's own process, read from ``/proc`` every
:data:`SAMPLE_SECONDS` (:func:`sampling`), the same reading for every system. Besides the
waits and the requests not answered, each row has the wait of the first request after each quiet
gap (:func:`bursts`): the cold start a request pays for the GPU given back, and for each burst the
seconds from its last answer until no member process was alive (:func:`held_after`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import yaml

from controlplane.envtest.ports import free_port

REPO: Final = Path(__file__).resolve().parents[1]
PEERS: Final = REPO.parent / "shared" / "peers"
NAMESPACE: Final = "bench"
ROUTER: Final = "router"
BASELINE_REV: Final = "b4fae0b"
LOAD_SECONDS: Final = 2.0
SLOTS: Final = 2
TOKEN_SECONDS: Final = 0.01
MAX_TOKENS: Final = 8
REQUEST_TIMEOUT: Final = 150.0
#: Seconds after a trace before its loads are counted (a load started at its end completes).
SETTLE_SECONDS: Final = 3.0
#: A pool: (name, members, priorities).
Pool = tuple[str, tuple[str, ...], dict[str, int]]
POOLS: Final[tuple[Pool, ...]] = (
    ("pool-2", ("a2", "b2"), {}),
    ("pool-3", ("a3", "b3", "c3"), {"c3": 10}),
)
#: The budget mode's pool: three members, the first one the default (resident at the start).
BUDGET_POOL: Final[Pool] = ("pool-budget", ("a", "b", "c"), {})
#: The budget mode's systems, in the order they run.
BUDGET_SYSTEMS: Final = ("ours", "exclusive", "llama-swap")
#: The idle mode's pool (``--idle``): the two-member pool, ``a2`` its default.
IDLE_POOL: Final[Pool] = POOLS[0]
#: The idle mode's systems, in the order they run.
IDLE_SYSTEMS: Final = ("ours-held", "ours-release", "llama-swap")
#: ``idleAfter`` of ``ours-release`` and llama-swap's ``ttl``, in seconds.
IDLE_AFTER_SECONDS: Final = 5
#: How often the idle mode reads which member processes are alive.
SAMPLE_SECONDS: Final = 0.2


def model(member: str) -> str:
    return f"model-{member}"


@dataclass(frozen=True)
class Client:
    """One client of a trace: ``loop`` (back to back), ``gappy`` (a pause drawn from ``pause``
    between requests), ``at`` (one request at each of ``times``), or ``bursts`` (back to back for
    ``burst`` seconds from each of ``times``)."""

    member: str
    kind: str
    pause: tuple[float, float] = (0.0, 0.0)
    times: tuple[float, ...] = ()
    burst: float = 0.0


@dataclass(frozen=True)
class Trace:
    name: str
    clients: tuple[Client, ...]
    seconds: float = 45.0


TRACES: Final = (
    Trace(
        "steady a2 + sparse b2",
        (
            Client("a2", "loop"),
            Client("a2", "loop"),
            Client("b2", "at", times=(5.0, 15.0, 25.0, 35.0)),
        ),
    ),
    Trace(
        "4 x steady a2 + sparse b2",
        (
            *(Client("a2", "loop") for _ in range(4)),
            Client("b2", "at", times=(5.0, 15.0, 25.0, 35.0)),
        ),
    ),
    Trace(
        "a2 and b2 alternating",
        (Client("a2", "gappy", pause=(0.2, 1.5)), Client("b2", "gappy", pause=(0.2, 1.5))),
    ),
    Trace(
        "steady a3, b3 and c3 (priority 10) at once",
        (
            Client("a3", "loop"),
            Client("b3", "at", times=(3.0, 14.0, 25.0, 36.0)),
            Client("c3", "at", times=(3.5, 14.5, 25.5, 36.5)),
        ),
    ),
)


#: The budget mode's traces (``--budget N``) on :data:`BUDGET_POOL`: two members that fit
#: together under a budget of two (one steady, one sparse; both alternating), all three in turn
#: (never all resident at once), and a third member asking while the residents are busy (the
#: four-client load that starves a member behind a resident that never falls idle; both
#: residents busy, so that the room must come from one of them).
BUDGET_TRACES: Final = (
    Trace(
        "steady a + sparse b",
        (
            Client("a", "loop"),
            Client("a", "loop"),
            Client("b", "at", times=(5.0, 15.0, 25.0, 35.0)),
        ),
    ),
    Trace(
        "a and b alternating",
        (Client("a", "gappy", pause=(0.2, 1.5)), Client("b", "gappy", pause=(0.2, 1.5))),
    ),
    Trace(
        "a, b and c in turn",
        (
            Client("a", "gappy", pause=(0.2, 1.5)),
            Client("b", "gappy", pause=(0.2, 1.5)),
            Client("c", "gappy", pause=(0.2, 1.5)),
        ),
    ),
    Trace(
        "4 x steady a + sparse b and c",
        (
            *(Client("a", "loop") for _ in range(4)),
            Client("b", "at", times=(5.0, 15.0, 25.0, 35.0)),
            Client("c", "at", times=(10.0, 20.0, 30.0, 40.0)),
        ),
    ),
    Trace(
        "2 x steady a + 2 x steady b + sparse c",
        (
            *(Client("a", "loop") for _ in range(2)),
            *(Client("b", "loop") for _ in range(2)),
            Client("c", "at", times=(5.0, 15.0, 25.0, 35.0)),
        ),
    ),
)


#: The idle mode's quiet periods: a burst of requests, then quiet.
IDLE_BURST_SECONDS: Final = 8.0
IDLE_GAP_SECONDS: Final = 22.0
#: The idle mode's trace (``--idle``): three clients looping on ``a2`` for
#: :data:`IDLE_BURST_SECONDS`, then :data:`IDLE_GAP_SECONDS` of quiet, three times; the trace ends
#: with its last gap, so that every burst is followed by the same quiet.
IDLE_TRACE: Final = Trace(
    "3 x a2 for 8 s, then 22 s quiet, 3 times",
    tuple(
        Client(
            "a2",
            "bursts",
            times=tuple(i * (IDLE_BURST_SECONDS + IDLE_GAP_SECONDS) for i in range(3)),
            burst=IDLE_BURST_SECONDS,
        )
        for _ in range(3)
    ),
    seconds=3 * (IDLE_BURST_SECONDS + IDLE_GAP_SECONDS),
)


@dataclass
class Answer:
    member: str
    sent: float
    ended: float = 0.0
    status: int | None = None
    answered_by: str = ""

    @property
    def waited(self) -> float:
        return self.ended - self.sent


async def _ask(http: httpx.AsyncClient, url: str, member: str, answers: list[Answer]) -> None:
    answer = Answer(member, time.monotonic())
    answers.append(answer)
    body = {
        "model": model(member),
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": MAX_TOKENS,
    }
    try:
        reply = await http.post(f"{url}/v1/chat/completions", json=body)
        answer.status = reply.status_code
        if reply.status_code == 200:
            answer.answered_by = str(reply.json().get("model", ""))
    except httpx.HTTPError:
        answer.status = None
    finally:
        answer.ended = time.monotonic()


async def _client(
    http: httpx.AsyncClient, url: str, spec: Client, seconds: float, seed: int, out: list[Answer]
) -> None:
    rng = random.Random(seed)
    start = time.monotonic()
    if spec.kind == "at":
        async with anyio.create_task_group() as group:
            for at in spec.times:
                await anyio.sleep(max(0.0, start + at - time.monotonic()))
                group.start_soon(_ask, http, url, spec.member, out)
        return
    windows = [(0.0, seconds)]
    if spec.kind == "bursts":
        windows = [(at, at + spec.burst) for at in spec.times]
    for begin, end in windows:
        await anyio.sleep(max(0.0, start + begin - time.monotonic()))
        while time.monotonic() - start < end:
            await _ask(http, url, spec.member, out)
            if spec.kind == "gappy":
                await anyio.sleep(rng.uniform(*spec.pause))


async def replay(url: str, trace: Trace, seed: int = 1) -> list[Answer]:
    """Every client of ``trace`` against ``url``; returns once every request is answered."""
    answers: list[Answer] = []
    limits = httpx.Limits(max_connections=64)
    async with (
        httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits, trust_env=False) as http,
        anyio.create_task_group() as group,
    ):
        for index, spec in enumerate(trace.clients):
            group.start_soon(_client, http, url, spec, trace.seconds, seed * 100 + index, answers)
    return answers


@dataclass
class Row:
    system: str
    trace: str
    requests: int
    failed: int
    max_wait: float
    p99_wait: float
    sparse_max_wait: float
    swaps: int
    served_per_swap: float
    idle_between: float
    notes: list[str] = field(default_factory=list)


def quantile(values: list[float], fraction: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def judge(system: str, trace: Trace, answers: list[Answer]) -> Row:
    ok = [a for a in answers if a.status == 200 and a.answered_by == model(a.member)]
    waits = [a.waited for a in ok]
    sparse = {c.member for c in trace.clients if c.kind == "at"}
    sparse_waits = [a.waited for a in answers if a.member in sparse]
    by_end = sorted(ok, key=lambda a: a.ended)
    swaps, idle = 0, 0.0
    for before, after in itertools.pairwise(by_end):
        if after.answered_by != before.answered_by:
            swaps += 1
            idle += max(0.0, after.ended - before.ended)
    return Row(
        system,
        trace.name,
        len(answers),
        len(answers) - len(ok),
        max(waits, default=math.nan),
        quantile(waits, 0.99),
        max(sparse_waits, default=math.nan),
        swaps,
        len(ok) / max(swaps, 1),
        idle,
    )


#: The line a simulator logs once its model is loaded (``controlplane.sim.server``), in ours'
#: member logs and in llama-swap's copy of its upstreams' output alike.
READY_LINE: Final = re.compile(r"\bready: model (\S+) on ")


def load_counts(lines: Iterable[str]) -> Counter[str]:
    """Loads completed per served model name, from the simulators' ``ready: model`` lines."""
    counts: Counter[str] = Counter()
    for line in lines:
        if found := READY_LINE.search(line):
            counts[found.group(1)] += 1
    return counts


@dataclass
class BudgetRow:
    system: str
    trace: str
    requests: int
    refused: int
    unanswered: int
    #: Loads per member during the trace, in the pool's member order.
    loads: tuple[int, ...]
    max_wait: float
    p99_wait: float
    sparse_max_wait: float

    @property
    def loads_per_request(self) -> float:
        return sum(self.loads) / self.requests if self.requests else math.nan


def judge_budget(
    system: str, trace: Trace, answers: list[Answer], loads: Counter[str], members: Sequence[str]
) -> BudgetRow:
    """A trace's figures: a request is *refused* when it got an answer other than a 200 from its
    own model, *not answered* when it got none (a transport error, or no answer within
    :data:`REQUEST_TIMEOUT`); the waits are those of the answered requests, but for the sparse
    clients' max, which counts every request of theirs."""
    ok = [a for a in answers if a.status == 200 and a.answered_by == model(a.member)]
    waits = [a.waited for a in ok]
    sparse = {c.member for c in trace.clients if c.kind == "at"}
    unanswered = sum(1 for a in answers if a.status is None)
    return BudgetRow(
        system,
        trace.name,
        len(answers),
        len(answers) - len(ok) - unanswered,
        unanswered,
        tuple(loads[model(member)] for member in members),
        max(waits, default=math.nan),
        quantile(waits, 0.99),
        max((a.waited for a in answers if a.member in sparse), default=math.nan),
    )


def budget_table(rows: list[BudgetRow], members: Sequence[str]) -> str:
    head = (
        f"| trace | system | requests | refused | not answered | loads ({' '.join(members)}) | "
        "loads per request | max wait s | p99 wait s | sparse max wait s |"
    )
    lines = [head, "|" + "---|" * 10]
    order = {name: index for index, name in enumerate(BUDGET_SYSTEMS)}
    traces = {trace.name: index for index, trace in enumerate(BUDGET_TRACES)}
    for row in sorted(
        rows, key=lambda r: (traces.get(r.trace, len(traces)), r.trace, order.get(r.system, 9))
    ):
        lines.append(
            f"| {row.trace} | {row.system} | {row.requests} | {row.refused} | {row.unanswered} | "
            f"{sum(row.loads)} ({' '.join(str(n) for n in row.loads)}) | "
            f"{row.loads_per_request:.3f} | {row.max_wait:.1f} | {row.p99_wait:.1f} | "
            f"{row.sparse_max_wait:.1f} |"
        )
    return "\n".join(lines)


#: A reading of the member processes alive: (monotonic seconds, their pids).
Sample = tuple[float, frozenset[int]]


def busy_seconds(samples: Sequence[Sample], start: float, end: float) -> float:
    """The seconds of ``start`` to ``end`` in which a member process was alive: each reading
    holds until the next one (the last until ``end``), counted where it saw any."""
    busy = 0.0
    for (at, alive), (until, _) in itertools.pairwise([*samples, (end, frozenset())]):
        if alive:
            busy += max(0.0, min(until, end) - max(at, start))
    return busy


def member_starts(samples: Sequence[Sample], start: float) -> int:
    """The member processes first seen after ``start`` (not alive at the last reading before)."""
    before = [alive for at, alive in samples if at <= start]
    running = before[-1] if before else frozenset()
    seen = frozenset().union(*(alive for at, alive in samples if at > start))
    return len(seen - running)


def bursts(answers: Sequence[Answer], quiet: float) -> list[list[Answer]]:
    """The requests in bursts, in the order sent: a burst begins with a request sent at least
    ``quiet`` seconds after every request sent before it had been answered."""
    found: list[list[Answer]] = []
    last_end = -math.inf
    for answer in sorted(answers, key=lambda a: a.sent):
        if answer.sent - last_end >= quiet:
            found.append([])
        found[-1].append(answer)
        last_end = max(last_end, answer.ended)
    return found


def held_after(samples: Sequence[Sample], ended: float) -> float:
    """Seconds from ``ended`` to the first reading after it with no member process alive
    (infinite if there is none)."""
    return next((at - ended for at, alive in samples if at >= ended and not alive), math.inf)


@dataclass
class IdleRow:
    system: str
    requests: int
    #: Requests without a 200 from the model asked for.
    unanswered: int
    #: The trace's length, and the seconds of it in which a member process was alive.
    seconds: float
    busy: float
    #: Member processes started during the trace.
    starts: int
    #: The wait of the first request after each quiet gap, in order.
    after_gaps: tuple[float, ...]
    #: Per burst, the seconds from its last answer until no member process was alive.
    held: tuple[float, ...]
    max_wait: float
    p50_wait: float

    @property
    def saved(self) -> float:
        return self.seconds - self.busy


def judge_idle(
    system: str, answers: list[Answer], samples: Sequence[Sample], start: float, end: float
) -> IdleRow:
    """The idle trace's figures, from ``start`` to ``end``: the waits are those of the answered
    requests; a gap is half of :data:`IDLE_GAP_SECONDS` or more without a request in flight."""
    ok = [a for a in answers if a.status == 200 and a.answered_by == model(a.member)]
    waits = [a.waited for a in ok]
    found = bursts(answers, IDLE_GAP_SECONDS / 2)
    return IdleRow(
        system,
        len(answers),
        len(answers) - len(ok),
        end - start,
        busy_seconds(samples, start, end),
        member_starts(samples, start),
        tuple(burst[0].waited for burst in found[1:]),
        tuple(held_after(samples, max(a.ended for a in burst)) for burst in found),
        max(waits, default=math.nan),
        quantile(waits, 0.5),
    )


def idle_table(rows: list[IdleRow]) -> str:
    head = (
        "| system | requests | not answered | GPU busy s | GPU given back s | "
        "member alive after a burst's last answer s | member starts | "
        "first request after each gap: wait s | max wait s | p50 wait s |"
    )
    lines = [head, "|" + "---|" * 10]
    for row in rows:
        held = ", ".join("held" if math.isinf(s) else f"{s:.1f}" for s in row.held) or "none"
        gaps = ", ".join(f"{wait:.1f}" for wait in row.after_gaps) or "none"
        lines.append(
            f"| {row.system} | {row.requests} | {row.unanswered} | "
            f"{row.busy:.1f} of {row.seconds:.0f} | {row.saved:.1f} | {held} | {row.starts} | "
            f"{gaps} | {row.max_wait:.1f} | {row.p50_wait:.2f} |"
        )
    return "\n".join(lines)


# -- the systems ---------------------------------------------------------------------------------


def pool_objects(
    *,
    scheduler: bool = True,
    pools: Sequence[Pool] = POOLS,
    capacity: int | None = None,
    scheduling: Mapping[str, str] | None = None,
    slots: int = SLOTS,
    proxy_replicas: int | None = None,
) -> list[dict[str, Any]]:
    """The namespace, the members, the pools (both of :data:`POOLS` unless told) and the router;
    without ``scheduler`` the pools carry no ``priority`` (the API before the scheduler refuses the
    unknown field); with ``capacity`` each pool has ``spec.capacity: {members: capacity}``, with
    ``scheduling`` that ``spec.scheduling``; each member has ``slots`` slots (``--parallel``), and
    the router ``proxy_replicas`` proxy pods when told (``bench.no_cut_bench`` runs two)."""
    group = "inference.modelpool.dev/v1alpha1"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    ]
    for pool, members, priorities in pools:
        for index, member in enumerate(members):
            objects.append(
                {
                    "apiVersion": group,
                    "kind": "InferenceService",
                    "metadata": {"name": member, "namespace": NAMESPACE},
                    "spec": {
                        "model": {"name": model(member), "source": f"/models/{member}.gguf"},
                        "args": ["--parallel", str(slots)],
                        "replicas": 1 if index == 0 else 0,
                    },
                }
            )
        entries: list[dict[str, Any]] = []
        for member in members:
            entry: dict[str, Any] = {"inferenceServiceRef": {"name": member}}
            if scheduler and member in priorities:
                entry["priority"] = priorities[member]
            entries.append(entry)
        spec: dict[str, Any] = {"members": entries, "default": members[0], "swapBudget": "120s"}
        if capacity is not None:
            spec["capacity"] = {"members": capacity}
        if scheduling is not None:
            spec["scheduling"] = dict(scheduling)
        objects.append(
            {
                "apiVersion": group,
                "kind": "ModelPool",
                "metadata": {"name": pool, "namespace": NAMESPACE},
                "spec": spec,
            }
        )
    router: dict[str, Any] = {
        "backends": [{"name": pool, "poolRef": {"name": pool}} for pool, _, _ in pools]
    }
    if proxy_replicas is not None:
        router["proxy"] = {"replicas": proxy_replicas}
    objects.append(
        {
            "apiVersion": group,
            "kind": "ModelRouter",
            "metadata": {"name": ROUTER, "namespace": NAMESPACE},
            "spec": router,
        }
    )
    return objects


#: Run in the tree under test (this one, or the baseline's worktree) with only what both have:
#: the local system up, the objects applied, the router's address printed; then until stdin ends.
RUNNER: Final = r"""
import json, shutil, subprocess, sys, tempfile
from pathlib import Path
import yaml
from controlplane.envtest import ControlPlane
from controlplane.local.system import local_system, wait_router_address

objects = json.loads(sys.argv[1])
workdir = Path(tempfile.mkdtemp(prefix="bench-fairness-"))
print("LOGS", workdir / "simulators", flush=True)
plane = ControlPlane(with_controller_manager=True).start()
try:
    binary = plane.binaries.kubectl or shutil.which("kubectl")

    def kubectl(*args, stdin=None):
        argv = [str(binary), "--kubeconfig", str(plane.admin_kubeconfig), *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    with local_system(plane.admin_kubeconfig, kubectl, workdir) as node:
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        for obj in objects:
            if obj["kind"] in ("ModelPool", "ModelRouter"):
                kind = "mpool" if obj["kind"] == "ModelPool" else "mr"
                # a pool that gives an idle slot back may be Idle already: its condition then
                idles = "idleAfter" in obj["spec"].get("scheduling", {})
                until = "condition=Ready" if idles else "jsonpath={.status.phase}=Ready"
                kubectl("wait", "-n", "bench", "--timeout=180s", f"--for={until}",
                        f"{kind}/{obj['metadata']['name']}")
        print("ROUTER", wait_router_address(node, "bench/router", timeout=180), flush=True)
        sys.stdin.read()
finally:
    plane.stop()
    shutil.rmtree(workdir, ignore_errors=True)
"""


@dataclass(frozen=True)
class Served:
    """A system under test: where to send requests, the text of every log its model servers
    write their ``ready: model`` lines to (for :func:`load_counts`), and the process every model
    server runs below (for :func:`sampling`)."""

    url: str
    server_logs: Callable[[], str]
    root: int


def _read_logs(paths: Iterable[Path]) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(paths) if path.is_file())


@contextlib.contextmanager
def pool_system(
    tree: Path, *, scheduler: bool = True, objects: list[dict[str, Any]] | None = None
) -> Iterator[Served]:
    """The local system of ``tree`` with ``objects`` (:func:`pool_objects` unless told); yields
    the router's address and the members' logs (one file per pod in the stand-in's log folder)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if objects is None:
        objects = pool_objects(scheduler=scheduler)
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, json.dumps(objects)],
        cwd=tree,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout is not None
    assert runner.stdin is not None
    try:
        url, logs = None, None
        for line in runner.stdout:
            print(f"  [{tree.name}] {line.rstrip()}", flush=True)
            if line.startswith("LOGS "):
                logs = Path(line.split(maxsplit=1)[1].strip())
            if line.startswith("ROUTER "):
                url = line.split()[1]
                break
        if url is None or logs is None:
            raise SystemExit(f"the system of {tree} did not start (exit {runner.wait()})")
        _ready(f"{url}/readyz")
        folder = logs
        yield Served(url, lambda: _read_logs(folder.glob("*.log")), runner.pid)
    finally:
        runner.stdin.close()
        try:
            runner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            runner.kill()


@contextlib.contextmanager
def baseline_tree(rev: str, name: str = "before") -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="bench-fairness-baseline-"))
    tree = work / name
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), rev],
                   check=True)  # fmt: skip
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False
        )
        shutil.rmtree(work, ignore_errors=True)


def budget_matrix(members: Sequence[str], budget: int) -> dict[str, Any]:
    """llama-swap's ``routing`` section for "any ``budget`` of ``members`` may run together": its
    ``matrix`` router with one set per combination (``ab: "a & b"``, ...; a set also permits its
    subsets), named and listed in the members' order, which is the order its solver breaks ties
    in. Its ``groups`` cannot say this: a group runs one member at a time (``swap: true``) or all
    of them together (``swap: false``)."""
    if not 1 <= budget <= len(members):
        raise ValueError(f"a budget of {budget} of {len(members)} members")
    return {
        "router": {
            "use": "matrix",
            "settings": {
                "matrix": {
                    "vars": {member: model(member) for member in members},
                    "sets": {
                        "".join(combo): " & ".join(combo)
                        for combo in itertools.combinations(members, budget)
                    },
                }
            },
        }
    }


def llama_swap_config(
    members: Sequence[str],
    *,
    budget: int | None = None,
    preload: str | None = None,
    ttl: int | None = None,
) -> dict[str, Any]:
    """The peer's configuration: our simulator as each member's model (same load time, slots and
    token time); with ``budget``, :func:`budget_matrix`, ``preload`` loaded at its start, and the
    upstreams' output copied to its own (for :func:`load_counts`); with ``ttl``, each model
    unloaded once unused for that many seconds."""
    sim = f"{sys.executable} -m controlplane.cli sim --host 127.0.0.1 --port ${{PORT}}"
    config: dict[str, Any] = {
        "healthCheckTimeout": 120,
        "models": {
            model(member): {
                "cmd": f"{sim} --model-name {model(member)} --load-seconds {LOAD_SECONDS} "
                f"--slots {SLOTS} --token-seconds {TOKEN_SECONDS}",
                "proxy": "http://127.0.0.1:${PORT}",
                "checkEndpoint": "/health",
            }
            for member in members
        },
    }
    if ttl is not None:
        for entry in config["models"].values():
            entry["ttl"] = ttl
    if budget is not None:
        config["logToStdout"] = "both"
        config["routing"] = budget_matrix(members, budget)
    if preload is not None:
        config["hooks"] = {"on_startup": {"preload": [model(preload)]}}
    return config


@contextlib.contextmanager
def llama_swap(config: dict[str, Any] | None = None) -> Iterator[Served]:
    """The peer with ``config`` (:func:`llama_swap_config` of :data:`POOLS`' members unless
    told); its log holds the upstreams' output when the config copies it there."""
    script = PEERS / "build-llama-swap.sh"
    if not script.exists():
        raise SystemExit(
            f"llama-swap's build script is not at {script}: pass --systems ours,before"
        )
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "modelpool-peers"
    binary = (
        subprocess.run([str(script), str(cache)], check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    if config is None:
        config = llama_swap_config([member for _, members, _ in POOLS for member in members])
    work = Path(tempfile.mkdtemp(prefix="bench-llama-swap-"))
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    process = subprocess.Popen(
        [binary, "-config", str(work / "config.yaml"), "-listen", f"127.0.0.1:{port}"],
        cwd=REPO,
        stdout=(work / "llama-swap.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _ready(f"{url}/v1/models")
        log = work / "llama-swap.log"
        yield Served(url, lambda: _read_logs([log]), process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(work, ignore_errors=True)


def _ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer 200 within {timeout:.0f} s")


#: What a simulator's command line holds, as the node stand-in and llama-swap start it.
SIM_ARGV: Final = b"controlplane.cli\0sim\0"


def descendants(parents: Mapping[int, int], root: int) -> set[int]:
    """The processes below ``root``, from each process's parent."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    frontier = [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                # the parent: the second field after the name, which ends at the last ")"
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def member_processes(root: int) -> frozenset[int]:
    """The simulators alive below ``root`` (a zombie's command line is empty: not alive)."""
    alive: set[int] = set()
    for pid in descendants(_parents(), root):
        with contextlib.suppress(OSError):
            if SIM_ARGV in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.add(pid)
    return frozenset(alive)


@contextlib.contextmanager
def sampling(root: int, every: float = SAMPLE_SECONDS) -> Iterator[list[Sample]]:
    """Reads :func:`member_processes` every ``every`` seconds, in a thread, until the block ends."""
    samples: list[Sample] = []
    done = threading.Event()

    def sample() -> None:
        while True:
            samples.append((time.monotonic(), member_processes(root)))
            if done.wait(every):
                return

    thread = threading.Thread(target=sample, name="member-processes", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join()


# -- the run -------------------------------------------------------------------------------------


def run_system(name: str, url: str, traces: tuple[Trace, ...]) -> list[Row]:
    rows = []
    for trace in traces:
        print(f"{name}: {trace.name} ({trace.seconds:.0f} s)", flush=True)
        answers = anyio.run(replay, url, trace)
        rows.append(judge(name, trace, answers))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
        time.sleep(3)  # let the slot settle between traces
    return rows


@contextlib.contextmanager
def budget_system(system: str, budget: int, ours: Path) -> Iterator[Served]:
    """One of :data:`BUDGET_SYSTEMS`, fresh, with :data:`BUDGET_POOL`'s default member loaded."""
    _, members, _ = BUDGET_POOL
    if system == "llama-swap":
        config = llama_swap_config(members, budget=budget, preload=members[0])
        with llama_swap(config) as served:
            _loaded(served, model(members[0]))
            yield served
    elif system in ("ours", "exclusive"):
        capacity = budget if system == "ours" else None
        objects = pool_objects(pools=(BUDGET_POOL,), capacity=capacity)
        with pool_system(ours, objects=objects) as served:
            yield served
    else:
        raise SystemExit(f"unknown system {system!r} ({', '.join(BUDGET_SYSTEMS)})")


def _loaded(served: Served, name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while load_counts(served.server_logs().splitlines())[name] == 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} was not loaded within {timeout:.0f} s")
        time.sleep(0.2)


@contextlib.contextmanager
def idle_system(system: str, ours: Path) -> Iterator[Served]:
    """One of :data:`IDLE_SYSTEMS`, fresh, on :data:`IDLE_POOL`'s members."""
    _, members, _ = IDLE_POOL
    if system == "llama-swap":
        with llama_swap(llama_swap_config(members, ttl=IDLE_AFTER_SECONDS)) as served:
            yield served
    elif system in ("ours-held", "ours-release"):
        scheduling = None
        if system == "ours-release":
            scheduling = {"idleAfter": f"{IDLE_AFTER_SECONDS}s", "idleAction": "Release"}
        objects = pool_objects(pools=(IDLE_POOL,), scheduling=scheduling)
        with pool_system(ours, objects=objects) as served:
            yield served
    else:
        raise SystemExit(f"unknown system {system!r} ({', '.join(IDLE_SYSTEMS)})")


def run_idle(systems: Sequence[str], ours: Path) -> list[IdleRow]:
    """:data:`IDLE_TRACE` on a fresh system of each kind, after one request for its first member
    (loaded at the trace's start in every system); the member processes read from the trace's
    start to its end, its last quiet gap included."""
    _, members, _ = IDLE_POOL
    warm_up = Trace("warm-up", (Client(members[0], "at", times=(0.0,)),), seconds=0.0)
    rows: list[IdleRow] = []
    for system in systems:
        print(f"{system}: {IDLE_TRACE.name} ({IDLE_TRACE.seconds:.0f} s)", flush=True)
        with idle_system(system, ours) as served:
            (first,) = anyio.run(replay, served.url, warm_up)
            if first.status != 200:
                raise SystemExit(f"{system}: the warm-up request was answered {first.status}")
            with sampling(served.root) as samples:
                start = time.monotonic()
                answers = anyio.run(replay, served.url, IDLE_TRACE)
                time.sleep(max(0.0, start + IDLE_TRACE.seconds - time.monotonic()))
                end = time.monotonic()
            if not samples[0][1]:
                raise SystemExit(f"{system}: no simulator below process {served.root}")
        rows.append(judge_idle(system, answers, samples, start, end))
        print(idle_table(rows[-1:]).splitlines()[-1], flush=True)
    return rows


def run_budget(
    systems: Sequence[str], budget: int, traces: tuple[Trace, ...], ours: Path
) -> list[BudgetRow]:
    """Each trace on a fresh system of each kind; the loads counted from the trace's start to
    :data:`SETTLE_SECONDS` after its last answer."""
    _, members, _ = BUDGET_POOL
    rows: list[BudgetRow] = []
    for system in systems:
        for trace in traces:
            print(f"{system} (budget {budget}): {trace.name} ({trace.seconds:.0f} s)", flush=True)
            with budget_system(system, budget, ours) as served:
                before = load_counts(served.server_logs().splitlines())
                answers = anyio.run(replay, served.url, trace)
                time.sleep(SETTLE_SECONDS)
                loads = load_counts(served.server_logs().splitlines()) - before
            rows.append(judge_budget(system, trace, answers, loads, members))
            print(budget_table(rows[-1:], members).splitlines()[-1], flush=True)
    return rows


def table(rows: list[Row]) -> str:
    head = (
        "| trace | system | requests | not answered | max wait s | p99 wait s | "
        "sparse max wait s | swaps | served per swap | slot idle between models s |"
    )
    lines = [head, "|" + "---|" * 10]
    for row in sorted(rows, key=lambda r: (r.trace, r.system)):
        lines.append(
            f"| {row.trace} | {row.system} | {row.requests} | {row.failed} | "
            f"{row.max_wait:.1f} | {row.p99_wait:.1f} | {row.sparse_max_wait:.1f} | {row.swaps} | "
            f"{row.served_per_swap:.1f} | {row.idle_between:.1f} |"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def ours_tree(rev: str | None) -> Iterator[Path]:
    """This working tree, or a scratch worktree of ``rev``."""
    if rev is None:
        yield REPO
    else:
        with baseline_tree(rev, "ours") as tree:
            yield tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--systems",
        help="ours,before,llama-swap (the default); with --budget: ours,exclusive,llama-swap; "
        "with --idle: ours-held,ours-release,llama-swap",
    )
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    parser.add_argument(
        "--ours-rev", help="run ours from a scratch worktree of this commit (default: this tree)"
    )
    parser.add_argument(
        "--budget",
        type=int,
        help="the budget mode: a pool of three members of which BUDGET may run at once",
    )
    parser.add_argument(
        "--idle",
        action="store_true",
        help="the idle mode: bursts for a2 with quiet gaps; the GPU given back and what it costs",
    )
    parser.add_argument(
        "--traces", help="with --budget: only the traces whose names hold one of these (a,b,...)"
    )
    parser.add_argument(
        "--seconds", type=float, default=45.0, help="each trace's length (not with --idle)"
    )
    args = parser.parse_args()
    if args.idle:
        systems = (args.systems or ",".join(IDLE_SYSTEMS)).split(",")
        with ours_tree(args.ours_rev) as tree:
            idle_rows = run_idle(systems, tree)
        print(idle_table(idle_rows))
        return
    if args.budget is not None:
        _, members, _ = BUDGET_POOL
        picked = [
            t
            for t in BUDGET_TRACES
            if not args.traces or any(part in t.name for part in args.traces.split(","))
        ]
        traces = tuple(Trace(t.name, t.clients, args.seconds) for t in picked)
        systems = (args.systems or ",".join(BUDGET_SYSTEMS)).split(",")
        with ours_tree(args.ours_rev) as tree:
            budget_rows = run_budget(systems, args.budget, traces, tree)
        print(budget_table(budget_rows, members))
        return
    traces = tuple(Trace(t.name, t.clients, args.seconds) for t in TRACES)
    rows: list[Row] = []
    for system in (args.systems or "ours,before,llama-swap").split(","):
        if system == "ours":
            with ours_tree(args.ours_rev) as tree, pool_system(tree) as served:
                rows += run_system(system, served.url, traces)
        elif system == "before":
            with (
                baseline_tree(args.baseline_rev) as tree,
                pool_system(tree, scheduler=False) as served,
            ):
                rows += run_system(system, served.url, traces)
        elif system == "llama-swap":
            with llama_swap() as served:
                rows += run_system(system, served.url, traces)
        else:
            raise SystemExit(f"unknown system {system!r} (ours, before, llama-swap)")
    print(table(rows))


if __name__ == "__main__":
    main()
