"""``make bench-no-cut``: a load run in which no path may cut a request (issue 46, "Done when").

*Why a benchmark and not a test:* the promise is about a long run with everything that stops a
server in it at once (swaps, idle reclaims, a proxy rollout), under steady load; the e2e tests
show each path alone in seconds. This run takes minutes on purpose and is never part of
``make test``; its exit status is the check (non-zero if anything was cut or refused without a
``Retry-After``), so the command itself says whether the promise held.

The system is ``make dev``'s, nothing lighter (:func:`bench.real_pool.local_pool`): a real
control plane on loopback, the operator under its ServiceAccount, the node stand-in playing the
members as simulators (2 s load, 20 ms a token) and the router's proxy pods as router-proxy
processes. Pool ``gpu-0`` has members ``a`` (its default) and ``b``, :data:`SLOTS` slots each,
``idleAfter`` :data:`IDLE_AFTER_SECONDS` with ``idleAction: Release`` (an idle pool gives its slot
back, and the next request brings it back); router ``router`` runs :data:`PROXY_REPLICAS` proxy
replicas, reached through the stand-in's one address for the router's Service (a round-robin
forwarder to its ready endpoints, per connection, as kube-proxy would).

The load, for ``--minutes`` (default 10): :data:`LOOPERS` clients each looping streamed
completions of model-a back to back, and one client alternating model-a and model-b with a pause
of :data:`PAUSE_SECONDS` between requests (each request a swap while the loopers hold the slot).
Every :data:`BUSY_SECONDS` all of them stop for :data:`QUIET_SECONDS`, longer than ``idleAfter``
plus the pool's activity window, so the pool reclaims the slot and the next request brings it
back cold. Each stream asks for :data:`TOKENS` tokens (``ignore_eos``), 1 to 3 s at 20 ms a token.
A client answered with a refusal waits its ``Retry-After`` (at most :data:`MAX_RETRY_WAIT`) and
goes on, as openai-python does.

``--rollouts`` times (default 2, spread over the run, always inside a busy period) the router's
proxy pods are replaced as ``kubectl rollout restart`` of a Deployment with ``maxSurge: 1`` /
``maxUnavailable: 0`` replaces them: one at a time, each deleted (graceful, the pod's grace period)
once the replicas before it are all Ready again. The stand-in's own ReplicaSet stand-in replaces
every stale pod at once on a template change, which is not what a cluster does, so the rollout
is driven pod by pod here.

Counted per client kind: answers by status; streams whole (``[DONE]`` after a finish reason, no
error event: :class:`bench.streamread.Stream`) or cut (anything else after a 200, a transport
error mid-body); requests with no answer at all (a transport error before the status line);
refusals with and without ``Retry-After``; latency (sent to the last byte) p50/p95/max of the
200s. Beside: the swaps and reclaims the pool recorded (its ``SwapCompleted`` and ``Reclaimed``
events during the run), and each proxy pod replaced: the requests in flight when it was deleted
and how they ended. The record goes to ``bench/results/no_cut_bench-<stamp>.json``; on a failure
the system's logs (operator, stand-in, every pod) are kept and their folder printed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import httpx

from bench.dataplane_clients import chat_body
from bench.fairness_bench import Pool, model, pool_objects, quantile
from bench.real_pool import NAMESPACE, ROUTER, RealPool, local_pool
from bench.streamread import Stream
from controlplane.controllers.modelrouter import ROUTER_LABEL

REPO: Final = Path(__file__).resolve().parents[1]
POOL: Final[Pool] = ("gpu-0", ("a", "b"), {})
SLOTS: Final = 8
PROXY_REPLICAS: Final = 2
LOOPERS: Final = 8
#: Tokens a stream asks for (drawn per request): 1 to 3 s at the stand-in's 20 ms a token.
TOKENS: Final = (50, 150)
#: The alternating client's pause between two requests, drawn per pause.
PAUSE_SECONDS: Final = (1.0, 4.0)
IDLE_AFTER_SECONDS: Final = 5
#: The load's rhythm: everyone busy, then everyone quiet (longer than ``idleAfter``, the pool's
#: 2 s activity window, its whole-second clock and the drain, so that the slot is given back).
BUSY_SECONDS: Final = 45.0
QUIET_SECONDS: Final = 30.0
#: Longer than the pool's swapBudget (120 s): a held request is answered or refused by then.
REQUEST_TIMEOUT: Final = 180.0
MAX_RETRY_WAIT: Final = 10.0
#: How long one proxy pod of a rollout may take to be replaced and to drain.
ROLLOUT_STEP_TIMEOUT: Final = 180.0
LOOPING: Final = "looping a"
ALTERNATING: Final = "alternating a/b"


@dataclass
class Request:
    """One request and how it ended: ``whole``, ``cut`` (a 200 whose stream did not end whole),
    ``no answer`` (a transport error before the status line) or ``refused`` (any other status)."""

    kind: str
    member: str
    sent: float
    #: ``sent`` on the wall clock, to find the request in the proxies' and the operator's logs.
    wall: float = field(default_factory=time.time)
    ended: float = math.nan
    status: int | None = None
    retry_after: str | None = None
    outcome: str = "pending"
    tokens: int = 0
    detail: str = ""
    #: Seconds since the same client's previous request ended: near 0 for a looper, which sends
    #: its next request on the kept-alive connection the moment the last answer ends.
    gap: float = math.nan

    @property
    def seconds(self) -> float:
        return self.ended - self.sent

    @property
    def failed(self) -> bool:
        """What the promise forbids: a cut, no answer, or a refusal without a ``Retry-After``."""
        return self.outcome in ("cut", "no answer") or (
            self.outcome == "refused" and self.retry_after is None
        )


@dataclass
class Replaced:
    """One proxy pod of a rollout: when it was deleted (seconds into the run), how long its
    replacement took to be Ready and the pod to be gone, and the requests in flight at deletion."""

    pod: str
    deleted: float
    replaced_after: float = math.nan
    gone_after: float = math.nan
    in_flight: dict[str, int] = field(default_factory=dict)


@dataclass
class Run:
    start: float
    end: float
    requests: list[Request] = field(default_factory=list)
    replaced: list[Replaced] = field(default_factory=list)

    def quiet(self, at: float) -> float:
        """Seconds left of the quiet period ``at`` falls in (0 in a busy period)."""
        into = (at - self.start) % (BUSY_SECONDS + QUIET_SECONDS)
        return max(0.0, BUSY_SECONDS + QUIET_SECONDS - into) if into >= BUSY_SECONDS else 0.0


def rollout_times(seconds: float, rollouts: int) -> list[float]:
    """Seconds into the run of each rollout: evenly spread, each moved out of a quiet period to
    5 s into the next busy one (a rollout with nothing in flight would prove nothing)."""
    cycle = BUSY_SECONDS + QUIET_SECONDS
    times = []
    for index in range(1, rollouts + 1):
        at = seconds * index / (rollouts + 1)
        if at % cycle >= BUSY_SECONDS:
            at = (at // cycle + 1) * cycle + 5.0
        times.append(min(at, seconds - 10.0))
    return times


async def ask(http: httpx.AsyncClient, url: str, run: Run, kind: str, member: str,
              rng: random.Random, previous: Request | None) -> Request:  # fmt: skip
    """One streamed completion, read to its end and judged."""
    request = Request(kind, member, time.monotonic())
    if previous is not None:
        request.gap = request.sent - previous.ended
    run.requests.append(request)
    body = chat_body(model(member), stream=True, max_tokens=rng.randint(*TOKENS))
    stream = Stream()
    try:
        async with http.stream(
            "POST", f"{url}/v1/chat/completions", content=body,
            headers={"content-type": "application/json"},
        ) as response:  # fmt: skip
            request.status = response.status_code
            request.retry_after = response.headers.get("retry-after")
            if response.status_code != 200:
                request.outcome = "refused"
                request.detail = (await response.aread())[:300].decode(errors="replace")
                return request
            async for line in response.aiter_lines():
                stream.read(line)
        request.outcome = "whole" if stream.whole else "cut"
        if not stream.whole:
            request.detail = f"done={stream.done} finish={stream.finish_reason} {stream.errors}"
    except httpx.HTTPError as err:
        request.outcome = "no answer" if request.status is None else "cut"
        request.detail = f"{type(err).__name__}: {err}"
    except ValueError as err:  # an event that is not JSON: a stream broken mid-event
        request.outcome = "cut"
        request.detail = f"{type(err).__name__}: {err}"
    finally:
        request.ended = time.monotonic()
        request.tokens = stream.tokens
    return request


async def client(url: str, run: Run, kind: str, seed: int) -> None:
    """A looper (model-a back to back) or the alternating client (a, pause, b, pause, ...);
    both stop through the quiet periods and wait a refusal's ``Retry-After``."""
    rng = random.Random(seed)
    members = ["a"] if kind == LOOPING else ["a", "b"]
    turn = 0
    request: Request | None = None
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, trust_env=False) as http:
        while (now := time.monotonic()) < run.end:
            if wait := run.quiet(now):
                await anyio.sleep(min(wait, run.end - now))
                continue
            member = members[turn % len(members)]
            request = await ask(http, url, run, kind, member, rng, request)
            turn += 1
            if request.outcome == "refused":
                await anyio.sleep(retry_wait(request.retry_after))
            if kind == ALTERNATING:
                await anyio.sleep(rng.uniform(*PAUSE_SECONDS))


def retry_wait(retry_after: str | None) -> float:
    """A refusal's ``Retry-After`` in seconds, bounded; 1 s when it has none or not a number."""
    try:
        return min(MAX_RETRY_WAIT, max(0.0, float(retry_after or 1)))
    except ValueError:
        return 1.0


# -- the rollout ---------------------------------------------------------------------------------


def proxy_pods(pool: RealPool) -> list[dict[str, Any]]:
    return pool.listed("pods", f"{ROUTER_LABEL}={ROUTER}")


def ready_live(pods: list[dict[str, Any]]) -> list[str]:
    """The pods not Terminating whose Ready condition is True."""
    return [
        pod["metadata"]["name"]
        for pod in pods
        if not pod["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or ()
        )
    ]


def rollout(pool: RealPool, run: Run) -> None:
    """Replace every proxy pod, one at a time, then wait for the old ones to be gone (drained);
    in a thread, since kubectl blocks."""
    old = ready_live(proxy_pods(pool))
    for name in old:
        deleted = time.monotonic()
        in_flight = Counter(r.kind for r in run.requests if r.outcome == "pending")
        record = Replaced(name, deleted - run.start, in_flight=dict(in_flight))
        run.replaced.append(record)
        print(f"rollout: deleting proxy pod {name} ({sum(in_flight.values())} requests in flight)",
              flush=True)  # fmt: skip
        pool.kubectl("delete", "pod", "-n", NAMESPACE, name, "--wait=false")
        record.replaced_after = waited(
            lambda: len(ready_live(proxy_pods(pool))) >= PROXY_REPLICAS, deleted
        )
    for record in run.replaced[-len(old) :]:
        record.gone_after = waited(partial(gone, pool, record.pod), run.start + record.deleted)


def gone(pool: RealPool, name: str) -> bool:
    return all(pod["metadata"]["name"] != name for pod in proxy_pods(pool))


def waited(done: Callable[[], bool], since: float) -> float:
    """Seconds from ``since`` until ``done()`` (polled); NaN past :data:`ROLLOUT_STEP_TIMEOUT`."""
    while not done():
        if time.monotonic() - since > ROLLOUT_STEP_TIMEOUT:
            return math.nan
        time.sleep(0.5)
    return time.monotonic() - since


async def rollouts(pool: RealPool, run: Run, at: list[float]) -> None:
    for when in at:
        await anyio.sleep(max(0.0, run.start + when - time.monotonic()))
        await anyio.to_thread.run_sync(rollout, pool, run)


# -- the run -------------------------------------------------------------------------------------


def pool_events(pool: RealPool) -> Counter[str]:
    """Occurrences per reason of the pool's events (an event's series counts its repeats)."""
    found = json.loads(
        pool.kubectl("get", "events.v1.events.k8s.io", "-n", NAMESPACE, "-o", "json")
    )
    counts: Counter[str] = Counter()
    for event in found.get("items") or ():
        if (event.get("regarding") or {}).get("kind") == "ModelPool":
            counts[str(event.get("reason"))] += int((event.get("series") or {}).get("count", 1))
    return counts


async def load(pool: RealPool, run: Run, rollout_at: list[float]) -> None:
    async with anyio.create_task_group() as group:
        for index in range(LOOPERS):
            group.start_soon(client, pool.url, run, LOOPING, index)
        group.start_soon(client, pool.url, run, ALTERNATING, LOOPERS)
        group.start_soon(rollouts, pool, run, rollout_at)


def summary(run: Run, events: Counter[str]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for kind in (LOOPING, ALTERNATING):
        mine = [r for r in run.requests if r.kind == kind]
        ok = [r.seconds for r in mine if r.outcome == "whole"]
        refused = [r for r in mine if r.outcome == "refused"]
        kinds[kind] = {
            "requests": len(mine),
            "by model": dict(Counter(r.member for r in mine)),
            "statuses": dict(Counter(str(r.status) for r in mine)),
            "whole": len(ok),
            "cut": sum(1 for r in mine if r.outcome == "cut"),
            "no answer": sum(1 for r in mine if r.outcome == "no answer"),
            "refused with Retry-After": sum(1 for r in refused if r.retry_after is not None),
            "refused without Retry-After": sum(1 for r in refused if r.retry_after is None),
            "latency p50 s": quantile(ok, 0.5),
            "latency p95 s": quantile(ok, 0.95),
            "latency max s": max(ok, default=math.nan),
        }
    return {
        "seconds": run.end - run.start,
        "kinds": kinds,
        "pool events": dict(events),
        "replaced": [asdict(r) for r in run.replaced],
        "rollout outcomes": rollout_outcomes(run),
        "refused": [asdict(r) for r in run.requests if r.outcome == "refused"],
        "failed": [asdict(r) for r in run.requests if r.failed],
    }


def rollout_outcomes(run: Run) -> dict[str, int]:
    """How the requests in flight at any proxy pod's deletion ended."""
    at = [run.start + r.deleted for r in run.replaced]
    caught = [r for r in run.requests if any(r.sent <= t <= r.ended for t in at)]
    return dict(Counter(r.outcome for r in caught))


def table(record: dict[str, Any]) -> Iterator[str]:
    yield (
        "| client | requests | statuses | streams whole | cut | no answer | refused with "
        "Retry-After | refused without | latency p50 / p95 / max s |"
    )
    yield "|" + "---|" * 9
    for kind, row in record["kinds"].items():
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(row["statuses"].items()))
        yield (
            f"| {kind} ({row['by model']}) | {row['requests']} | {statuses} | {row['whole']} | "
            f"{row['cut']} | {row['no answer']} | {row['refused with Retry-After']} | "
            f"{row['refused without Retry-After']} | {row['latency p50 s']:.2f} / "
            f"{row['latency p95 s']:.2f} / {row['latency max s']:.2f} |"
        )


def report(record: dict[str, Any]) -> None:
    print("\n".join(table(record)))
    events = record["pool events"]
    print(
        f"pool events during the run: SwapCompleted {events.get('SwapCompleted', 0)}, "
        f"Reclaimed {events.get('Reclaimed', 0)}, SwapStarted {events.get('SwapStarted', 0)} "
        f"(all: {events})"
    )
    for r in record["replaced"]:
        print(
            f"proxy pod {r['pod']} deleted at {r['deleted']:.0f} s with {r['in_flight']} in "
            f"flight: replacement Ready after {r['replaced_after']:.1f} s, pod gone after "
            f"{r['gone_after']:.1f} s"
        )
    print(f"requests in flight at a proxy pod's deletion, by outcome: {record['rollout outcomes']}")
    for r in record["refused"]:
        print(f"refused: {r['kind']} {r['member']} {r['status']} Retry-After {r['retry_after']} "
              f"after {r['ended'] - r['sent']:.1f} s: {r['detail'][:160]}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rollouts", type=int, default=2)
    args = parser.parse_args()
    seconds = args.minutes * 60
    scheduling = {"idleAfter": f"{IDLE_AFTER_SECONDS}s", "idleAction": "Release"}
    objects = pool_objects(
        pools=(POOL,), scheduling=scheduling, slots=SLOTS, proxy_replicas=PROXY_REPLICAS
    )
    with local_pool(objects, prefix="bench-no-cut-") as pool:
        before = pool_events(pool)
        start = time.monotonic()
        run = Run(start, start + seconds)
        at = rollout_times(seconds, args.rollouts)
        wall = time.strftime("%H:%M:%S", time.gmtime())
        print(f"load for {seconds:.0f} s from {wall} UTC at {pool.url}; proxy rollouts at {at} s",
              flush=True)  # fmt: skip
        anyio.run(load, pool, run, at)
        record = summary(run, pool_events(pool) - before)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = REPO / "bench" / "results" / f"no_cut_bench-{stamp}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(record, indent=1, default=str))
        report(record)
        print(f"record: {out}")
        failed = record["failed"]
        if failed:
            for r in failed[:20]:
                wall = (
                    time.strftime("%H:%M:%S", time.gmtime(r["wall"])) + f"{r['wall'] % 1:.3f}"[1:]
                )
                print(f"  FAILED {r['kind']} {r['member']} sent at {r['sent'] - start:.1f} s "
                      f"({wall} UTC, "
                      f"{r['gap']:.3f} s after its client's previous answer ended): "
                      f"{r['outcome']}, status {r['status']}, {r['detail']}")  # fmt: skip
            raise SystemExit(
                f"{len(failed)} requests cut, unanswered or refused without Retry-After"
            )
    print("no request cut; every refusal had a Retry-After")


if __name__ == "__main__":
    main()
