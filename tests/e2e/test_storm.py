"""The swap storm: 1, 2 and 3 router-proxy replicas under load and chaos, the invariant watched.

One run (per replica count) against the real API server, the operator under its ServiceAccount,
the node stand-in (simulators; 1 s model loads) and router-proxy processes authenticated as the
ServiceAccount the ModelRouter controller made for them (``router-proxy``, bound to the
activation Role the operator wrote), each with a Lease of :data:`LEASE_SECONDS`
(``--lease-duration-seconds``) so that Lease expiry happens within the run:

* two pools of three members (``pool-x``: x1 x2 x3, ``pool-y``: y1 y2 y3), every member its own
  model; y3 loads in :data:`SLOW_LOAD_SECONDS`, longer than three Lease durations, so its swap
  lives only if the holder renews; the run with three replicas (``3-proxies-budget-2``) gives
  pool-x a budget of two members (``spec.capacity.members: 2``, docs/modelpool.md "Several
  residents"): x1 and x2 may be resident together, x3 evicts one of them, and three replicas race
  to choose which;
* the run with two replicas (``2-proxies-slot-server-y``) makes pool-y a **slot-server pool**
  (``spec.slotServer``, docs/modelpool.md "One slot server"): one long-lived server that the
  stand-in plays with the simulator's router mode, a child process per loaded model; a swap
  unloads and loads models in it, and no member pod is ever made. Its members read their weights
  from node files (``file://``, under :data:`SLOT_MODELS`). Only the server's arguments apply to
  its models, so the slow load is the server's (:data:`SLOT_SERVER_ARGS`): every pool-y model,
  y3 included, loads in :data:`SLOW_LOAD_SECONDS`, and every pool-y swap must outlive three Lease
  durations (so pool-y's clients are held longer, many until the 503 at the budget, and this
  run's clients take the longest to send their requests, still within :data:`STORM_DEADLINE`).
  The ``/slots`` failure (below) is a switch of a member's own simulator, which the router does
  not pass on to its children, so that run breaks a pool-x resident's;
* :data:`CLIENTS` concurrent clients send at least :data:`REQUESTS` requests in streaks of one
  model (so swaps happen and requests coalesce), mixing plain and streamed completions, clients
  that close mid-stream or mid-hold, and bad requests (no ``messages``, an unknown model, a body
  over ``--max-body-bytes``);
* two **busy tenants** beside them, the load that starved a pool's other members before its
  scheduler: clients looping plain completions for x1 and for x2 (:data:`TENANTS`), back to
  back, through any replica, for as long as the other clients run; their waits per member are
  printed against the pool's bound, with pool-x's swaps per minute and requests per swap;
* chaos, in order, while the clients run: one member's ``/slots`` answers 500 for a while (a
  timed switch of the simulator, so it cannot stay broken); the replica holding a pool's Lease
  mid-swap (``spec.holderIdentity``) is SIGKILLed, after its ``/metrics`` is scraped, and replaced
  by a new replica, as a Deployment would; kube-apiserver is SIGSTOPped for
  :data:`FREEZE_SECONDS` mid-swap (SIGCONT always follows); then every pool-y client asks for
  y3, the slow member.

The operator is supervised: a 10 s freeze outlasts its leader-election renew deadline, and a
leader that cannot renew exits (as controller-runtime's does); like a Deployment, the test
starts it again and counts the restarts.

Assertions, all on what was observed (no timing is asserted):

1. Every 200 came from the model asked for (the simulator names its model in every answer and
   chunk), and a full stream ends with ``[DONE]``.
2. Every other answer is a 503 with ``Retry-After`` and a known reason, or the 400/404/413 a
   deliberately bad request asked for, or a 502 ``pool_activation_failed`` for a request that
   overlapped an injected failure of its pool. A request with no HTTP answer was either cut by
   its own client on purpose or sent to a replica the test killed.
3. The invariant monitor (:mod:`tests.e2e.invariants`) never saw two members of a pool (three
   of pool-x with its budget of two) run together, by pods (watch order) or by processes
   (``/proc``).
4. **Swaps are counted exactly once.** The residency changes are the pool's
   ``status.residentMember`` moves, in watch order (a move from no resident, the default warming
   a cold pool, is the controller's doing, not a swap). ``modelpool_swaps_total{pool,from,to}``
   is summed over every replica that ever ran: the live ones at the end, the killed one as
   scraped right before it was killed. What "exactly once" can mean when the driver is killed
   mid-swap: the counter lives in the driver's memory and dies with it, and only the driver
   counts (docs/router.md). So the swap the killed replica was driving is counted once if another
   replica re-claimed the expired Lease and finished it, and **not at all** if the pool
   controller finished it under the dead holder's still-valid intent (or if it finished in the
   instant between the scrape and the kill). Nothing else may be missing: for every
   ``(pool, from, to)`` the replicas count at most the changes seen, and the only change
   allowed to go uncounted is one change to the killed holder's target in each pool whose Lease
   it held when it was killed (a replica may drive both pools' swaps at once). Never twice.
5. At the end the pools settle: no pool Lease held, and at most one member per pool running
   (at most two of pool-x with its budget), the pool's residents (the monitor's settle check,
   with held Leases as violations; in the slot server, the children it runs). y3 was resident at
   least once: a load longer than three Lease durations did not lose its swap. In the slot-server
   run, what "no member pod" means is checked too: no pool-y member pod was ever added (the
   monitor's pod watch), the server's pod is the one that was there at the start (a replaced pod
   would have killed what ran in it), and the monitor saw the server's child for every member that
   was ever resident in pool-y, so the "never two members" judgement above had processes to judge.

6. **Every held request gets its turn within its bound while the pool is healthy** (local storm):
   a busy tenant's request that neither overlaps an injected failure nor starts within one bound
   after one ends (the queue that built up meanwhile drains in that time) is answered 200 within
   :func:`tenant_bound`, the docs' ``maxWait + (members - 1) * (drain + swap)`` with the storm's
   longest request as the drain and a swap allowance for this loaded machine. The pool's
   ``swapBudget`` (40 s) is above the bound (36.5 s), as a pool's should be: a request is judged
   by the bound, answered 200 within it, never refused 503 at a budget shorter than the policy's
   own wait.

The figures (requests, swaps, time to answer p50/p99, outcomes by reason, the tenants' waits
against the bound) are printed.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
import httpx
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.api.v1alpha1.activation import pool_lease_name, read_activation
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL
from controlplane.controllers.modelrouter import activation_name, proxy_name
from controlplane.local.system import RouterProxyProcess, kubeconfig_for_token
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import ready_urls
from controlplane.runtime.errors import KubeError, NotFound
from controlplane.runtime.resources import ENDPOINT_SLICES, EVENTS, LEASES, PODS, ROLE_BINDINGS
from controlplane.scheduling.policy import Settings, wait_bound
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.invariants import PoolInvariantMonitor, Violation
from tests.e2e.kubectl import REPO, install
from tests.e2e.operator_process import (
    LocalProcess,
    OperatorProcess,
    service_account_token,
    start_node,
    start_operator,
    wait_until_ready,
)
from tests.e2e.test_standin_pods import node_folder
from tests.e2e.waiting import eventually

# Marked here, not only by conftest after collection: anyio must see the mark while pytest
# parametrizes, or the replica counts are lost.
pytestmark = pytest.mark.anyio

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
ROUTER = ModelRouter.resource()
Object = dict[str, Any]

POOLS: Final = {"pool-x": ("x1", "x2", "x3"), "pool-y": ("y1", "y2", "y3")}
ROUTER_NAME: Final = "router"
#: The proxies' pool Lease duration (renewed every third of it).
LEASE_SECONDS: Final = 4
SLOW_MEMBER: Final = "y3"
SLOW_POOL: Final = "pool-y"
#: Longer than three Lease durations: the holder must renew through the load.
SLOW_LOAD_SECONDS: Final = 3 * LEASE_SECONDS + 2
LOAD_SECONDS: Final = 1.0
TOKEN_SECONDS: Final = 0.01
#: Above the scheduler's own bound for pool-x (:func:`tenant_bound`, 36.5 s): a budget below it
#: refuses a request the policy may rightly keep waiting that long. Under CI's load (the kind
#: tier beside 4 workers) pool-x's swaps take 8 to 12 s, and a busy tenant's request held behind
#: two turns was refused at the former 30 s budget in 3 runs of 6 since the fenced drain (never
#: on a quiet machine): 503 at 30 s, within the 36.5 s bound. ``maxWait`` stays 12.5 s
#: (:data:`MAX_WAIT`), so the bound is unchanged, and a request answered after it is a breach.
SWAP_BUDGET: Final = "40s"
SWAP_BUDGET_SECONDS: Final = 40.0
#: The scheduler's bound, as the 25 s budget gave it (half the budget).
MAX_WAIT: Final = "12.5s"
CLIENTS: Final = 20
REQUESTS: Final = 320
#: The proxies refuse bodies over this (``--max-body-bytes``); the oversized ones are just over.
MAX_BODY_BYTES: Final = 64 * 1024
MAX_OVERSIZED: Final = 6
FREEZE_SECONDS: Final = 10.0
SLOTS_FAILURE_SECONDS: Final = 6.0
#: A client's own timeout for requests that are not cut on purpose: the budget and then some.
CLIENT_TIMEOUT: Final = SWAP_BUDGET_SECONDS + 35.0
#: How long the clients may run at most; the requests are normally sent well before.
STORM_DEADLINE: Final = 150.0
#: A 502 ``pool_activation_failed`` is expected for a request overlapping an injected failure of
#: its pool, until this long after the failure ended (a Lease expiry, then a budget).
FAILURE_AFTERMATH: Final = 3 * LEASE_SECONDS + SWAP_BUDGET_SECONDS
#: How long after a replica is killed a request sent through a Service may still be routed to
#: it (the Service drops it once the EndpointSlice update reaches kube-proxy). A replica the
#: test runs itself takes no request once killed.
KILL_AFTERMATH: Final = 10.0
KNOWN_503: Final = frozenset(
    {
        "pool_activation_timeout",
        "pool_busy",
        "pool_lease_unavailable",
        "proxy_not_ready",
        "proxy_stopping",
    }
)
#: Request kinds and their weights.
KINDS: Final = (
    ("chat", 50),
    ("stream", 20),
    ("stream-cut", 8),
    ("hold-cut", 8),
    ("no-messages", 5),
    ("unknown-model", 5),
    ("oversized", 4),
)
EXPECTED_BAD: Final = {"no-messages": 400, "unknown-model": 404, "oversized": 413}
#: Busy tenants: one client per member looping requests for it back to back (pool-x).
TENANTS: Final = ("x1", "x2")
TENANT_POOL: Final = "pool-x"
#: Where a slot-server pool's members' weights are on the node (``file://``): a slot server
#: mounts node files, not a member's image.
SLOT_MODELS: Final = "/var/lib/modelpool/storm-models"
#: A slot server's arguments are every model's (a member's ``spec.args`` do not apply), so the
#: slow member's load is the whole server's: each of its swaps outlives three Lease durations.
SLOT_SERVER_ARGS: Final = ("--parallel", "2", "--sim-load-seconds", str(SLOW_LOAD_SECONDS))


def model_of(member: str) -> str:
    return f"model-{member}"


def pool_of(member: str) -> str:
    return next(pool for pool, members in POOLS.items() if member in members)


# -- what happened ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One request as its client saw it."""

    client: int
    kind: str
    member: str
    proxy: str
    started: float
    ended: float = 0.0
    status: int | None = None
    code: str = ""
    retry_after: str | None = None
    answered_by: list[str] = field(default_factory=list)
    complete: bool = False
    first_byte: float | None = None
    error: str = ""
    #: Sent by a busy tenant (:data:`TENANTS`), not by one of the storm's clients.
    tenant: bool = False

    @property
    def pool(self) -> str | None:
        return pool_of(self.member) if self.member else None

    def window(self, origin: float) -> str:
        """When it was sent and ended, in seconds from ``origin`` (the storm's start)."""
        return f"+{self.started - origin:.1f}..{self.ended - origin:.1f}s"

    def reason(self) -> str:
        if self.status is None:
            return f"no answer ({self.error.split(':')[0]})"
        return f"{self.status} {self.code}".strip()


@dataclass
class Window:
    """An injected failure: of one pool (or all), from ``start`` to ``end`` (monotonic)."""

    what: str
    pool: str | None
    start: float
    end: float


@dataclass
class Kill:
    proxy: str
    pool: str
    target: str
    at: float
    swaps: Counter[tuple[str, str, str]]


@dataclass
class Storm:
    """Shared state of one run."""

    rng_seed: int
    #: The proxies' ``--max-body-bytes``: oversized requests are just over it.
    max_body_bytes: int = MAX_BODY_BYTES
    outcomes: list[Outcome] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    #: pool -> the member every client asking that pool wants (the slow member's phase).
    focus: dict[str, str] = field(default_factory=dict)
    sent: int = 0
    chaos_over: bool = False
    #: The storm's clients have all finished: the tenants stop after their current request.
    clients_done: bool = False
    oversized: int = 0
    operator_restarts: int = 0
    started_at: float = field(default_factory=time.monotonic)
    done: anyio.Event = field(default_factory=anyio.Event)
    notes: list[str] = field(default_factory=list)

    def take(self) -> bool:
        """Claim the right to send one more request: until :data:`REQUESTS` are sent and the
        chaos is over (every injection happens under load), within :data:`STORM_DEADLINE`."""
        if time.monotonic() - self.started_at > STORM_DEADLINE:
            return False
        if self.sent >= REQUESTS and self.chaos_over:
            return False
        self.sent += 1
        return True

    def note(self, text: str) -> None:
        line = f"+{time.monotonic() - self.started_at:6.1f}s {text}"
        self.notes.append(line)
        print(f"storm: {line}", flush=True)


class Fleet:
    """The router-proxy replicas: the live ones the clients pick from, and how to add one."""

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        namespace: str,
        started: list[LocalProcess],
        prefix: str,
    ) -> None:
        self.kubeconfig, self.workdir, self.namespace = kubeconfig, workdir, namespace
        self.started, self.prefix = started, prefix
        self.live: list[RouterProxyProcess] = []
        self.all: list[RouterProxyProcess] = []
        self.killed: dict[str, float] = {}
        self._count = 0

    async def add(self) -> RouterProxyProcess:
        identity = f"{self.prefix}-{self._count}"
        self._count += 1
        proxy = RouterProxyProcess(
            self.kubeconfig,
            self.workdir,
            self.namespace,
            identity,
            router=ROUTER_NAME,
            cwd=REPO,
            extra_args=(
                "--lease-duration-seconds", str(LEASE_SECONDS),
                "--max-body-bytes", str(MAX_BODY_BYTES),
            ),
        )  # fmt: skip
        self.started.append(proxy)
        self.all.append(proxy)
        await wait_until_ready(proxy, f"{proxy.url}/readyz")
        self.live.append(proxy)
        return proxy

    async def identities(self) -> set[str]:
        return {p.identity for p in self.live}

    def by_identity(self, identity: str) -> RouterProxyProcess | None:
        return next((p for p in self.live if p.identity == identity), None)

    async def pick(self, rng: random.Random) -> RouterProxyProcess:
        for _ in range(2400):  # two minutes at most
            if self.live:
                return rng.choice(self.live)
            await anyio.sleep(0.05)  # the only replica was killed; its replacement is starting
        raise TimeoutError("no router-proxy replica came back")

    def kill(self, proxy: RouterProxyProcess) -> float:
        self.live.remove(proxy)
        at = time.monotonic()
        self.killed[proxy.name] = at
        proxy.kill()
        return at


# -- the cluster objects -------------------------------------------------------------------------


def isvc_body(member: str) -> Object:
    args = ["--parallel", "2"]
    if member == SLOW_MEMBER:
        args += ["--sim-load-seconds", str(SLOW_LOAD_SECONDS)]
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": member},
        "spec": {
            "model": {"name": model_of(member), "source": f"/models/{member}.gguf"},
            "args": args,
            "replicas": 0,
        },
    }


def slot_member_body(member: str) -> Object:
    """A member of a slot-server pool: its weights a node file under :data:`SLOT_MODELS`, and no
    ``args`` (they do not apply: the server gives every model its own, :data:`SLOT_SERVER_ARGS`)."""
    body = isvc_body(member)
    body["spec"]["model"]["source"] = f"file://{SLOT_MODELS}/{member}.gguf"
    del body["spec"]["args"]
    return body


def lay_slot_weights(workdir: Path, members: Collection[str]) -> None:
    """The members' weight files on the stand-in's node disk, where the slot server's hostPath
    mounts find them (the simulator's router only needs them to exist)."""
    for member in members:
        weights = node_folder(workdir, f"{SLOT_MODELS}/{member}.gguf")
        weights.parent.mkdir(parents=True, exist_ok=True)
        weights.write_bytes(b"weights the simulator's router plays")


async def create_pools_and_router(
    admin: KubeClient, namespace: str, capacity: int | None = None, slot_pool: str | None = None
) -> None:
    """The storm's members, pools and router, warm; with ``capacity``, the busy tenants' pool
    (:data:`TENANT_POOL`) keeps that many members resident (``spec.capacity.members``); with
    ``slot_pool``, that pool runs a slot server (its members' weights laid out beforehand by
    :func:`lay_slot_weights`)."""
    for pool, members in POOLS.items():
        for member in members:
            body = slot_member_body(member) if pool == slot_pool else isvc_body(member)
            await admin.create(ISVC, body, namespace)
    for pool, members in POOLS.items():
        body = pool_body(pool, members, members[0], SWAP_BUDGET, scheduling={"maxWait": MAX_WAIT})
        if capacity is not None and pool == TENANT_POOL:
            body["spec"]["capacity"] = {"members": capacity}
        if pool == slot_pool:
            body["spec"]["slotServer"] = {"args": list(SLOT_SERVER_ARGS)}
        await admin.create(POOL, body, namespace)
    router = {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "metadata": {"name": ROUTER_NAME},
        "spec": {"backends": [{"name": pool, "poolRef": {"name": pool}} for pool in POOLS]},
    }
    await admin.create(ROUTER, router, namespace)
    for pool, members in POOLS.items():

        async def warm(pool: str = pool, default: str = members[0]) -> bool:
            status = (await admin.get(POOL, pool, namespace)).get("status") or {}
            return status.get("residentMember") == default and status.get("phase") == "Ready"

        await eventually(warm, timeout=90, what=f"{pool} warm with {members[0]}")

    async def rbac() -> bool:
        await admin.get(ROLE_BINDINGS, activation_name(ROUTER_NAME), namespace)
        return True

    await eventually(rbac, timeout=60, what="the router's activation RoleBinding")


async def pool_status(admin: KubeClient, namespace: str, pool: str) -> Object:
    return dict((await admin.get(POOL, pool, namespace)).get("status") or {})


async def member_url(admin: KubeClient, namespace: str, member: str) -> str | None:
    slices = await admin.list(
        ENDPOINT_SLICES, namespace, label_selector=f"kubernetes.io/service-name={member}"
    )
    urls = ready_urls(slices.items)
    return urls[0] if urls else None


async def held_lease(admin: KubeClient, namespace: str, pool: str) -> tuple[str, str] | None:
    """``(holder, target)`` of the pool's Lease while it has a holder."""
    try:
        lease = await admin.get(LEASES, pool_lease_name(pool), namespace)
    except NotFound:
        return None
    activation = read_activation(lease)
    return (activation.holder, activation.target or "") if activation.holder else None


async def scrape_swaps(url: str) -> Counter[tuple[str, str, str]]:
    async with http_client(timeout=10, trust_env=False) as http:
        return swaps_in((await http.get(f"{url}/metrics")).text)


def swaps_in(text: str) -> Counter[tuple[str, str, str]]:
    """``modelpool_swaps_total`` by (pool, from, to) in a replica's ``/metrics`` text."""
    found: Counter[tuple[str, str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "modelpool_swaps_total" and sample.value:
                key = (sample.labels["pool"], sample.labels["from"], sample.labels["to"])
                found[key] += int(sample.value)
    return found


# -- the clients ---------------------------------------------------------------------------------


def body_for(kind: str, member: str, max_body_bytes: int = MAX_BODY_BYTES) -> Object:
    model = model_of(member)
    hello = [{"role": "user", "content": "hello storm"}]
    if kind == "no-messages":
        return {"model": model}
    if kind == "unknown-model":
        return {"model": "model-nowhere", "messages": hello}
    if kind == "oversized":
        padding = "x " * (max_body_bytes // 2 + 4096)  # just over the proxies' limit
        return {"model": model, "messages": [{"role": "user", "content": padding}]}
    if kind == "stream":
        return {"model": model, "messages": hello, "stream": True, "max_tokens": 12}
    if kind == "stream-cut":
        return {"model": model, "messages": hello, "stream": True, "max_tokens": 300,
                "ignore_eos": True}  # fmt: skip
    return {"model": model, "messages": hello}


def chunk_models(line: str) -> str | None:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    with contextlib.suppress(msgspec.DecodeError):
        decoded = msgspec.json.decode(line[len("data: ") :])
        if isinstance(decoded, dict):
            return str(decoded.get("model"))
    return "?"


async def send(
    http: httpx.AsyncClient, base: str, outcome: Outcome, cut_after: float, max_body_bytes: int
) -> None:
    """Send one request and record what came back; a ``hold-cut`` client gives up waiting for
    the answer after ``cut_after`` seconds (closing the connection while the proxy holds it)."""
    body = body_for(outcome.kind, outcome.member, max_body_bytes)
    streamed = outcome.kind in ("stream", "stream-cut")
    timeout = httpx.Timeout(CLIENT_TIMEOUT)
    if outcome.kind == "hold-cut":
        timeout = httpx.Timeout(CLIENT_TIMEOUT, read=cut_after)
    url = f"{base}/v1/chat/completions"
    try:
        async with http.stream("POST", url, json=body, timeout=timeout) as response:
            outcome.first_byte = time.monotonic()
            outcome.status = response.status_code
            outcome.retry_after = response.headers.get("retry-after")
            if response.status_code != 200 or not streamed:
                raw = await response.aread()
                with contextlib.suppress(msgspec.DecodeError):
                    decoded = msgspec.json.decode(raw)
                    if isinstance(decoded, dict) and response.status_code == 200:
                        outcome.answered_by.append(str(decoded.get("model")))
                        outcome.complete = True
                    elif isinstance(decoded, dict):
                        outcome.code = str((decoded.get("error") or {}).get("code") or "")
                return
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    outcome.complete = True
                    break
                model = chunk_models(line)
                if model is None:
                    continue
                outcome.answered_by.append(model)
                if outcome.kind == "stream-cut" and '"content":"' in line:
                    break  # the client goes away mid-stream
    except httpx.HTTPError as err:
        outcome.error = f"{type(err).__name__}: {err}"
    finally:
        outcome.ended = time.monotonic()


class Entrance(Protocol):
    """Where a client sends its next request: a replica (here) or a Service (on kind)."""

    @property
    def name(self) -> str: ...

    @property
    def url(self) -> str: ...


class Entrances(Protocol):
    async def pick(self, rng: random.Random) -> Entrance: ...


async def client(index: int, storm: Storm, fleet: Entrances) -> None:
    rng = random.Random(storm.rng_seed * 100 + index)
    members = [m for ms in POOLS.values() for m in ms]
    kinds, weights = zip(*KINDS, strict=True)
    streak: tuple[str, int] = (rng.choice(members), rng.randint(2, 6))
    async with http_client(
        trust_env=False,
        limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
    ) as http:
        while storm.take():
            member, left = streak
            if left <= 0:
                member, left = rng.choice(members), rng.randint(2, 6)
            streak = (member, left - 1)
            member = storm.focus.get(pool_of(member), member)
            kind = rng.choices(kinds, weights)[0]
            if kind == "oversized":
                if storm.oversized >= MAX_OVERSIZED:
                    kind = "chat"
                else:
                    storm.oversized += 1
            proxy = await fleet.pick(rng)
            outcome = Outcome(index, kind, member, proxy.name, time.monotonic())
            storm.outcomes.append(outcome)
            cut_after = rng.uniform(0.3, 2.0)
            await send(http, proxy.url, outcome, cut_after, storm.max_body_bytes)
            if outcome.status == 503:
                await anyio.sleep(rng.uniform(0.0, 0.5))  # a client that heeds Retry-After


async def tenant(index: int, member: str, storm: Storm, fleet: Entrances) -> None:
    """A busy tenant: plain completions for ``member``, back to back, until the clients are done;
    after a 503 it waits a moment, as a client honouring ``Retry-After`` at its shortest."""
    rng = random.Random(storm.rng_seed * 100 + index)
    async with http_client(trust_env=False) as http:
        while not storm.clients_done:
            proxy = await fleet.pick(rng)
            outcome = Outcome(index, "chat", member, proxy.name, time.monotonic(), tenant=True)
            storm.outcomes.append(outcome)
            await send(http, proxy.url, outcome, 0.0, storm.max_body_bytes)
            if outcome.status != 200:
                await anyio.sleep(0.5)


@contextlib.asynccontextmanager
async def busy_tenants(storm: Storm, fleet: Entrances) -> AsyncIterator[None]:
    """The tenants run while the body does (the storm's clients); then they finish."""
    async with anyio.create_task_group() as tenants:
        for offset, member in enumerate(TENANTS):
            tenants.start_soon(tenant, CLIENTS + offset, member, storm, fleet)
        try:
            yield
        finally:
            storm.clients_done = True


#: What one swap may take on this loaded 2-core machine (about 3 s with a 1 s simulated load
#: when quiet; the storm's own clients and chaos slow it).
TENANT_SWAP_ALLOWANCE: Final = 8.0


def tenant_bound() -> float:
    """The bound of a held request for a member of pool-x (3 members, swapBudget 40 s, maxWait
    12.5 s, minResidency 10 s): in-flight requests drain within the
    storm's longest request (a 300-token stream) and a swap within :data:`TENANT_SWAP_ALLOWANCE`."""
    drain = 300 * TOKEN_SECONDS + 1.0
    return wait_bound(Settings(12.5, 10.0), 3, drain=drain, swap=TENANT_SWAP_ALLOWANCE)


def bound_breaches(storm: Storm, bound: float) -> tuple[list[str], int]:
    """Busy tenants' requests sent and answered while the pool was healthy that were not answered
    200 within ``bound``, and how many healthy requests were judged. Unhealthy: from each injected
    failure's start (any pool: the operator and the proxies are shared) to one bound after its end,
    when the demand held during it has had its turn."""
    unhealthy = [(w.start, w.end + bound) for w in storm.windows]
    judged, breaches = 0, []
    for outcome in storm.outcomes:
        if not outcome.tenant or not outcome.ended:
            continue
        if any(outcome.started < end and outcome.ended > start for start, end in unhealthy):
            continue
        judged += 1
        waited = outcome.ended - outcome.started
        if outcome.status != 200 or waited > bound:
            breaches.append(
                f"{outcome.window(storm.started_at)} {outcome.member} via {outcome.proxy}: "
                f"{outcome.reason()} after {waited:.1f} s (bound {bound:.1f} s)"
            )
    return breaches, judged


def tenant_figures(storm: Storm, changes: Counter[tuple[str, str, str]]) -> list[str]:
    """Per tenant member: waits of its answered requests (p50, p99, max) against the bound, its
    refusals; and the tenants' pool's swaps per minute and requests served per swap."""
    minutes = max((time.monotonic() - storm.started_at) / 60, 1e-9)
    swaps = sum(n for (pool, _, _), n in changes.items() if pool == TENANT_POOL)
    served = [o for o in storm.outcomes if o.pool == TENANT_POOL and o.status == 200]
    bound = tenant_bound()
    lines = [f"busy tenants on {TENANT_POOL} (bound {bound:.1f} s while healthy):"]
    for member in TENANTS:
        mine = [o for o in storm.outcomes if o.tenant and o.member == member]
        waits = [o.ended - o.started for o in mine if o.status == 200]
        refused = Counter(o.reason() for o in mine if o.status != 200)
        lines.append(
            f"  {member}: {len(waits)} answered, wait p50 {quantile(waits, 0.5):.2f} s, "
            f"p99 {quantile(waits, 0.99):.2f} s, max {max(waits, default=float('nan')):.2f} s; "
            f"not answered: {dict(sorted(refused.items()))}"
        )
    lines.append(
        f"  {TENANT_POOL}: {swaps} swaps, {swaps / minutes:.1f} per minute, "
        f"{len(served) / max(swaps, 1):.1f} requests served per swap"
    )
    return lines


# -- the chaos -----------------------------------------------------------------------------------


async def mid_swap(
    admin: KubeClient,
    namespace: str,
    live: Callable[[], Awaitable[Collection[str]]],
    timeout: float = 60.0,
) -> tuple[str, str, str]:
    """Wait until some pool's Lease is held by a live replica (an identity ``live`` names) for a
    member not yet resident; ``(pool, holder, target)``."""
    with anyio.fail_after(timeout):
        while True:
            with contextlib.suppress(KubeError, OSError):
                replicas = await live()
                for pool in POOLS:
                    held = await held_lease(admin, namespace, pool)
                    if held is None or held[0] not in replicas:
                        continue
                    status = await pool_status(admin, namespace, pool)
                    if status.get("residentMember") != held[1]:
                        return pool, held[0], held[1]
            await anyio.sleep(0.02)


async def chaos(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    fleet: Fleet,
    storm: Storm,
    pod_pools: Collection[str] = tuple(POOLS),
) -> None:
    """The chaos, in order (the module docstring). The ``/slots`` failure is a switch of one
    member's simulator, so it picks a resident of ``pod_pools`` only: a slot server's router does
    not pass ``/sim/slots-mode`` on to its children."""
    assert cluster.local is not None
    apiserver = cluster.local.processes["kube-apiserver"]
    await anyio.sleep(4)

    # 1. A resident's /slots answers 500 for a while: its drain is deferred, never forced.
    async def ready_resident() -> tuple[str, str, str] | None:
        for pool in pod_pools:
            resident = str((await pool_status(admin, namespace, pool)).get("residentMember") or "")
            url = await member_url(admin, namespace, resident) if resident else None
            if url is not None:
                return pool, resident, url
        return None

    async def break_slots() -> tuple[str, str] | None:
        found = await ready_resident()
        if found is None:
            return None
        pool, resident, url = found
        try:
            async with http_client(timeout=10, trust_env=False) as http:
                answer = await http.post(
                    f"{url}/sim/slots-mode",
                    json={"mode": "error500", "seconds": SLOTS_FAILURE_SECONDS},
                )
        except httpx.TransportError:
            return None  # that resident was being stopped (swapped away) just then: pick again
        assert answer.status_code == 200, answer.text
        return pool, resident

    pool, resident = await eventually(
        break_slots, timeout=60, interval=0.05, what="a resident that takes the /slots switch"
    )
    now = time.monotonic()
    end = now + SLOTS_FAILURE_SECONDS
    storm.windows.append(Window(f"/slots 500 on {resident}", pool, now, end))
    storm.note(f"/slots of {resident} ({pool}) answers 500 for {SLOTS_FAILURE_SECONDS:.0f} s")

    # 2. SIGKILL the replica holding a pool's Lease mid-swap; a new replica replaces it.
    await anyio.sleep(2)
    pool, holder, target = await mid_swap(admin, namespace, fleet.identities)
    proxy = fleet.by_identity(holder)
    assert proxy is not None
    swaps = await scrape_swaps(proxy.url)
    at = fleet.kill(proxy)
    storm.kills.append(Kill(proxy.name, pool, target, at, swaps))
    # It may have been driving the other pool's swap too: that one is as much the killed
    # driver's own (its counter was scraped once, above).
    for other in POOLS:
        with contextlib.suppress(KubeError, OSError):
            held = await held_lease(admin, namespace, other)
            if other != pool and held is not None and held[0] == holder:
                storm.kills.append(Kill(proxy.name, other, held[1], at, Counter()))
    storm.windows.append(Window(f"SIGKILL {holder}", pool, at, at + LEASE_SECONDS))
    storm.note(f"SIGKILLed {holder}, holding {pool} for {target}; counted {dict(swaps)}")
    replacement = await fleet.add()
    storm.note(f"{replacement.name} replaces it")

    # 3. Freeze kube-apiserver mid-swap.
    await anyio.sleep(1)
    pool, holder, target = await mid_swap(admin, namespace, fleet.identities)
    stopped = time.monotonic()
    storm.note(f"SIGSTOP kube-apiserver ({holder} holds {pool} for {target})")
    try:
        apiserver.signal(signal.SIGSTOP)
        await anyio.sleep(FREEZE_SECONDS)
    finally:
        apiserver.signal(signal.SIGCONT)
    storm.windows.append(Window("kube-apiserver frozen", None, stopped, time.monotonic()))
    storm.note("SIGCONT kube-apiserver")

    # 4. Every pool-y client asks for the slow member until it is resident.
    await anyio.sleep(2)
    storm.focus[SLOW_POOL] = SLOW_MEMBER
    storm.note(f"clients of {SLOW_POOL} now ask for {SLOW_MEMBER} ({SLOW_LOAD_SECONDS} s load)")

    async def slow_resident() -> bool:
        status = await pool_status(admin, namespace, SLOW_POOL)
        return status.get("residentMember") == SLOW_MEMBER

    try:
        await eventually(slow_resident, timeout=90, interval=0.5, what=f"{SLOW_MEMBER} resident")
        storm.note(f"{SLOW_MEMBER} is resident")
    finally:
        storm.focus.clear()


async def supervise_operator(
    cluster: TestCluster,
    admin: KubeClient,
    workdir: Path,
    started: list[LocalProcess],
    storm: Storm,
    operator: OperatorProcess,
    lease: str,
) -> None:
    """Restart the operator when it exits, as its Deployment would (a frozen API server makes a
    leader that cannot renew stop leading, and the process with it)."""
    while not storm.done.is_set():
        if not operator.running():
            storm.operator_restarts += 1
            exited = time.monotonic()
            storm.note(f"the operator exited ({operator.popen.returncode}); starting it again")
            identity = f"storm-op-{storm.operator_restarts}"
            operator = await start_operator(cluster, admin, workdir, lease, identity, started)
            storm.windows.append(
                Window(f"operator restart {identity}", None, exited, time.monotonic())
            )
            storm.note(f"{identity} is ready")
        with anyio.move_on_after(0.5):
            await storm.done.wait()


# -- judging -------------------------------------------------------------------------------------


def judge(outcome: Outcome, storm: Storm) -> str | None:
    """What is wrong with this outcome, or None."""
    kind = outcome.kind
    # The replica it went through was killed while it ran: whatever it got is cut short. Through
    # a Service (kind), a request sent within KILL_AFTERMATH may still reach the dying replica.
    killed = any(
        k.proxy == outcome.proxy
        and outcome.ended >= k.at - 0.5
        and outcome.started <= k.at + KILL_AFTERMATH
        for k in storm.kills
    )
    if outcome.status is None:
        if kind == "hold-cut" and "Timeout" in outcome.error:
            return None  # the client gave up on purpose
        return None if killed else f"no answer: {outcome.error}"
    status, code = outcome.status, outcome.code
    if kind in EXPECTED_BAD:
        expected = EXPECTED_BAD[kind]
        return None if status == expected else f"expected {expected}, got {status} {code}"
    if status == 200:
        wanted = model_of(outcome.member)
        wrong = sorted({m for m in outcome.answered_by if m != wanted})
        if wrong:
            return f"200 for {wanted} answered by {wrong}"
        if not outcome.answered_by and not killed:  # killed: its body was cut after the 200
            return f"200 for {wanted} answered by nobody"
        if kind == "stream" and not outcome.complete and not killed:
            return "a stream that ended without [DONE] (its replica was not killed)"
        return None
    if status == 503:
        if code not in KNOWN_503:
            return f"503 with an unknown reason {code!r}"
        if not outcome.retry_after or not outcome.retry_after.isdigit():
            return f"503 {code} without a usable Retry-After ({outcome.retry_after!r})"
        if int(outcome.retry_after) < 1:
            return f"503 {code} with Retry-After {outcome.retry_after}"
        return None
    if status == 502 and code == "pool_activation_failed":
        for window in storm.windows:
            if window.pool in (None, outcome.pool) and (
                outcome.started <= window.end + FAILURE_AFTERMATH and outcome.ended >= window.start
            ):
                return None
        return "502 pool_activation_failed with no failure injected on its pool"
    return f"unexpected {status} {code}"


async def judge_the_storm(
    admin: KubeClient,
    namespace: str,
    storm: Storm,
    monitor: PoolInvariantMonitor,
    live_swaps: Counter[tuple[str, str, str]],
    settle_problems: list[Violation],
) -> Counter[tuple[str, str, str]]:
    """Print the figures, then assert what every storm must show (here and on kind): each answer
    one the design allows, no two residents, each swap counted once (``live_swaps``, the replicas
    alive at the end, plus what the killed ones counted), the pools settled, the slow member
    resident once. Returns the residency changes by (pool, from, to)."""
    counted = live_swaps.copy()
    for kill in storm.kills:
        counted += kill.swaps
    changes, accounting = swap_accounting(monitor, counted, storm)
    events = (await admin.list(EVENTS, namespace)).items
    pool_events = Counter(
        str(e.get("reason"))
        for e in events
        if (e.get("regarding") or {}).get("kind") == "ModelPool"
    )
    print(figures(storm, changes, counted, pool_events))
    print(monitor.report())

    wrong = [
        f"{o.window(storm.started_at)} {o.kind} {o.member} via {o.proxy}: {problem}"
        for o in storm.outcomes
        if (problem := judge(o, storm)) is not None
    ]
    assert len(storm.outcomes) >= 300, f"only {len(storm.outcomes)} requests were sent"
    assert not wrong, f"{len(wrong)} wrong answer(s):\n" + "\n".join(wrong[:40])
    assert not monitor.overlaps, monitor.report()
    assert not accounting, "swaps not counted exactly once:\n" + "\n".join(accounting)
    assert not settle_problems, "the pools did not settle:\n" + "\n".join(
        v.describe() for v in settle_problems
    )
    assert any(c.new == SLOW_MEMBER for c in monitor.residency_changes(SLOW_POOL)), (
        f"{SLOW_MEMBER} (a {SLOW_LOAD_SECONDS} s load) was never resident"
    )
    return changes


def quantile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def swap_accounting(
    monitor: PoolInvariantMonitor, counted: Counter[tuple[str, str, str]], storm: Storm
) -> tuple[Counter[tuple[str, str, str]], list[str]]:
    """The residency changes per (pool, from, to), and what is wrong with the counts.

    A pool with a budget swaps by a member joining its residents (beside some, in place of
    others): its changes are those joins (a join into a cold pool is the default warming, as the
    move from no resident is), and a count is compared by (pool, to) alone, its ``from`` being
    the residents the driver evicted (``*`` in both)."""
    changes: Counter[tuple[str, str, str]] = Counter(
        (c.pool, c.old, c.new)
        for c in monitor.residency_changes()
        if c.old and c.new and not monitor.has_budget(c.pool)
    )
    changes += Counter(
        (j.pool, "*", j.member)
        for j in monitor.resident_joins()
        if j.beside and monitor.has_budget(j.pool)
    )
    by_target: Counter[tuple[str, str, str]] = Counter()
    for (pool, origin, to), count in counted.items():
        by_target[(pool, "*", to) if monitor.has_budget(pool) else (pool, origin, to)] += count
    counted = by_target
    problems = [
        f"{c.pool}: the resident {c.old} was lost (rv {c.resource_version}), nobody replaced it"
        for c in monitor.residency_changes()
        if c.old and not c.new
    ]
    for key, count in sorted(counted.items()):
        if count > changes[key]:
            problems.append(f"{key}: counted {count} times, changed {changes[key]} times")
    missing = changes - counted
    forgiven = {(k.pool, k.target) for k in storm.kills}
    for key, count in sorted(missing.items()):
        pool, _, to = key
        if (pool, to) in forgiven and count == 1:
            forgiven.discard((pool, to))  # the killed driver's own swap, counted by nobody
            continue
        problems.append(f"{key}: changed {changes[key]} times, counted {counted[key]}")
    return changes, problems


def figures(
    storm: Storm,
    changes: Counter[tuple[str, str, str]],
    counted: Counter[tuple[str, str, str]],
    pool_events: Counter[str],
) -> str:
    answered = [o for o in storm.outcomes if o.status == 200 and o.first_byte is not None]
    waits = [o.first_byte - o.started for o in answered if o.first_byte is not None]
    rejected = [o.ended - o.started for o in storm.outcomes if o.status == 503]
    reasons = Counter(f"{o.kind}: {o.reason()}" for o in storm.outcomes)
    retry_after = Counter(o.retry_after for o in storm.outcomes if o.status == 503)
    lines = [
        f"requests {len(storm.outcomes)} in {time.monotonic() - storm.started_at:.0f} s "
        f"(seed {storm.rng_seed}), operator restarts {storm.operator_restarts}",
        f"residency changes {sum(changes.values())}: {dict(sorted(changes.items()))}",
        f"swaps counted {sum(counted.values())}: {dict(sorted(counted.items()))}",
        f"time to answer (200) p50 {quantile(waits, 0.5):.2f} s, p99 {quantile(waits, 0.99):.2f}"
        f" s; held until 503 p50 {quantile(rejected, 0.5):.2f} s, "
        f"p99 {quantile(rejected, 0.99):.2f} s",
        f"Retry-After on 503s (value: count): {dict(sorted(retry_after.items()))}",
        f"pool events: {dict(sorted(pool_events.items()))}",
        *tenant_figures(storm, changes),
        "outcomes:",
        *(f"  {count:4d}  {reason}" for reason, count in sorted(reasons.items())),
        "no answer (times from the start):",
        *(
            f"  {o.window(storm.started_at)} {o.kind} {o.member}: {o.error[:80]}"
            for o in storm.outcomes
            if o.status is None and o.kind != "hold-cut"
        ),
        "chaos:",
        *(f"  {line}" for line in storm.notes),
    ]
    return "\n".join(lines)


# -- the slot server ------------------------------------------------------------------------------


async def slot_server_pods(admin: KubeClient, namespace: str, pool: str) -> list[tuple[str, str]]:
    """The pool's slot server pods, as ``(namespace/name, uid)``: the name as its processes carry
    it (``MODELPOOL_POD``), the uid to tell a replaced pod from the one that was there."""
    found = await admin.list(PODS, namespace, label_selector=f"{SLOT_SERVER_LABEL}={pool}")
    return sorted(
        (f"{namespace}/{p['metadata']['name']}", p["metadata"]["uid"]) for p in found.items
    )


@dataclass
class SlotRecord:
    """A slot-server pool's members as the monitor saw them (:func:`slot_server_record`)."""

    member_pods: list[str]
    children: Counter[str]
    resident: set[str]

    def describe(self, pool: str, server: str) -> str:
        return (
            f"slot server {server} ({pool}): children started per member "
            f"{dict(sorted(self.children.items()))}, ever resident {sorted(self.resident)}, "
            f"member pods added {self.member_pods or 'none'}"
        )


def slot_server_record(monitor: PoolInvariantMonitor, pool: str, server: str) -> SlotRecord:
    """What the monitor saw of ``pool``'s members: member pods added (a slot-server pool makes
    none), children of the pod ``server`` started per member (the processes its overlap and settle
    checks judge), and the members ever resident."""
    members = POOLS[pool]
    timeline = list(monitor.timeline)
    member_pods = sorted(
        e.subject
        for e in timeline
        if e.source == "pod" and e.what == "added" and e.subject.partition("/")[0] in members
    )
    children: Counter[str] = Counter(
        e.subject.partition("/")[2]
        for e in timeline
        if e.source == "process" and e.what == "started" and e.detail.endswith(f" pod {server}")
    )
    resident = {c.new for c in monitor.residency_changes(pool) if c.new}
    return SlotRecord(member_pods, children, resident)


# -- the test ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def apiserver_resumed(cluster: TestCluster) -> AsyncIterator[None]:
    """Whatever happens, kube-apiserver is not left stopped (the session shares it)."""
    try:
        yield
    finally:
        if cluster.local is not None:
            cluster.local.processes["kube-apiserver"].signal(signal.SIGCONT)


@pytest.mark.parametrize(
    ("replicas", "capacity", "slot_pool"),
    [
        pytest.param(1, None, None, id="1-proxies"),
        pytest.param(2, None, SLOW_POOL, id="2-proxies-slot-server-y"),
        pytest.param(3, 2, None, id="3-proxies-budget-2"),
    ],
)
async def test_swap_storm(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
    replicas: int,
    capacity: int | None,
    slot_pool: str | None,
) -> None:
    if cluster.local is None:
        pytest.skip("the storm freezes kube-apiserver: it needs the control plane started here")
    seed = int(os.environ.get("STORM_SEED", "0")) or random.randrange(1, 10_000)
    storm = Storm(seed)
    await install(cluster)
    lease = f"storm-{namespace}"
    operator = await start_operator(cluster, admin, tmp_path, lease, "storm-op-0", started)
    node = start_node(
        cluster,
        tmp_path,
        started,
        namespace=namespace,
        load_seconds=LOAD_SECONDS,
        token_seconds=TOKEN_SECONDS,
    )
    monitor = node.monitor
    assert monitor is not None
    if slot_pool is not None:
        lay_slot_weights(tmp_path, POOLS[slot_pool])
    await create_pools_and_router(admin, namespace, capacity, slot_pool)
    server_at_start = await slot_server_pods(admin, namespace, slot_pool) if slot_pool else []
    if slot_pool is not None:
        assert len(server_at_start) == 1, f"{slot_pool}'s slot server pods: {server_at_start}"
    token = await service_account_token(admin, namespace, proxy_name(ROUTER_NAME))
    kubeconfig = kubeconfig_for_token(
        cluster.admin_kubeconfig, token, tmp_path / "proxy.kubeconfig"
    )
    fleet = Fleet(kubeconfig, tmp_path, namespace, started, f"storm{replicas}")
    for _ in range(replicas):
        await fleet.add()
    storm.started_at = time.monotonic()
    budget = f", {TENANT_POOL} keeps {capacity} residents" if capacity else ""
    if slot_pool is not None:
        budget += f", {slot_pool} runs a slot server ({server_at_start[0][0]})"
    storm.note(f"{replicas} replica(s) ready{budget}; {CLIENTS} clients start (seed {seed})")

    async with apiserver_resumed(cluster), anyio.create_task_group() as group:
        group.start_soon(
            supervise_operator, cluster, admin, tmp_path, started, storm, operator, lease
        )
        async with busy_tenants(storm, fleet), anyio.create_task_group() as clients:
            for index in range(CLIENTS):
                clients.start_soon(client, index, storm, fleet)
            try:
                pod_pools = [pool for pool in POOLS if pool != slot_pool]
                await chaos(cluster, admin, namespace, fleet, storm, pod_pools)
            finally:
                storm.chaos_over = True
        storm.note(f"the clients are done ({len(storm.outcomes)} requests)")
        settle_problems = monitor.settle(timeout=90, leases_released=True)
        storm.done.set()

    live: Counter[tuple[str, str, str]] = Counter()
    for proxy in fleet.live:
        live += await scrape_swaps(proxy.url)
    slot: SlotRecord | None = None
    if slot_pool is not None:
        server = server_at_start[0][0]
        slot = slot_server_record(monitor, slot_pool, server)
        print(slot.describe(slot_pool, server))
    await judge_the_storm(admin, namespace, storm, monitor, live, settle_problems)
    if slot_pool is not None and slot is not None:
        # What makes a slot-server pool one: no member pod, one server throughout, and its
        # children seen, so the monitor's "never two members" had the processes to judge.
        assert not slot.member_pods, f"{slot_pool} members ran in pods: {slot.member_pods}"
        assert await slot_server_pods(admin, namespace, slot_pool) == server_at_start, (
            f"{slot_pool}'s slot server pod was replaced during the storm"
        )
        unseen = sorted(slot.resident - set(slot.children))
        assert not unseen, f"resident in {slot_pool} but no child of its server seen: {unseen}"
    breaches, judged = bound_breaches(storm, tenant_bound())
    storm.note(
        f"{judged} busy-tenant requests fell in healthy time; {len(breaches)} beyond the bound"
    )
    assert judged >= 20, f"only {judged} busy-tenant requests fell in healthy time: nothing judged"
    assert not breaches, "held requests answered beyond their bound while healthy:\n" + "\n".join(
        breaches
    )
