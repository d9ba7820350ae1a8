"""Switching models: llama.cpp's own router mode against our pool, with the same two tiny models
and the same request sequence.

* **llama.cpp router mode** (a peer that swaps models inside one server, on one machine):
  ``llama-server --models-dir DIR --models-max 1`` with ``DIR`` holding the two models as
  ``tiny-a.gguf`` and ``tiny-b.gguf``, and the member's flags (``--parallel 1 --ctx-size 8192
  --threads 1``), which it passes to the child ``llama-server`` it starts per model. At the
  maximum of one it stops the idle one before it starts the other.
* **ours**: the local tier with real members (:func:`bench.real_pool.real_pool`, ``spec.kvCache``
  off): the request goes to the router's proxy, which holds it, takes the pool's Lease and has
  the pool controller drain the resident (idle gate on ``/slots``, scale to 0, wait until its pod
  and process are gone) and bring the other up (a new pod, its ``llama-server`` started, Ready
  from ``/health``, the EndpointSlice), then forwards it.
* **ours with a slot server** (issue 22): the same pool, members and sequence, but with
  ``spec.slotServer`` (the members' flags in ``slotServer.args``, their weights ``file://`` node
  files linked to the same models): one long-lived ``llama-server`` in router mode
  (``--models-max 1 --no-models-autoload``) in a pod of the pool's own. The proxy holds the
  request and takes the Lease as above; the pool controller unloads the resident through the
  server's API once ``/slots?model=`` is idle, loads the other, sees it ``loaded`` on ``/models``
  and names it resident; then the proxy forwards. No pod stops or starts.

The sequence (:func:`bench.real_pool.alternate`): ``tiny-a``, then ``--switches`` requests
alternating ``tiny-b`` and ``tiny-a``, each followed by a second request to the same model (no
switch), every one with the same prompt of about 420 tokens and 8 tokens to generate. The
switch time is the client's time for the request that switched; the second request's time is
what a request costs without a switch, for scale. After each switch in router mode, and in our
slot server (reached through its Service's EndpointSlice ``<pool>-slot``, not through our proxy),
the benchmark checks that ``/models`` lists only the model asked for as loaded; at the end of the
slot-server run, that no member pod ran and the server's pod is the one it started with. Last,
for the reading, what both modes pay in every switch measured alone: a ``llama-server`` with the
model, start to ``/health`` 200 and SIGTERM to exit.

    KUBEBUILDER_ASSETS=$(hack/build-controlplane.sh 2>/dev/null | tail -1) \\
      .venv/bin/python -m bench.router_mode_bench \\
      --server $(hack/build-llama-server.sh 2>/dev/null | tail -1) [--switches 10]

or ``make bench-router-mode`` (``BENCH_ARGS="--switches 20"``). ``--systems`` runs only some of
the three (``router-mode``, ``pods``, ``slot-server``; all by default), to repeat one quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx

from bench.real_pool import (
    CONTEXT,
    MEMBERS,
    POOL,
    READY_TIMEOUT,
    Answer,
    Switch,
    alternate,
    model_name,
    models,
    real_pool,
)
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL
from controlplane.envtest.ports import free_port

#: The label on every member's pod (none should run in a slot-server pool).
MEMBER_POD_LABEL: Final = "inference.modelpool.dev/inferenceservice"

#: What router mode's ``/models`` says of a model with a running child.
LOADED: Final = "loaded"


@contextlib.contextmanager
def router_mode(server: Path) -> Iterator[str]:
    """``llama-server`` in router mode over the two models, at most one loaded; its URL."""
    with tempfile.TemporaryDirectory(prefix="bench-router-mode-") as folder:
        for member, path in models().items():
            (Path(folder) / f"{model_name(member)}.gguf").symlink_to(path)
        port = free_port()
        argv = [str(server), "--models-dir", folder, "--models-max", "1",
                "--host", "127.0.0.1", "--port", str(port),
                "--parallel", "1", "--ctx-size", str(CONTEXT), "--threads", "1"]  # fmt: skip
        log = Path(folder) / "router-mode.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not _healthy(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"router mode did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.02)
            yield url
        finally:
            process.terminate()  # it stops its children on the way out
            process.wait(timeout=60)


def _healthy(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200
    return False


def loaded_models(url: str) -> list[str]:
    answer = httpx.get(f"{url}/models", timeout=10, trust_env=False).json()
    return [m["id"] for m in answer["data"] if (m.get("status") or {}).get("value") == LOADED]


def only_loaded(url: str, system: str) -> Callable[[Switch], None]:
    """The check after each switch: ``url``'s ``/models`` lists exactly the model just asked
    for as loaded (at most one, and the right one)."""

    def check(switch: Switch) -> None:
        loaded = loaded_models(url)
        if loaded != [switch.cold.model]:
            raise SystemExit(f"{system}: loaded {loaded} after switching to {switch.cold.model}")

    return check


def run_router_mode(server: Path, switches: int) -> tuple[Answer, list[Switch]]:
    with router_mode(server) as url:
        return alternate(url, switches, after_switch=only_loaded(url, "router mode"))


def server_alone(server: Path, rounds: int) -> tuple[list[float], list[float]]:
    """What both modes pay for in every switch, measured alone: one ``llama-server`` with the
    model and the member's flags, from its start to ``/health`` 200, and from SIGTERM to its
    exit (seconds, ``rounds`` times)."""
    starts: list[float] = []
    stops: list[float] = []
    model = models()[MEMBERS[0]]
    for _ in range(rounds):
        port = free_port()
        argv = [str(server), "--model", str(model), "--alias", model_name(MEMBERS[0]),
                "--host", "127.0.0.1", "--port", str(port),
                "--parallel", "1", "--ctx-size", str(CONTEXT), "--threads", "1"]  # fmt: skip
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not _healthy(f"http://127.0.0.1:{port}"):
                if process.poll() is not None or time.perf_counter() - started > READY_TIMEOUT:
                    raise SystemExit(f"llama-server did not start: {argv}")
                time.sleep(0.005)
            starts.append(time.perf_counter() - started)
        finally:
            stopping = time.perf_counter()
            process.terminate()
            process.wait(timeout=60)
            stops.append(time.perf_counter() - stopping)
    return starts, stops


def run_ours(server: Path, switches: int) -> tuple[Answer, list[Switch]]:
    with real_pool(server, kv_cache=False) as pool:
        return alternate(pool.url, switches)


def run_ours_slot_server(server: Path, switches: int) -> tuple[Answer, list[Switch]]:
    """The pool with a slot server: the requests through our proxy as for :func:`run_ours`; the
    checks straight at the server (``/models`` after each switch, its pod and no member pod at
    the end), so what is measured swapped inside one server and nowhere else."""
    with real_pool(server, kv_cache=False, slot_server=True) as pool:
        url = pool.slot_server_url()
        before = _uids(pool.listed("pods", f"{SLOT_SERVER_LABEL}={POOL}"))
        run = alternate(pool.url, switches, after_switch=only_loaded(url, "our slot server"))
        after = _uids(pool.listed("pods", f"{SLOT_SERVER_LABEL}={POOL}"))
        if before != after or len(after) != 1:
            raise SystemExit(f"our slot server's pod changed: {before} then {after}")
        members = pool.listed("pods", MEMBER_POD_LABEL)
        if members:
            raise SystemExit(f"member pods ran beside the slot server: {_names(members)}")
        return run


def _uids(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(str(o["metadata"]["uid"]) for o in objects)


def _names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(str(o["metadata"]["name"]) for o in objects)


def _ms(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.0f} ({min(ms):.0f} to {max(ms):.0f})"


def report(runs: dict[str, tuple[Answer, list[Switch]]]) -> None:
    print(f"{len(next(iter(runs.values()))[1])} switches per run; ms, median (min to max)")
    print("| measure | " + " | ".join(runs) + " |")
    print("|---" * (len(runs) + 1) + "|")

    def cost(first: Answer, switched: list[Switch]) -> str:
        cold = statistics.median(x.cold.seconds for x in switched)
        return f"{(cold - statistics.median(x.warm.seconds for x in switched)) * 1000:.0f}"

    rows: list[tuple[str, Callable[[Answer, list[Switch]], str]]] = [
        (f"first request ({model_name(MEMBERS[0])})", lambda f, s: _ms([f.seconds])),
        ("the request that switched", lambda f, s: _ms([x.cold.seconds for x in s])),
        ("the next request (no switch)", lambda f, s: _ms([x.warm.seconds for x in s])),
        ("switch cost (difference of the medians)", cost),
        ("prompt tokens processed after a switch",
         lambda f, s: f"{statistics.median(x.cold.timings['prompt_n'] for x in s):g}"),
    ]  # fmt: skip
    for label, cell in rows:
        print(f"| {label} | " + " | ".join(cell(*run) for run in runs.values()) + " |")


#: ``--systems`` names: the column of each in the table, and how to run it.
SYSTEMS: Final[dict[str, tuple[str, Callable[[Path, int], tuple[Answer, list[Switch]]]]]] = {
    "router-mode": ("llama.cpp router mode (--models-max 1)", run_router_mode),
    "pods": ("ours (pool of 2 real members, via the router-proxy)", run_ours),
    "slot-server": (
        "ours with a slot server (router mode in one pod, via the router-proxy)",
        run_ours_slot_server,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, required=True, help="the llama-server binary")
    parser.add_argument("--switches", type=int, default=10, help="switches per run (>= 1)")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, of {', '.join(SYSTEMS)} (default: all, in that order)",
    )
    args = parser.parse_args()
    if args.switches < 1:
        parser.error("--switches must be at least 1")
    chosen = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SYSTEMS]
    if unknown or not chosen:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    runs: dict[str, tuple[Answer, list[Switch]]] = {}
    for name in SYSTEMS:
        if name in chosen:
            runs[name] = SYSTEMS[name][1](args.server, args.switches)
    report({SYSTEMS[name][0]: run for name, run in runs.items()})
    starts, stops = server_alone(args.server, args.switches)
    print(f"\nllama-server alone ({args.switches} times), ms, median (min to max): start to "
          f"/health 200 {_ms(starts)}; SIGTERM to exit {_ms(stops)}")  # fmt: skip
    if "router-mode" in runs:
        if "slot-server" in runs:
            print(
                summary_line(runs["router-mode"][1], runs["slot-server"][1], "ours (slot server)")
            )
        if "pods" in runs:
            print(summary_line(runs["router-mode"][1], runs["pods"][1]))


def summary_line(router_mode: list[Switch], ours: list[Switch], label: str = "ours") -> str:
    """One line a script reads: the switch medians of router mode and of one of ours (``label``:
    ``ours`` for member pods, as before the slot server) and their ratio."""
    theirs = statistics.median(x.cold.seconds for x in router_mode) * 1000
    mine = statistics.median(x.cold.seconds for x in ours) * 1000
    return f"switch: {label} {mine:.0f} ms, router mode {theirs:.0f} ms, ratio {mine / theirs:.2f}x"


if __name__ == "__main__":
    main()
