"""Several residents within a budget, end to end (docs/modelpool.md, "Several residents").

The operator (pool controller) runs under its ServiceAccount, the node stand-in plays the members
as simulators, and two ``controlplane router-proxy`` processes share the pool's demand. The pool
``gpu-0`` has 24Gi and three members: ``a`` (10Gi), ``b`` (12Gi) and ``c`` (14Gi). ``a`` and ``b``
fit together, as do ``a`` and ``c``; ``b`` and ``c`` do not.

Every test runs under the pool invariant monitor, which here checks the budget: the footprints of
the members with a pod not yet gone, or a live server process, never exceed 24Gi at any instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from controlplane.api.v1alpha1.activation import claimed, new_pool_lease
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import LEASES, PODS
from controlplane.scheduling.policy import Settings, wait_bound
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.kubectl import kubectl
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import isvc_body, start_proxies
from tests.e2e.test_scheduling import (
    ISVC,
    POOL,
    ROUTER,
    SWAP_ALLOWANCE,
    TIMEOUT,
    Tenant,
    ask,
    assert_all_answered,
    three_teams_for,
)
from tests.e2e.waiting import eventually

FOOTPRINTS = {"a": "10Gi", "b": "12Gi", "c": "14Gi"}
SCHEDULING = {"maxWait": "15s", "minResidency": "3s"}
SETTINGS = Settings(max_wait=15, min_residency=3)


async def setup_budget_pool(admin: KubeClient, namespace: str) -> None:
    """a, b, c (a resident, warmed as the default), pool ``gpu-0`` of 24Gi, router ``router``."""
    for index, member in enumerate(FOOTPRINTS):
        await admin.create(ISVC, isvc_body(member, 1 if index == 0 else 0), namespace)
    body = pool_body("gpu-0", list(FOOTPRINTS), "a", "120s", scheduling=SCHEDULING)
    body["spec"]["capacity"] = {"gpuMemory": "24Gi"}
    for entry in body["spec"]["members"]:
        entry["gpuMemory"] = FOOTPRINTS[entry["inferenceServiceRef"]["name"]]
    await admin.create(POOL, body, namespace)
    await admin.create(ROUTER, router_body("router", "gpu-0"), namespace)
    await eventually(
        lambda: residents_are(admin, namespace, ["a"]), timeout=TIMEOUT, what="a resident"
    )


async def pool_status(admin: KubeClient, namespace: str) -> dict[str, Any]:
    return dict((await admin.get(POOL, "gpu-0", namespace)).get("status") or {})


async def residents_are(admin: KubeClient, namespace: str, wanted: list[str]) -> bool:
    status = await pool_status(admin, namespace)
    return status.get("residents") == wanted and status.get("phase") == "Ready"


async def pod_names(admin: KubeClient, namespace: str, member: str) -> list[str]:
    found = await admin.list(
        PODS, namespace, label_selector=f"inference.modelpool.dev/inferenceservice={member}"
    )
    return sorted(p["metadata"]["name"] for p in found.items)


async def test_a_member_that_fits_comes_up_beside_the_busy_resident_and_one_that_needs_room_evicts_only_what_it_must(  # noqa: E501
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """A tenant loops requests for a, back to back, through the whole test: a is never drained.
    b is asked for and fits beside a (22Gi): it comes up with no drain and no wait for a. c is
    asked for next: it fits beside a but not beside b, so b (idle) leaves and a stays. The
    tenant's requests are never held: none waits longer than a request takes plus a margin."""
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=1.0, token_seconds=0.02
    )
    await setup_budget_pool(admin, namespace)
    a_pods = await pod_names(admin, namespace, "a")
    proxies = await start_proxies(cluster, admin, namespace, tmp_path, started, 2)
    bound = wait_bound(SETTINGS, members=3, drain=2.0, swap=SWAP_ALLOWANCE)
    tenant = Tenant(proxies[0], "model-a")
    async with (
        http_client(timeout=bound + 30) as http,
        anyio.create_task_group() as group,
    ):
        group.start_soon(tenant.run, http)
        await anyio.sleep(1.0)
        b = await ask(http, proxies[1], "model-b")
        assert (b.status, b.answered_by) == (200, "model-b"), b
        await eventually(
            lambda: residents_are(admin, namespace, ["a", "b"]),
            timeout=10,
            what="a and b resident together",
        )
        _, wide, _ = await kubectl(cluster, "get", "mpool", "gpu-0", "-n", namespace, "-o", "wide")
        c = await ask(http, proxies[1], "model-c")
        assert (c.status, c.answered_by) == (200, "model-c"), c
        await eventually(
            lambda: residents_are(admin, namespace, ["a", "c"]),
            timeout=10,
            what="a and c resident, b gone",
        )
        await anyio.sleep(1.0)
        tenant.stop = True
    assert c.waited <= bound, f"c waited {c.waited:.1f} s; its bound is {bound:.1f} s"
    assert_all_answered([tenant], bound)
    slowest = max(answer.waited for answer in tenant.answers)
    assert slowest < 2.0, f"a request for a waited {slowest:.1f} s: a was drained or held"
    assert await pod_names(admin, namespace, "a") == a_pods, "a's pod was replaced"
    assert await pod_names(admin, namespace, "b") == [], "b still has a pod"

    async def all_used() -> bool:
        return (await pool_status(admin, namespace)).get("budget") == {
            "capacity": "24Gi",
            "used": "24Gi",
        }

    # b's share counts until its Deployment, too, says 0 replicas
    await eventually(all_used, timeout=10, what="the budget showing 24Gi of 24Gi used")
    header, row = wide.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "POLICY", "RESIDENT"]
    assert row.split()[2] == '["a","b"]', wide
    assert "22Gi" in row.split(), wide
    assert "24Gi" in row.split(), wide


async def test_mixed_load_on_three_members_keeps_the_budget_and_every_bound(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """Three teams, one per member, ask with short pauses through two proxies for 30 s: b and c
    cannot be resident together, so they take turns while a (which fits beside either) stays.
    Every request is answered, each within the bound, and the monitor sees the budget kept."""
    start_node(
        cluster, tmp_path, started, namespace=namespace, load_seconds=1.0, token_seconds=0.02
    )
    await setup_budget_pool(admin, namespace)
    proxies = await start_proxies(cluster, admin, namespace, tmp_path, started, 2)
    bound = wait_bound(SETTINGS, members=3, drain=2.0, swap=SWAP_ALLOWANCE)
    tenants = await three_teams_for(proxies, 30.0, bound)
    a_slowest = max(answer.waited for answer in tenants[0].answers)
    assert a_slowest < 2.0, f"a request for a waited {a_slowest:.1f} s: a fits beside either"
    status = await pool_status(admin, namespace)
    assert "a" in (status.get("residents") or []), status


async def test_an_intent_that_makes_no_room_is_never_granted_over_the_budget(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """The budget is the pool controller's to keep, whatever a driver asks: an intent for c that
    names nobody to leave, while a and b are resident (22Gi of 24Gi), is not granted; once it
    names b, b is drained and c comes up beside a."""
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=0.5)
    await setup_budget_pool(admin, namespace)
    lease = await admin.create(
        LEASES, new_pool_lease(namespace, "gpu-0", "test", "b", 60), namespace
    )
    await eventually(
        lambda: residents_are(admin, namespace, ["a", "b"]), timeout=TIMEOUT, what="b beside a"
    )
    lease = await admin.update(LEASES, claimed(lease, "test", "c", 60))
    await anyio.sleep(5.0)
    status = await pool_status(admin, namespace)
    slots = {m["name"]: m.get("slot") for m in status["members"]}
    assert slots["c"] != "Granted", status
    assert await pod_names(admin, namespace, "c") == []
    assert status["pendingMember"] == "c"
    assert status["residents"] == ["a", "b"]
    await admin.update(LEASES, claimed(lease, "test", "c", 60, evict=["b"]))
    await eventually(
        lambda: residents_are(admin, namespace, ["a", "c"]), timeout=TIMEOUT, what="c beside a"
    )
    assert await pod_names(admin, namespace, "b") == []
