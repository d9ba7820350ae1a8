"""Clients that leave take their demand with them (issue 40), end to end.

The operator under its ServiceAccount, the node stand-in playing the members as simulators, two
``controlplane router-proxy`` processes with held streams kept alive, under the pool invariant
monitor. A pool's demand is what every replica's report says (docs/modelpool.md, "Scheduling the
slot"): a report that still counts a request nobody waits for would swap the pool for nobody, and
a pool could never be judged idle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.api.v1alpha1.activation import pool_lease_name
from controlplane.api.v1alpha1.demand import live_reports
from controlplane.local.system import RouterProxyProcess
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.leaserecord import ExpiryObserver, LeaseRecord
from controlplane.runtime.resources import LEASES
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, isvc_body, start_proxies
from tests.e2e.waiting import eventually

#: The pool's swap budget: a held request whose client left used to count until it ran out.
BUDGET_SECONDS = 120
#: How long b takes to load: its requests stay held for the whole test.
B_LOAD_SECONDS = 90.0
#: Within this long of the clients leaving, no report counts them: the report interval (0.5 s),
#: the activity window of a member whose last request ended (2 s), and slack for a loaded machine.
GONE_WITHIN_SECONDS = 10.0


async def reported(admin: KubeClient, namespace: str) -> dict[str, dict[str, Any]]:
    """Per replica holding a live report of pool gpu-0 that names anyone: its demand, by member,
    read with the readers' own parser (:func:`live_reports`)."""
    leases = (await admin.list(LEASES, namespace)).items
    return {
        report.holder: {member: demand.to_json() for member, demand in report.demand.items()}
        for report in live_reports(leases, "gpu-0", ExpiryObserver())
        if report.demand
    }


async def test_clients_that_leave_leave_no_demand_behind(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Three clients cut their connections: one held for b (cold, loading for 90 s), one held as
    a kept-alive stream for b on the other replica, and one streaming a long answer from the
    resident a. Within seconds no replica's report counts any member, and the swap to b, wanted
    by nobody now, lets the pool's Lease go. Before: both of b's held requests stayed in the
    reports until the pool's 120 s budget ran out."""
    start_node(cluster, tmp_path, started, namespace=namespace, token_seconds=0.05)
    await admin.create(InferenceService.resource(), isvc_body("a", 1), namespace)
    await admin.create(
        InferenceService.resource(), isvc_body("b", 0, load_seconds=B_LOAD_SECONDS), namespace
    )
    await admin.create(
        ModelPool.resource(), pool_body("gpu-0", ("a", "b"), "a", f"{BUDGET_SECONDS}s"), namespace
    )
    await admin.create(ModelRouter.resource(), router_body("router", "gpu-0"), namespace)

    async def a_resident() -> bool:
        status = (await admin.get(ModelPool.resource(), "gpu-0", namespace)).get("status") or {}
        return status.get("residentMember") == "a" and status.get("phase") == "Ready"

    await eventually(a_resident, timeout=60, what="a resident and Ready")
    proxies = await start_proxies(
        cluster, admin, namespace, tmp_path, started, 2,
        extra_args=("--held-stream-keepalive", "1"),
    )  # fmt: skip

    async def ask(proxy: RouterProxyProcess, body: dict[str, Any]) -> None:
        async with (
            http_client(timeout=BUDGET_SECONDS + 30) as http,
            http.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as answer,
        ):
            async for _ in answer.aiter_raw():
                pass

    async with anyio.create_task_group() as clients:
        clients.start_soon(ask, proxies[0], chat("model-b"))
        clients.start_soon(ask, proxies[1], chat("model-b", stream=True))
        clients.start_soon(ask, proxies[0], chat("model-a", stream=True, max_tokens=4000))

        async def all_counted() -> bool:
            now = await reported(admin, namespace)
            b_held = sum(int((d.get("b") or {}).get("held", 0)) for d in now.values())
            a_active = any((d.get("a") or {}).get("active") for d in now.values())
            return b_held == 2 and a_active

        await eventually(all_counted, timeout=30, what="b's two held requests and a's stream "
                                                       "in the reports")  # fmt: skip
        clients.cancel_scope.cancel()  # every client cuts its connection

    async def no_demand() -> bool:
        return await reported(admin, namespace) == {}

    await eventually(no_demand, timeout=GONE_WITHIN_SECONDS, what="no report counting anyone")

    async def intent_released() -> bool:
        try:
            lease = await admin.get(LEASES, pool_lease_name("gpu-0"), namespace)
        except NotFound:
            return True
        return not LeaseRecord.of(lease).held

    await eventually(intent_released, timeout=GONE_WITHIN_SECONDS, what="the pool's Lease released")
