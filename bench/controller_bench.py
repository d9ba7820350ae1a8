"""Comparative controller benchmark (issue 3): our framework against kopf and controller-runtime.

One real control plane, one run: a namespaced custom resource, ``--objects`` objects of about the
size of a real Pod, then for each peer in turn, as a subprocess speaking the JSON-lines protocol of
``bench/README.md``: the time to a synced cache, the update throughput of one reconcile worker for
a burst of one update per object, and resident memory per cached object against the objects' raw
JSON size. Usage and method: ``bench/README.md``.

    .venv/bin/python -m bench.controller_bench --objects 5000 --peers controller-runtime,kopf,ours
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import msgspec

from controlplane.envtest import ControlPlane
from controlplane.envtest.binaries import cache_root
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.errors import AlreadyExists, KubeError
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES, Resource

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
PEERS_DIR = BENCH / "peers"
GO_PEER_DIR = PEERS_DIR / "controller-runtime"
RESULTS_DIR = BENCH / "results"
DEFAULT_PEERS = ("controller-runtime", "controller-runtime-typed", "kopf", "ours")
#: The Go peers: one binary, unstructured by default, typed structs with ``--typed``.
GO_PEERS = {"controller-runtime": [], "controller-runtime-typed": ["--typed"]}
#: ``kopf-index`` is kopf holding every object in an index (a cache); slow to start, so optional.
ALL_PEERS = (*DEFAULT_PEERS, "kopf-index")

GROUP = "bench.modelpool.dev"
VERSION = "v1alpha1"
PLURAL = "benchobjects"
KIND = "BenchObject"
RESOURCE = Resource(GROUP, VERSION, PLURAL, KIND)
#: Characters of ``spec.payload``; with labels, annotations and managedFields an object is then
#: about 1.8 KB of JSON, the size of a typical Pod.
DEFAULT_PAYLOAD = 900

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- set-up ----------------------------------------------------------------------------------------


def control_plane_assets() -> None:
    """Make sure ``KUBEBUILDER_ASSETS`` names the control-plane binaries (built on first use)."""
    if os.environ.get("KUBEBUILDER_ASSETS"):
        return
    log("locating the control-plane binaries (hack/build-controlplane.sh; builds on first use)")
    done = subprocess.run(
        [str(REPO / "hack" / "build-controlplane.sh")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    os.environ["KUBEBUILDER_ASSETS"] = done.stdout.strip().splitlines()[-1]


def go_peer_binary() -> Path:
    """Build the controller-runtime peer unless its binary is newer than every source file."""
    binary = cache_root() / "bench-peers" / "controller-runtime-peer"
    sources = [GO_PEER_DIR / name for name in ("main.go", "go.mod", "go.sum")]
    sources += sorted((GO_PEER_DIR / "api").rglob("*.go"))
    newest_source = max(path.stat().st_mtime for path in sources)
    if binary.is_file() and binary.stat().st_mtime > newest_source:
        log(f"controller-runtime peer is up to date ({binary})")
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).is_file():
        raise SystemExit("error: 'go' is needed to build the controller-runtime peer")
    binary.parent.mkdir(parents=True, exist_ok=True)
    log(f"building the controller-runtime peer into {binary} (about a minute the first time)")
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local")}
    build = subprocess.Popen(
        [go, "build", "-v", "-trimpath", "-o", str(binary), "."],
        cwd=GO_PEER_DIR,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert build.stderr is not None
    packages = 0
    for line in build.stderr:
        packages += 1
        if line.startswith(("go: downloading", "#")) or "error" in line or ".go:" in line:
            log(f"  {line.rstrip()}")
        elif packages % 50 == 0:
            log(f"  compiled {packages} packages ...")
    if build.wait() != 0:
        raise SystemExit("error: building the controller-runtime peer failed (see above)")
    log(f"built the controller-runtime peer ({packages} packages)")
    return binary


def crd() -> Object:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "benchobject", "kind": KIND},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "round": {"type": "integer"},
                                        "payload": {"type": "string"},
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def bench_object(index: int, namespace: str, payload_chars: int) -> Object:
    """One object shaped like a real workload's: labels, annotations and an opaque payload."""
    name = f"obj-{index:05d}"
    digest = hashlib.sha256(name.encode()).hexdigest()
    payload = (digest * (payload_chars // len(digest) + 1))[:payload_chars]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "bench",
                "app.kubernetes.io/instance": name,
                "app.kubernetes.io/part-of": "modelpool-controller-bench",
                "bench.modelpool.dev/shard": str(index % 16),
            },
            "annotations": {
                "bench.modelpool.dev/owner": f"team-{index % 7}",
                "bench.modelpool.dev/checksum": digest,
            },
        },
        "spec": {"round": 0, "payload": payload},
    }


async def wait_until_served(client: KubeClient, namespace: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = await client.get(CUSTOM_RESOURCE_DEFINITIONS, f"{PLURAL}.{GROUP}")
            conditions = (found.get("status") or {}).get("conditions") or []
            established = any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            )
            if established:
                await client.list(RESOURCE, namespace, page_size=1)
                return
        except KubeError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"error: the CRD {PLURAL}.{GROUP} was not served in {timeout:.0f} s")
        await asyncio.sleep(0.1)


@dataclass
class WriteStats:
    count: int
    first_sent: float
    last_acked: float
    errors: int

    @property
    def seconds(self) -> float:
        return self.last_acked - self.first_sent

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")


async def write_all(
    count: int, concurrency: int, write: Callable[[int], Awaitable[object]]
) -> WriteStats:
    """Call ``write(i)`` for every ``i`` from ``concurrency`` writers; time first send, last ack."""
    next_index = 0
    first_sent = float("inf")
    last_acked = 0.0
    errors = 0

    async def writer() -> None:
        nonlocal next_index, first_sent, last_acked, errors
        while next_index < count:
            index = next_index
            next_index += 1
            first_sent = min(first_sent, time.time())
            try:
                await write(index)
            except KubeError as err:
                errors += 1
                if errors <= 3:
                    log(f"  write {index} failed: {err}")
            last_acked = max(last_acked, time.time())

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    return WriteStats(count, first_sent, last_acked, errors)


# -- peers -----------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (all its threads), from ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peer_command(peer: str, go_binary: Path | None) -> list[str] | None:
    """The peer's command line, or None when the peer does not exist (yet)."""
    if peer in GO_PEERS:
        return [str(go_binary), *GO_PEERS[peer]] if go_binary is not None else None
    module = {"kopf": "kopf_peer", "kopf-index": "kopf_peer", "ours": "ours"}[peer]
    if not (PEERS_DIR / f"{module}.py").is_file():
        return None
    extra = ["--with-index"] if peer == "kopf-index" else []
    return [sys.executable, "-m", f"bench.peers.{module}", *extra]


_METRIC = re.compile(
    r"^(apiserver_request_total|apiserver_terminated_watchers_total)\{(.*)\} (\S+)$"
)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def watch_counters(plane: ControlPlane) -> dict[str, float]:
    """The API server's own count of LIST and WATCH requests and of watchers it closed as too
    slow, for the benchmark's resource: how a peer got its events (a relist is not a replay)."""
    with plane.admin_http() as http:
        text = http.get("/metrics").text
    counters = {"LIST": 0.0, "WATCH": 0.0, "terminated_watchers": 0.0}
    for line in text.splitlines():
        match = _METRIC.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        if labels.get("resource") != PLURAL:
            continue
        if match.group(1) == "apiserver_terminated_watchers_total":
            counters["terminated_watchers"] += float(match.group(3))
        elif labels.get("verb") in ("LIST", "WATCH"):
            counters[labels["verb"]] += float(match.group(3))
    return counters


class PeerFailed(Exception):
    pass


@dataclass
class PeerProcess:
    """A running peer: its protocol events as they arrive, keyed by name (the first of each)."""

    name: str
    process: asyncio.subprocess.Process
    started: float
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False

    async def read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                log(f"  {self.name}: not a protocol line: {raw[:200]!r}")
                continue
            if not isinstance(line, dict) or "event" not in line:
                continue
            line["received"] = time.time()
            event = str(line["event"])
            if event == "progress":
                log(
                    f"  {self.name}: {line.get('reconciled', '?')} at target, "
                    f"{line.get('reconciles_total', '?')} reconciles"
                )
            self.events.setdefault(event, line)
            self.arrived.set()
        self.ended = True
        self.arrived.set()

    async def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while event not in self.events:
            if self.ended:
                raise PeerFailed(f"peer {self.name!r} exited before {event!r}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerFailed(f"peer {self.name!r} sent no {event!r} in {timeout:.0f} s")
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining)
        return self.events[event]

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGCONT)
            if self.process.stdin is not None:
                self.process.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                log(f"  {self.name}: no exit 15 s after SIGTERM; killing it")
                self.process.kill()
                await self.process.wait()


def updater(client: KubeClient, namespace: str, round_: int) -> Callable[[int], Awaitable[object]]:
    async def update(index: int) -> object:
        patch = {"spec": {"round": round_}}
        return await client.patch(RESOURCE, f"obj-{index:05d}", patch, namespace)

    return update


async def replay_burst(
    peer: PeerProcess,
    client: KubeClient,
    plane: ControlPlane,
    args: argparse.Namespace,
    round_: int,
) -> dict[str, Any]:
    """Stop the peer, write the burst, resume it: how fast it drains N events it has not read.

    The API server does not wait for a watcher that stops reading: once the watcher's buffer is
    full it closes that watch, and the peer re-watches from the last resourceVersion it saw and
    gets the rest from the server's watch cache. The LIST/WATCH counters show whether that
    happened and, above all, whether the peer had to relist instead (then this is not a replay).
    """
    n = args.objects
    pid = peer.process.pid
    before = watch_counters(plane)
    os.kill(pid, signal.SIGSTOP)
    log(f"peer {peer.name}: stopped; replay burst of {n} updates (spec.round -> {round_})")
    try:
        writes = await write_all(n, args.writers, updater(client, args.namespace, round_))
        await asyncio.sleep(args.replay_pause)
        cpu_before = cpu_seconds(pid)
    finally:
        resumed = time.time()
        os.kill(pid, signal.SIGCONT)
    log(
        f"peer {peer.name}: resumed after {resumed - writes.first_sent:.1f} s "
        f"({writes.rate:.0f} writes/s)"
    )
    replayed = await peer.wait_for("replayed", args.timeout)
    cpu = cpu_seconds(pid) - cpu_before
    after = watch_counters(plane)
    seconds = replayed["t"] - resumed
    return {
        "updates": n,
        "stopped_seconds": resumed - writes.first_sent,
        "write_rate": writes.rate,
        "write_errors": writes.errors,
        "drain_seconds": seconds,
        "throughput_per_second": n / seconds,
        "reconciles": int(replayed.get("reconciles_total", 0))
        - int(peer.events["done"].get("reconciles_total", 0)),
        "peer_cpu_seconds": cpu,
        "peer_cpu_us_per_update": cpu / n * 1e6,
        "apiserver": {key: after[key] - before[key] for key in after},
    }


async def run_peer(
    *,
    peer: str,
    command: list[str],
    target: int,
    replay_target: int | None,
    args: argparse.Namespace,
    kubeconfig: Path,
    client: KubeClient,
    plane: ControlPlane,
    stderr: TextIO,
) -> dict[str, Any]:
    n = args.objects
    argv = [
        *command,
        f"--namespace={args.namespace}",
        f"--expect={n}",
        f"--target={target}",
        *([f"--replay-target={replay_target}"] if replay_target is not None else []),
        f"--group={GROUP}",
        f"--version={VERSION}",
        f"--plural={PLURAL}",
        f"--kind={KIND}",
    ]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    log(f"peer {peer}: starting (burst target spec.round={target})")
    started = time.time()
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )
    peer_process = PeerProcess(peer, process, started)
    reader = asyncio.create_task(peer_process.read())
    result: dict[str, Any] = {"peer": peer, "command": argv}
    try:
        ready = await peer_process.wait_for("ready", args.timeout)
        synced = await peer_process.wait_for("synced", args.timeout)
        log(f"peer {peer}: synced {synced.get('objects')} objects in {synced['t'] - started:.2f} s")
        settled = await peer_process.wait_for("settled", args.timeout)
        # Let the start-up pass's last reconcile finish and the memory figure arrive.
        with contextlib.suppress(PeerFailed):
            await peer_process.wait_for("memory", 5.0)
        await asyncio.sleep(1.0)

        api_pids = {
            name: proc.pid for name, proc in plane.processes.items() if proc.pid is not None
        }
        cpu_before = cpu_seconds(process.pid)
        api_cpu_before = {name: cpu_seconds(pid) for name, pid in api_pids.items()}
        own_cpu_before = time.process_time()
        log(f"peer {peer}: burst of {n} updates (spec.round -> {target})")

        writes = await write_all(n, args.writers, updater(client, args.namespace, target))
        own_cpu = time.process_time() - own_cpu_before
        log(
            f"peer {peer}: burst written in {writes.seconds:.2f} s "
            f"({writes.rate:.0f} writes/s, {writes.errors} errors)"
        )
        done = await peer_process.wait_for("done", args.timeout)
        cpu_burst = cpu_seconds(process.pid) - cpu_before
        api_cpu = {name: cpu_seconds(pid) - api_cpu_before[name] for name, pid in api_pids.items()}
        memory = peer_process.events.get("memory")
        throughput_s = done["t"] - writes.first_sent
        result.update(
            {
                "startup_seconds": ready["t"] - started,
                "sync_seconds": synced["t"] - started,
                "list_to_synced_seconds": synced["t"] - ready["t"],
                "settled_seconds": settled["t"] - started,
                "burst": {
                    "updates": n,
                    "writers": args.writers,
                    "write_seconds": writes.seconds,
                    "write_rate": writes.rate,
                    "write_errors": writes.errors,
                    "done_after_first_write_seconds": throughput_s,
                    "throughput_per_second": n / throughput_s,
                    "lag_after_last_write_seconds": done["t"] - writes.last_acked,
                    "reconciles": int(done.get("reconciles_total", 0))
                    - int(settled.get("reconciles_total", 0)),
                    "peer_cpu_seconds": cpu_burst,
                    "peer_cpu_us_per_update": cpu_burst / n * 1e6,
                    "writer_cpu_seconds": own_cpu,
                    "control_plane_cpu_seconds": api_cpu,
                },
                "memory": {
                    "ready_rss_bytes": ready["rss_bytes"],
                    "synced_rss_bytes": synced["rss_bytes"],
                    "per_object_bytes": (synced["rss_bytes"] - ready["rss_bytes"]) / n,
                    "after_gc_rss_bytes": memory["rss_bytes"] if memory else None,
                    "per_object_after_gc_bytes": (memory["rss_bytes"] - ready["rss_bytes"]) / n
                    if memory
                    else None,
                },
            }
        )
        log(
            f"peer {peer}: done; {n / throughput_s:.0f} updates/s, "
            f"lag {result['burst']['lag_after_last_write_seconds']:.2f} s, "
            f"{result['memory']['per_object_bytes']:.0f} B/object"
        )
        if replay_target is not None:
            await asyncio.sleep(1.0)
            replay = await replay_burst(peer_process, client, plane, args, replay_target)
            result["replay"] = replay
            log(
                f"peer {peer}: replay drained in {replay['drain_seconds']:.2f} s "
                f"({replay['throughput_per_second']:.0f} updates/s); API server saw "
                f"{replay['apiserver']}"
            )
    except PeerFailed as err:
        log(f"peer {peer}: FAILED: {err}")
        result["error"] = str(err)
    finally:
        result["events"] = peer_process.events
        await peer_process.stop()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        result["exit_code"] = process.returncode
    return result


# -- report ----------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def report(results: dict[str, Any]) -> str:
    raw = results["objects"]["raw_json_bytes_per_object"]
    n = results["objects"]["count"]
    rows = [
        (
            "peer",
            "sync s",
            "settled s",
            "updates/s",
            "writes/s",
            "lag s",
            "reconciles",
            "CPU us/upd",
            "replay/s",
            "replay CPU us",
            "RSS B/obj",
            "x raw",
            "after GC",
        )
    ]
    for peer in results["peers"]:
        if "error" in peer:
            rows.append((peer["peer"], peer["error"], *[""] * 11))
            continue
        burst, memory = peer["burst"], peer["memory"]
        after_gc = memory["per_object_after_gc_bytes"]
        replay = peer.get("replay")
        rows.append(
            (
                peer["peer"],
                f"{peer['sync_seconds']:.2f}",
                f"{peer['settled_seconds']:.2f}",
                f"{burst['throughput_per_second']:.0f}",
                f"{burst['write_rate']:.0f}",
                f"{burst['lag_after_last_write_seconds']:.2f}",
                str(burst["reconciles"]),
                f"{burst['peer_cpu_us_per_update']:.0f}",
                f"{replay['throughput_per_second']:.0f}" if replay else "-",
                f"{replay['peer_cpu_us_per_update']:.0f}" if replay else "-",
                f"{memory['per_object_bytes']:.0f}",
                f"{memory['per_object_bytes'] / raw:.1f}",
                f"{after_gc:.0f}" if after_gc is not None else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        f"{n} objects, {raw:.0f} B of raw JSON each; one reconcile worker per peer",
        "",
        *("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows),
    ]
    ratios = results["ratios"]
    if ratios:
        lines += ["", "ratios (throughput: higher is better; time, CPU, memory: lower is better)"]
        for name, values in ratios.items():
            shown = ", ".join(
                f"{key} {value:.2f}" for key, value in values.items() if value is not None
            )
            lines.append(f"  {name}: {shown}")
    for verdict in results["targets"]:
        lines.append(verdict)
    return "\n".join(lines)


def compare(by_peer: dict[str, dict[str, Any]], a: str, b: str) -> dict[str, float | None]:
    pa, pb = by_peer[a], by_peer[b]
    ra, rb = pa.get("replay"), pb.get("replay")
    return {
        "replay_throughput": ratio(ra["throughput_per_second"], rb["throughput_per_second"])
        if ra and rb
        else None,
        "replay_cpu_per_update": ratio(ra["peer_cpu_us_per_update"], rb["peer_cpu_us_per_update"])
        if ra and rb
        else None,
        "live_throughput": ratio(
            pa["burst"]["throughput_per_second"], pb["burst"]["throughput_per_second"]
        ),
        "sync_seconds": ratio(pa["sync_seconds"], pb["sync_seconds"]),
        "cpu_per_update": ratio(
            pa["burst"]["peer_cpu_us_per_update"], pb["burst"]["peer_cpu_us_per_update"]
        ),
        "memory_per_object": ratio(
            pa["memory"]["per_object_bytes"], pb["memory"]["per_object_bytes"]
        ),
    }


def ratios_and_targets(results: dict[str, Any]) -> None:
    by_peer = {p["peer"]: p for p in results["peers"] if "error" not in p}
    ratios: dict[str, dict[str, float | None]] = {}
    for a, b in (
        ("ours", "kopf"),
        ("ours", "controller-runtime"),
        ("ours", "controller-runtime-typed"),
        ("controller-runtime", "kopf"),
    ):
        if a in by_peer and b in by_peer:
            ratios[f"{a}/{b}"] = compare(by_peer, a, b)
    targets: list[str] = []
    if "ours" in by_peer:
        raw = results["objects"]["raw_json_bytes_per_object"]
        # The live burst is bounded by the writer on a small machine; the replay is not.
        key = "replay_throughput" if results["config"]["replay"] else "live_throughput"
        checks: list[tuple[str, float | None, float]] = [
            (f"{key} >= 3x kopf", ratios.get("ours/kopf", {}).get(key), 3.0),
            (
                f"{key} within 3x of controller-runtime",
                ratios.get("ours/controller-runtime", {}).get(key),
                1 / 3,
            ),
            (
                f"{key} at least the typed controller-runtime peer's",
                ratios.get("ours/controller-runtime-typed", {}).get(key),
                1.0,
            ),
            (
                "cached memory <= 2x raw JSON",
                2.0 * raw / by_peer["ours"]["memory"]["per_object_bytes"],
                1.0,
            ),
        ]
        for label, value, floor in checks:
            if value is None:
                targets.append(f"target {label}: not measured")
            else:
                targets.append(f"target {label}: {'PASS' if value >= floor else 'FAIL'}")
    results["ratios"] = ratios
    results["targets"] = targets


# -- main ------------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, commands: dict[str, list[str]]) -> dict[str, Any]:
    n = args.objects
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "config": {k: v for k, v in vars(args).items() if k != "output"},
        "peers": [],
    }
    log("starting a control plane (etcd + kube-apiserver)")
    with ControlPlane() as plane:
        log(f"control plane up: {plane.startup_seconds}")
        kubeconfig = plane.admin_kubeconfig
        config = ClientConfig.from_kubeconfig(kubeconfig)
        async with KubeClient(config, max_connections=args.writers) as client:
            with contextlib.suppress(AlreadyExists):
                await client.create(
                    NAMESPACES,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args.namespace}},
                )
            await client.create(CUSTOM_RESOURCE_DEFINITIONS, crd())
            await wait_until_served(client, args.namespace)
            log(f"creating {n} objects with {args.writers} concurrent writers")

            async def create(index: int) -> object:
                return await client.create(
                    RESOURCE, bench_object(index, args.namespace, args.payload), args.namespace
                )

            created = await write_all(n, args.writers, create)
            log(f"created {n} objects in {created.seconds:.2f} s ({created.rate:.0f}/s)")
            if created.errors:
                raise SystemExit(f"error: {created.errors} objects could not be created")
            listed = await client.list(RESOURCE, args.namespace)
            sizes = [len(msgspec.json.encode(item)) for item in listed.items]
            results["objects"] = {
                "count": len(listed.items),
                "raw_json_bytes_per_object": sum(sizes) / len(sizes),
                "raw_json_bytes_min": min(sizes),
                "raw_json_bytes_max": max(sizes),
                "payload_chars": args.payload,
                "create_seconds": created.seconds,
                "create_rate": created.rate,
            }
            log(
                f"objects are {sum(sizes) / len(sizes):.0f} B of JSON each as listed "
                f"({min(sizes)} to {max(sizes)})"
            )
            logs_dir = args.output / f"controller_bench-{args.stamp}-logs"
            logs_dir.mkdir(parents=True, exist_ok=True)
            for index, peer in enumerate(args.peers):
                if peer not in commands:
                    results["peers"].append({"peer": peer, "error": f"peer {peer!r} not found"})
                    continue
                with (logs_dir / f"{peer}.stderr.log").open("w") as stderr:
                    results["peers"].append(
                        await run_peer(
                            peer=peer,
                            command=commands[peer],
                            target=2 * index + 1,
                            replay_target=2 * index + 2 if args.replay else None,
                            args=args,
                            kubeconfig=kubeconfig,
                            client=client,
                            plane=plane,
                            stderr=stderr,
                        )
                    )
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=5000, help="custom objects (default 5000)")
    parser.add_argument(
        "--peers",
        default=",".join(DEFAULT_PEERS),
        help=f"comma-separated, run in this order, from {', '.join(ALL_PEERS)} "
        f"(default {','.join(DEFAULT_PEERS)})",
    )
    parser.add_argument(
        "--writers", type=int, default=4, help="concurrent writers for creates and the burst"
    )
    parser.add_argument(
        "--payload", type=int, default=DEFAULT_PAYLOAD, help="characters of spec.payload"
    )
    parser.add_argument("--namespace", default="bench")
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds each peer may take for each phase"
    )
    parser.add_argument(
        "--no-replay",
        dest="replay",
        action="store_false",
        help="skip the replay burst (peer stopped while the burst is written, then resumed)",
    )
    parser.add_argument(
        "--replay-pause",
        type=float,
        default=2.0,
        help="seconds the peer stays stopped after the replay burst is written",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR, help="where results go")
    args = parser.parse_args(argv)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in args.peers if p not in ALL_PEERS]
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(ALL_PEERS)}")
    args.stamp = time.strftime("%Y%m%d-%H%M%S")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    commands: dict[str, list[str]] = {}
    go_binary = go_peer_binary() if set(GO_PEERS) & set(args.peers) else None
    for peer in args.peers:
        command = peer_command(peer, go_binary)
        if command is None:
            log(f"peer {peer!r} not found (bench/peers/{peer}.py); running the others only")
            if len(args.peers) == 1:
                return 1
        else:
            commands[peer] = command
    if not commands:
        log("no peer to run")
        return 1
    control_plane_assets()
    results = asyncio.run(bench(args, commands))
    ratios_and_targets(results)
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / f"controller_bench-{args.stamp}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(report(results))
    print(f"\nresults: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 0 if all("error" not in p for p in results["peers"] if p["peer"] in commands) else 1


if __name__ == "__main__":
    sys.exit(main())
