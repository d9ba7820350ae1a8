"""The slot's scheduler end to end: busy tenants, a parked member's bound, no thrash, priority.

The operator (pool controller) runs under its ServiceAccount, the node stand-in plays the members
as simulators, and several ``controlplane router-proxy`` processes share the pool's demand through
their demand reports. Tenants are clients looping requests through a proxy (each on its own), as
the teams sharing a pool do. Each test checks one promise of docs/modelpool.md ("Scheduling the
slot") against the bound :func:`~controlplane.scheduling.policy.wait_bound` states, with the
swap's own time given a fixed allowance (:data:`SWAP_ALLOWANCE`: a simulator swap here takes about
3 s, drain, pod gone, load and Ready; the allowance leaves room for a loaded machine).

Every test runs under the pool invariant monitor (never two members with a process or a pod).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.local.system import RouterProxyProcess
from controlplane.runtime.client import KubeClient
from controlplane.scheduling.policy import Settings, wait_bound
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import (
    LocalProcess,
    OperatorProcess,
    metric_sum,
    start_node,
)
from tests.e2e.proxies import chat, isvc_body, start_proxies
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
ROUTER = ModelRouter.resource()
TIMEOUT = 60.0
#: What one swap may take here (measured about 3 s with a 1 s simulated load).
SWAP_ALLOWANCE = 8.0
#: Tokens per tenant request at the stand-in's token time: each request lasts about 0.2 s.
TENANT_TOKENS = 8


@dataclass
class Answer:
    model: str
    started: float
    ended: float
    status: int
    answered_by: str

    @property
    def waited(self) -> float:
        return self.ended - self.started


@dataclass
class Tenant:
    """A team's client: requests for ``model`` through ``proxy``, one after another, with a pause
    drawn from ``pauses`` between them (0: back to back), until stopped."""

    proxy: RouterProxyProcess
    model: str
    pauses: tuple[float, float] = (0.0, 0.0)
    answers: list[Answer] = field(default_factory=list)
    stop: bool = False

    async def run(self, http: httpx.AsyncClient) -> None:
        rng = random.Random(self.model)
        while not self.stop:
            self.answers.append(await ask(http, self.proxy, self.model, max_tokens=TENANT_TOKENS))
            low, high = self.pauses
            if high > 0:
                await anyio.sleep(rng.uniform(low, high))


async def run_for(tenants: list[Tenant], seconds: float, timeout: float) -> None:
    """Every tenant asks, each on its own, for ``seconds``; their last requests are answered."""
    async with (
        http_client(timeout=timeout) as http,
        anyio.create_task_group() as group,
    ):
        for tenant in tenants:
            group.start_soon(tenant.run, http)
        await anyio.sleep(seconds)
        for tenant in tenants:
            tenant.stop = True


async def three_teams_for(
    proxies: list[RouterProxyProcess], seconds: float, bound: float
) -> list[Tenant]:
    """Three teams, one per member (a, b, c), asking with short pauses through two proxies for
    ``seconds``; every request answered within ``bound`` (the last may start just before the stop)
    and no team starved. The tenants, for more checks."""
    tenants = [
        Tenant(proxies[0], "model-a", (0.1, 0.5)),
        Tenant(proxies[1], "model-b", (0.2, 1.0)),
        Tenant(proxies[0], "model-c", (0.2, 1.0)),
    ]
    await run_for(tenants, seconds, timeout=bound + 30)
    assert_all_answered(tenants, bound + 5)
    served = {t.model: len(t.answers) for t in tenants}
    assert min(served.values()) >= 3, f"a team was starved: {served}"
    return tenants


async def ask(
    http: httpx.AsyncClient, proxy: RouterProxyProcess, model: str, **extra: object
) -> Answer:
    started = time.monotonic()
    reply = await http.post(f"{proxy.url}/v1/chat/completions", json=chat(model, **extra))
    ended = time.monotonic()
    body = (
        reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
    )
    return Answer(model, started, ended, reply.status_code, str(body.get("model", "")))


async def setup_pool(
    admin: KubeClient,
    namespace: str,
    members: tuple[str, ...],
    scheduling: Mapping[str, str],
    priorities: Mapping[str, int] | None = None,
) -> None:
    """The members (the first resident), pool ``gpu-0`` and router ``router``, settled."""
    for index, member in enumerate(members):
        await admin.create(ISVC, isvc_body(member, 1 if index == 0 else 0), namespace)
    body = pool_body(
        "gpu-0", members, members[0], "120s", scheduling=scheduling, priorities=priorities
    )
    await admin.create(POOL, body, namespace)
    await admin.create(ROUTER, router_body("router", "gpu-0"), namespace)

    async def settled() -> bool:
        status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
        return status.get("residentMember") == members[0] and status.get("phase") == "Ready"

    await eventually(settled, timeout=TIMEOUT, what=f"{members[0]} resident and Ready")


async def resident(admin: KubeClient, namespace: str) -> str:
    status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
    return str(status.get("residentMember") or "")


def assert_all_answered(tenants: list[Tenant], bound: float) -> None:
    for tenant in tenants:
        assert tenant.answers, f"{tenant.model} on {tenant.proxy.name} got no answer at all"
        for answer in tenant.answers:
            assert answer.status == 200, f"{answer} (a held request was refused)"
            assert answer.answered_by == tenant.model, f"{answer} answered by the wrong model"
            assert answer.waited <= bound, f"{answer}: waited {answer.waited:.1f} s > {bound:.1f}"


async def test_a_parked_member_is_answered_within_its_bound_while_the_resident_stays_busy(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Three tenants loop requests for a, back to back, one per proxy: a is never idle. One
    request for b arrives: the turn passes (a has had its floor), admission to a closes on every
    proxy, a's requests in flight finish, the swap runs, and b answers within its bound while the
    tenants keep asking. a's requests held meanwhile are answered after a's next turn."""
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=1.0, token_seconds=0.02
    )
    scheduling = {"maxWait": "10s", "minResidency": "3s"}
    await setup_pool(admin, namespace, ("a", "b"), scheduling)
    proxies = await start_proxies(cluster, admin, namespace, tmp_path, started, 3)
    settings = Settings(max_wait=10, min_residency=3)
    # a request lasts about 0.2 s; a drain waits for the longest in flight
    bound = wait_bound(settings, members=2, drain=2.0, swap=SWAP_ALLOWANCE)
    tenants = [Tenant(proxy, "model-a") for proxy in proxies]
    async with (
        http_client(timeout=bound + 30) as http,
        anyio.create_task_group() as group,
    ):
        for tenant in tenants:
            group.start_soon(tenant.run, http)
        await anyio.sleep(settings.min_residency + 1.5)  # a has served its floor, busy
        asked = time.monotonic()
        parked = await ask(http, proxies[1], "model-b")
        answered = time.monotonic()
        load_during = [
            a for t in tenants for a in t.answers if asked < a.ended and a.started < answered
        ]
        await anyio.sleep(6.0)  # the load goes on: a gets its next turn
        for tenant in tenants:
            tenant.stop = True
    assert parked.status == 200, parked
    assert parked.answered_by == "model-b"
    assert parked.waited <= bound, f"b waited {parked.waited:.1f} s; its bound is {bound:.1f} s"
    assert load_during, "the tenants were not asking while b waited"
    assert_all_answered(tenants, bound)
    held_for_next_turn = [a for t in tenants for a in t.answers if a.waited > 1.0]
    assert held_for_next_turn, "no request for a was held: admission to a never closed"
    assert await resident(admin, namespace) == "a", "a did not get its next turn"


async def test_alternating_demand_swaps_no_more_often_than_min_residency_allows(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Two teams ask for a and b with gaps between their requests (each member is idle now and
    then): without a floor, every request for the other member could swap. Over 40 s the pool
    swaps at most once per minResidency (plus one), both teams are served, each within the bound."""
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=1.0, token_seconds=0.02
    )
    scheduling = {"maxWait": "20s", "minResidency": "6s"}
    await setup_pool(admin, namespace, ("a", "b"), scheduling)
    one, two = await start_proxies(cluster, admin, namespace, tmp_path, started, 2)
    settings = Settings(max_wait=20, min_residency=6)
    bound = wait_bound(settings, members=2, drain=2.0, swap=SWAP_ALLOWANCE)
    swaps = await metric_sum(
        operator.metrics_url, "modelpool_pool_swaps_completed_total", pool="gpu-0"
    )
    tenants = [Tenant(one, "model-a", (0.2, 1.0)), Tenant(two, "model-b", (0.2, 1.0))]
    duration = 40.0
    await run_for(tenants, duration, timeout=bound + 30)
    swapped = (
        await metric_sum(operator.metrics_url, "modelpool_pool_swaps_completed_total", pool="gpu-0")
        - swaps
    )
    assert_all_answered(tenants, bound + duration)  # the last requests may outlast the window
    most = duration / settings.min_residency + 1
    assert 1 <= swapped <= most, f"{swapped:g} swaps in {duration:g} s (at most {most:g})"
    served = {t.model: len(t.answers) for t in tenants}
    assert min(served.values()) >= 3, f"a team was starved: {served}"


async def test_a_higher_priority_member_goes_first_and_a_lower_one_still_meets_its_bound(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """a is resident and busy inside its floor; b (priority 0) asks, then c (priority 10). While
    they wait, the pool's status shows both, oldest first (what ``kubectl get mpool`` shows). When
    the floor ends, c goes first though b asked earlier; b is answered next, within its bound."""
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=1.0, token_seconds=0.02
    )
    # The floor must outlast the proxies' start (each counts it from its own first sight of a):
    # 5 s did not on a loaded machine (b came after the floor and went first, with c not asked).
    scheduling = {"maxWait": "30s", "minResidency": "15s"}
    await setup_pool(admin, namespace, ("a", "b", "c"), scheduling, priorities={"c": 10})
    proxies = await start_proxies(cluster, admin, namespace, tmp_path, started, 3)
    settings = Settings(max_wait=30, min_residency=15)
    bound = wait_bound(settings, members=3, drain=2.0, swap=SWAP_ALLOWANCE)
    tenant = Tenant(proxies[0], "model-a")
    answers: dict[str, Answer] = {}
    async with http_client(timeout=bound + 30) as http:

        async def parked(proxy: RouterProxyProcess, model: str) -> None:
            answers[model] = await ask(http, proxy, model)

        async def both_answered() -> bool:
            return len(answers) == 2

        async def shows_both_waiting() -> list[str] | None:
            status = (await admin.get(POOL, "gpu-0", namespace)).get("status") or {}
            waiting = [w["member"] for w in status.get("waiting") or [] if w.get("requests")]
            return waiting if waiting == ["b", "c"] else None

        async with anyio.create_task_group() as group:
            group.start_soon(tenant.run, http)
            await anyio.sleep(0.5)
            group.start_soon(parked, proxies[1], "model-b")
            await anyio.sleep(0.5)
            group.start_soon(parked, proxies[2], "model-c")
            await eventually(shows_both_waiting, timeout=5, what="status.waiting showing b then c")
            await eventually(both_answered, timeout=bound + 20, what="b and c answered")
            tenant.stop = True
    b, c = answers["model-b"], answers["model-c"]
    assert (b.status, b.answered_by, c.status, c.answered_by) == (200, "model-b", 200, "model-c")
    assert c.ended < b.ended, f"b (priority 0) was served before c (priority 10): {b} {c}"
    assert b.waited <= bound, f"b waited {b.waited:.1f} s; its bound is {bound:.1f} s"
    assert_all_answered([tenant], bound)
