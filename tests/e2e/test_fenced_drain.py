"""The fenced drain (issue 46), end to end: a replica whose watch lags sends nothing to a member
after the pool's probe read it idle.

The operator under its ServiceAccount, the node stand-in playing the members as simulators, two
``controlplane router-proxy`` processes: ``direct`` talks to the API server, ``lagging`` through a
fault proxy (tests/e2e/faultproxy.py) that freezes every watch event it relays for
:data:`LAG_SECONDS` once armed, so its caches keep saying a is resident and open while the pool
has already closed admission to a. A client loops short streams for a through ``lagging``, with
gaps in which a's ``/slots`` read idle; a request for b through ``direct`` swaps the pool.

Without the fence, the pool's probe reads a idle in one of those gaps, releases a, and the
lagging replica's next request reaches a after that (or a server already stopping): a stream
starts after a's release, or fails. With it, the pool waits until the lagging replica has seen the
closure and acknowledged it with nothing in flight on a (docs/design.md, "One fenced drain").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from controlplane.api.v1alpha1 import ModelPool
from controlplane.local.system import RouterProxyProcess
from controlplane.runtime.client import KubeClient
from tests.e2e.clusters import TestCluster
from tests.e2e.faultproxy import Fault, FaultProxy
from tests.e2e.httpclients import http_client
from tests.e2e.kubectl import REPO
from tests.e2e.memberstreams import Stream, serve_pool_of_two
from tests.e2e.operator_process import LocalProcess, OperatorProcess
from tests.e2e.proxies import chat, proxy_kubeconfig, run_proxies
from tests.e2e.waiting import eventually

#: How long the lagging replica's caches stay frozen once the swap is asked.
LAG_SECONDS = 8.0
#: The client's streams for a: tokens, and the pause between two of them (a's idle gaps).
A_TOKENS = 6
GAP_SECONDS = 0.3
#: The pool's swap budget (tests/e2e/memberstreams.py serves the pool with it).
BUDGET_SECONDS = 60
Object = dict[str, Any]


class FrozenView(Fault):
    """Holds every watch event until :attr:`until` (monotonic; 0: nothing held)."""

    until = 0.0

    def hold(self, resource: str, event_type: str, obj: Object) -> float:
        return max(0.0, self.until - time.monotonic())


@dataclass
class Asked:
    """One streamed request for a: when it was sent, when its first byte came, how it ended."""

    sent: float
    first_byte: float | None = None
    status: int | None = None
    stream: Stream = field(default_factory=Stream)
    error: str | None = None


@dataclass
class SlotTimes:
    """When the pool's status first released a, and when it granted a again after that."""

    released: float | None = None
    granted_again: float | None = None


async def until(done: Callable[[], bool], what: str) -> None:
    async def probe() -> bool | None:
        return done() or None

    await eventually(probe, timeout=BUDGET_SECONDS, interval=0.05, what=what)


async def stream_a(http: httpx.AsyncClient, url: str, asked: list[Asked]) -> None:
    one = Asked(time.monotonic())
    asked.append(one)
    body = chat("model-a", stream=True, max_tokens=A_TOKENS)
    try:
        async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as answer:
            one.status = answer.status_code
            async for line in answer.aiter_lines():
                if one.first_byte is None:
                    one.first_byte = time.monotonic()
                one.stream.read(line)
    except httpx.HTTPError as err:
        one.error = repr(err)


async def watch_slot(admin: KubeClient, namespace: str, times: SlotTimes) -> None:
    """Polls the pool's decision about a (a status write is seen within the poll's period)."""
    while times.granted_again is None:
        status = (await admin.get(ModelPool.resource(), "gpu-0", namespace)).get("status") or {}
        slot = next((m.get("slot") for m in status.get("members") or [] if m["name"] == "a"), None)
        now = time.monotonic()
        if slot == "Released" and times.released is None:
            times.released = now
        elif slot == "Granted" and times.released is not None:
            times.granted_again = now
        await anyio.sleep(0.02)


async def test_a_lagging_replica_sends_nothing_to_a_member_after_its_probe_read_idle(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    scheduling = {"maxWait": "4s", "minResidency": "0s"}
    await serve_pool_of_two(
        cluster, admin, namespace, tmp_path, started, token_seconds=0.05, scheduling=scheduling
    )
    kubeconfig = await proxy_kubeconfig(cluster, admin, namespace, tmp_path)
    (direct,) = await run_proxies(kubeconfig, namespace, tmp_path, started, 1, prefix="direct")
    frozen = FrozenView()
    relay = FaultProxy(cluster.admin_config(), "lagging", fault=frozen).start()
    try:
        lagging = RouterProxyProcess(
            relay.kubeconfig(kubeconfig, tmp_path / "lagging.kubeconfig"),
            tmp_path, namespace, "lagging", cwd=REPO,
        )  # fmt: skip
        relay.pid = lagging.popen.pid
        started.append(lagging)
        async with http_client(timeout=5) as probe:

            async def ready() -> bool:
                assert lagging.running(), lagging.output()[-2000:]
                try:
                    return (await probe.get(f"{lagging.url}/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(ready, timeout=60, interval=0.2, what="the lagging replica ready")
        relay.armed = True
        await run_swap(admin, namespace, direct, lagging, frozen)
    finally:
        relay.stop()


async def run_swap(
    admin: KubeClient,
    namespace: str,
    direct: RouterProxyProcess,
    lagging: RouterProxyProcess,
    frozen: FrozenView,
) -> None:
    asked: list[Asked] = []
    times = SlotTimes()
    b_answer: list[int] = []
    async with http_client(timeout=BUDGET_SECONDS + 30) as http, anyio.create_task_group() as tg:

        async def client() -> None:
            while True:  # until cancelled
                await stream_a(http, lagging.url, asked)
                await anyio.sleep(GAP_SECONDS)

        tg.start_soon(client)
        await until(lambda: len(asked) >= 2, "a served through lagging")
        frozen.until = time.monotonic() + LAG_SECONDS
        tg.start_soon(watch_slot, admin, namespace, times)
        answer = await http.post(f"{direct.url}/v1/chat/completions", json=chat("model-b"))
        b_answer.append(answer.status_code)
        await until(lambda: times.granted_again is not None, "a granted again")
        swapped_back = len(asked)
        await until(
            lambda: len(asked) >= swapped_back + 2 and asked[-1].status is not None,
            "a served again after its next turn",
        )
        tg.cancel_scope.cancel()

    assert b_answer == [200]
    assert times.released is not None
    assert times.granted_again is not None
    finished = [a for a in asked if a.status is not None or a.error is not None][:-1]
    broken = [a for a in finished if a.status != 200 or not a.stream.whole or a.error]
    assert not broken, f"requests for a cut or failed: {broken}"
    after_probe = [
        a
        for a in finished
        if a.first_byte is not None and times.released < a.first_byte < times.granted_again
    ]
    assert not after_probe, (
        f"{len(after_probe)} request(s) reached a after the pool released it "
        f"(its probe had read idle): the lagging replica was not fenced"
    )
    held = [a for a in finished if a.first_byte is not None and a.first_byte > times.granted_again]
    assert held, "no request for a was held while a was drained: the lag never closed anything"
