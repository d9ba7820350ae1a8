"""Ready when the server is (issue 22): a held request reaches the new member as soon as its
server answers ``/health``, before the node marks its pod Ready and the pool names it resident.

The node stand-in here looks at a starting server only every 4 s (``--starting-poll-seconds``, a
kubelet's readiness period made long), so the window between "the server answers" and "the pod
is Ready" is seconds wide and the order of events is what the test judges, not a timing.
Real API server, the operator, two router-proxies under ROUTER_PROXY_RULES; the pool invariant
monitor watches throughout (never two members' pods or processes at once).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from controlplane.api.v1alpha1 import ModelPool
from controlplane.local.system import RouterProxyProcess
from controlplane.runtime.client import KubeClient
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import chat, proxy_kubeconfig, run_proxies
from tests.e2e.test_router_proxy import TIMEOUT, lease_holder, setup_pool
from tests.e2e.waiting import eventually

POOL = ModelPool.resource()
#: The stand-in's look at a starting server: long, so "before Ready" is seconds wide.
SLOW_READINESS_SECONDS = 4.0
DIRECT_LOG = "healthy by direct probe"


async def pool_status(admin: KubeClient, namespace: str) -> dict[str, object]:
    return dict((await admin.get(POOL, "gpu-0", namespace)).get("status") or {})


async def swap_through(
    http: httpx.AsyncClient, proxy: RouterProxyProcess, model: str
) -> httpx.Response:
    answer = await http.post(f"{proxy.url}/v1/chat/completions", json=chat(model))
    assert answer.status_code == 200, answer.text
    return answer


async def test_a_held_request_reaches_the_new_member_before_its_pod_is_ready(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    start_node(
        cluster,
        tmp_path,
        started,
        namespace=namespace,
        load_seconds=0.3,
        starting_poll_seconds=SLOW_READINESS_SECONDS,
    )
    await setup_pool(admin, namespace, "60s")
    kubeconfig = await proxy_kubeconfig(cluster, admin, namespace, tmp_path)
    (direct,) = await run_proxies(kubeconfig, namespace, tmp_path, started, 1)
    async with http_client(timeout=TIMEOUT) as http:
        # a -> b through the proxy that probes: answered while the pool still names a resident
        # and b pending (b's pod is not Ready yet), by b's server
        await swap_through(http, direct, "model-b")
        status = await pool_status(admin, namespace)
        assert (status.get("residentMember"), status.get("pendingMember")) == ("a", "b"), status
        assert DIRECT_LOG in direct.output()
        # the swap (and its Lease) ends only once the pool names b resident
        assert await lease_holder(admin, namespace) not in (None, "")

        async def b_resident_and_released() -> bool:
            status = await pool_status(admin, namespace)
            return (
                status.get("residentMember") == "b" and await lease_holder(admin, namespace) == ""
            )

        await eventually(b_resident_and_released, timeout=TIMEOUT, what="b resident, Lease free")

    # b -> a through a proxy told not to probe: answered only once the pool names a resident
    direct.stop()
    (slow,) = await run_proxies(
        kubeconfig,
        namespace,
        tmp_path,
        started,
        1,
        extra_args=["--direct-health-interval", "0"],
        prefix="no-probe",
    )
    async with http_client(timeout=TIMEOUT) as http:
        await swap_through(http, slow, "model-a")
        status = await pool_status(admin, namespace)
        assert status.get("residentMember") == "a", status
        assert DIRECT_LOG not in slow.output()
