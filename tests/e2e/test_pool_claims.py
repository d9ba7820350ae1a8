"""One member, one pool (docs/modelpool.md, "One member, one pool"): a second pool that lists a
member another pool holds is refused by name, never grants or drains it, and the first keeps
working. The operator runs under its ServiceAccount; the node stand-in plays the members, under
the pool invariant monitor (of both pools: at most one of a pool's members runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import DEPLOYMENTS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import isvc_body
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
TIMEOUT = 60.0


def condition(pool: dict[str, Any], type_: str) -> dict[str, Any]:
    conditions = (pool.get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c.get("type") == type_), {})


async def test_a_second_pool_listing_a_held_member_is_refused_and_takes_it_only_once_free(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    start_node(cluster, tmp_path, started, namespace=namespace)
    for name in ("a", "b", "c"):
        await admin.create(ISVC, isvc_body(name, 0), namespace)
    await admin.create(POOL, pool_body("first", ("a", "b"), "a"), namespace)

    async def resident(pool: str, member: str) -> dict[str, Any] | None:
        found = await admin.get(POOL, pool, namespace)
        status = found.get("status") or {}
        ready = status.get("residentMember") == member and status.get("phase") == "Ready"
        return found if ready else None

    await eventually(lambda: resident("first", "a"), timeout=TIMEOUT, what="a resident in first")
    await admin.create(POOL, pool_body("second", ("a", "c"), "c"), namespace)

    async def refused() -> dict[str, Any] | None:
        found = await admin.get(POOL, "second", namespace)
        valid = condition(found, "MembersValid")
        return found if valid.get("reason") == "MemberInAnotherPool" else None

    second = await eventually(refused, timeout=TIMEOUT, what="the second pool refused")
    valid = condition(second, "MembersValid")
    assert valid["status"] == "False"
    assert "a (held by pool first)" in valid["message"], valid
    assert second["status"]["phase"] == "Degraded"
    assert condition(second, "Ready")["reason"] == "MemberInAnotherPool"
    assert not [m for m in second["status"].get("members") or () if m.get("slot")], (
        "the refused pool wrote a decision about a member"
    )
    # The first pool keeps working: its resident still runs and its members are valid.
    deployment = await admin.get(DEPLOYMENTS, "a", namespace)
    assert deployment["spec"]["replicas"] == 1
    first = await admin.get(POOL, "first", namespace)
    assert condition(first, "MembersValid")["status"] == "True"
    assert first["status"]["residentMember"] == "a"
    await admin.delete(POOL, "first", namespace)

    # The first pool gone, the claim is free: the second pool takes it and warms its default.
    await eventually(lambda: resident("second", "c"), timeout=TIMEOUT, what="c resident in second")
    second = await admin.get(POOL, "second", namespace)
    assert condition(second, "MembersValid")["status"] == "True"
