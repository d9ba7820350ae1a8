"""``make bench-fairness``: who gets the slot, and when, under fixed arrival traces.

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
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import yaml

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
#: Pools: (name, members, priorities).
POOLS: Final[tuple[tuple[str, tuple[str, ...], dict[str, int]], ...]] = (
    ("pool-2", ("a2", "b2"), {}),
    ("pool-3", ("a3", "b3", "c3"), {"c3": 10}),
)


def model(member: str) -> str:
    return f"model-{member}"


@dataclass(frozen=True)
class Client:
    """One client of a trace: ``loop`` (back to back), ``gappy`` (a pause drawn from ``pause``
    between requests), or ``at`` (one request at each of ``times``)."""

    member: str
    kind: str
    pause: tuple[float, float] = (0.0, 0.0)
    times: tuple[float, ...] = ()


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
    while time.monotonic() - start < seconds:
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


def _quantile(values: list[float], fraction: float) -> float:
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
        _quantile(waits, 0.99),
        max(sparse_waits, default=math.nan),
        swaps,
        len(ok) / max(swaps, 1),
        idle,
    )


# -- the systems ---------------------------------------------------------------------------------


def pool_objects(*, scheduler: bool = True) -> list[dict[str, Any]]:
    """The namespace, the members, both pools and the router; without ``scheduler`` the pools
    carry no ``priority`` (the API before the scheduler refuses the unknown field)."""
    group = "inference.modelpool.dev/v1alpha1"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    ]
    for pool, members, priorities in POOLS:
        for index, member in enumerate(members):
            objects.append(
                {
                    "apiVersion": group,
                    "kind": "InferenceService",
                    "metadata": {"name": member, "namespace": NAMESPACE},
                    "spec": {
                        "model": {"name": model(member), "source": f"/models/{member}.gguf"},
                        "args": ["--parallel", str(SLOTS)],
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
        objects.append(
            {
                "apiVersion": group,
                "kind": "ModelPool",
                "metadata": {"name": pool, "namespace": NAMESPACE},
                "spec": {"members": entries, "default": members[0], "swapBudget": "120s"},
            }
        )
    objects.append(
        {
            "apiVersion": group,
            "kind": "ModelRouter",
            "metadata": {"name": ROUTER, "namespace": NAMESPACE},
            "spec": {
                "backends": [{"name": pool, "poolRef": {"name": pool}} for pool, _, _ in POOLS]
            },
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
                kubectl("wait", "-n", "bench", "--timeout=180s",
                        "--for=jsonpath={.status.phase}=Ready", f"{kind}/{obj['metadata']['name']}")
        print("ROUTER", wait_router_address(node, "bench/router", timeout=180), flush=True)
        sys.stdin.read()
finally:
    plane.stop()
    shutil.rmtree(workdir, ignore_errors=True)
"""


@contextlib.contextmanager
def pool_system(tree: Path, *, scheduler: bool = True) -> Iterator[str]:
    """The local system of ``tree`` with :func:`pool_objects`; yields the router's address."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
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
        url = None
        for line in runner.stdout:
            print(f"  [{tree.name}] {line.rstrip()}", flush=True)
            if line.startswith("ROUTER "):
                url = line.split()[1]
                break
        if url is None:
            raise SystemExit(f"the system of {tree} did not start (exit {runner.wait()})")
        _ready(f"{url}/readyz")
        yield url
    finally:
        runner.stdin.close()
        try:
            runner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            runner.kill()


@contextlib.contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="bench-fairness-baseline-"))
    tree = work / "before"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), rev],
                   check=True)  # fmt: skip
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False
        )
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def llama_swap() -> Iterator[str]:
    """The peer with our simulator as each model (same load time, slots and token time)."""
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
    sim = f"{sys.executable} -m controlplane.cli sim --host 127.0.0.1 --port ${{PORT}}"
    config = {
        "healthCheckTimeout": 120,
        "models": {
            model(member): {
                "cmd": f"{sim} --model-name {model(member)} --load-seconds {LOAD_SECONDS} "
                f"--slots {SLOTS} --token-seconds {TOKEN_SECONDS}",
                "proxy": "http://127.0.0.1:${PORT}",
                "checkEndpoint": "/health",
            }
            for _, members, _ in POOLS
            for member in members
        },
    }
    work = Path(tempfile.mkdtemp(prefix="bench-llama-swap-"))
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    port = _free_port()
    process = subprocess.Popen(
        [binary, "-config", str(work / "config.yaml"), "-listen", f"127.0.0.1:{port}"],
        cwd=REPO,
        stdout=(work / "llama-swap.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _ready(f"{url}/v1/models")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(work, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer 200 within {timeout:.0f} s")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default="ours,before,llama-swap")
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    parser.add_argument("--seconds", type=float, default=45.0, help="each trace's length")
    args = parser.parse_args()
    traces = tuple(Trace(t.name, t.clients, args.seconds) for t in TRACES)
    rows: list[Row] = []
    for system in args.systems.split(","):
        if system == "ours":
            with pool_system(REPO) as url:
                rows += run_system(system, url, traces)
        elif system == "before":
            with (
                baseline_tree(args.baseline_rev) as tree,
                pool_system(tree, scheduler=False) as url,
            ):
                rows += run_system(system, url, traces)
        elif system == "llama-swap":
            with llama_swap() as url:
                rows += run_system(system, url, traces)
        else:
            raise SystemExit(f"unknown system {system!r} (ours, before, llama-swap)")
    print(table(rows))


if __name__ == "__main__":
    main()
