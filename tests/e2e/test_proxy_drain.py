"""A router-proxy replica that gets SIGTERM drains itself (docs/router.md, "Stopping").

Issue 46: ``kubectl delete pod`` of the proxies 3 s into a 2,000-token stream cut it after 407
tokens, 8 s in: the proxy stopped 5 s after SIGTERM whatever it relayed. Here one proxy relays a
stream of 250 tokens of 40 ms each (10 s) from member ``a`` and holds a request for the cold
member ``b`` (its turn kept away by ``minResidency``) when it gets SIGTERM, with
``--termination-grace-period 60`` and ``--shutdown-delay 2``:

* ``/readyz`` answers 503 at once, naming the stop, while the socket still accepts;
* the held request is answered 503 ``proxy_stopping`` with a ``Retry-After``, within the delay;
* after the delay a new connection is refused;
* the stream, which ends about 10 s after SIGTERM (past the old 5 s bound), arrives whole with
  its ``[DONE]``; while it is relayed the replica's demand report still names ``a`` active, and
  is emptied once the process has exited, with status 0, after the stream and well before the
  grace period.

The operator runs under its ServiceAccount, the node stand-in plays the members, the proxy runs
under a ServiceAccount bound to a Role of ``ROUTER_PROXY_RULES`` only; all under the pool
invariant monitor.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import httpx
import pytest

from controlplane.api.v1alpha1.demand import DEMAND_ANNOTATION, decode_demand, demand_lease_name
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import LEASES
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.memberstreams import STREAM_TOKENS, serve_pool_of_two, streaming
from tests.e2e.operator_process import LocalProcess, OperatorProcess, metric_sum
from tests.e2e.proxies import chat, start_proxies
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.anyio

#: Each token 40 ms: the 250-token stream lasts about 10 s, twice the proxy's old 5 s bound.
TOKEN_SECONDS = 0.04
SHUTDOWN_DELAY = 2.0
GRACE = 60
#: b's turn is kept away for longer than the test: the request for it stays held.
SCHEDULING = {"minResidency": "40s", "maxWait": "50s"}


async def active_in_report(admin: KubeClient, namespace: str, identity: str) -> set[str]:
    """The members this replica's demand report for pool ``gpu-0`` says are in flight here."""
    try:
        lease = await admin.get(LEASES, demand_lease_name("gpu-0", identity), namespace)
    except NotFound:
        return set()
    annotations = lease["metadata"].get("annotations") or {}
    report = decode_demand(annotations.get(DEMAND_ANNOTATION))
    return {member for member, demand in report.items() if demand.active}


async def test_sigterm_relays_the_stream_whole_and_refuses_the_held_request_retryably(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    await serve_pool_of_two(
        cluster, admin, namespace, tmp_path, started,
        token_seconds=TOKEN_SECONDS, scheduling=SCHEDULING,
    )  # fmt: skip
    flags = [f"--termination-grace-period={GRACE}", f"--shutdown-delay={SHUTDOWN_DELAY}"]
    (proxy,) = await start_proxies(
        cluster, admin, namespace, tmp_path, started, 1, extra_args=flags
    )
    held: list[httpx.Response] = []
    async with (
        http_client(timeout=30) as http,
        streaming(proxy.url, "model-a") as (stream, ended),
        anyio.create_task_group() as group,
    ):

        async def ask_for_b() -> None:
            held.append(await http.post(f"{proxy.url}/v1/chat/completions", json=chat("model-b")))

        group.start_soon(ask_for_b)

        async def holding() -> bool:
            return await metric_sum(f"{proxy.url}/metrics", "modelpool_held_requests") == 1

        await eventually(holding, timeout=30, interval=0.1, what="the request for b held")
        assert not ended.is_set(), "the stream ended before the stop: make it longer"
        proxy.popen.send_signal(signal.SIGTERM)
        signalled = time.monotonic()

        async def unready() -> bool:
            return (await http.get(f"{proxy.url}/readyz")).status_code == 503

        await eventually(unready, timeout=1, interval=0.05, what="/readyz 503 after SIGTERM")
        readyz = await http.get(f"{proxy.url}/readyz")
        assert any("stopping" in r for r in readyz.json()["reasons"]), readyz.text

        async def answered() -> bool:
            return bool(held)

        await eventually(answered, timeout=SHUTDOWN_DELAY, interval=0.05, what="the held 503")
        (refused,) = held
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "proxy_stopping"
        assert refused.json()["error"]["type"]
        assert int(refused.headers["Retry-After"]) >= 1
        assert time.monotonic() - signalled < SHUTDOWN_DELAY, "answered only when it closed"

        await anyio.sleep(SHUTDOWN_DELAY + 0.5 - (time.monotonic() - signalled))
        with pytest.raises(httpx.ConnectError):
            await http.get(f"{proxy.url}/healthz")
        assert proxy.running(), "the proxy exited with a stream still relayed"
        assert not ended.is_set(), "the stream ended too soon to show the drain: make it longer"
        assert await active_in_report(admin, namespace, proxy.identity) == {"a"}

        with anyio.fail_after(30):
            await ended.wait()
        stream_ended = time.monotonic()
    assert stream.whole, (stream.tokens, stream.finish_reason, stream.errors)
    assert stream.tokens == STREAM_TOKENS
    assert stream_ended - signalled > 5, "the stream outlived the old 5 s bound"
    code = await anyio.to_thread.run_sync(proxy.popen.wait, 15)
    exited = time.monotonic()
    assert code == 0, proxy.output()[-2000:]
    assert exited - signalled < GRACE - 5, "the proxy waited for more than its relays"
    assert await active_in_report(admin, namespace, proxy.identity) == set()
