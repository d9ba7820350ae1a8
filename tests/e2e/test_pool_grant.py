"""A pool member runs only once its pool grants it the slot, against a real API server.

The contract: docs/modelpool.md ("The grant"). The pool's decision lives in its own status
(``status.members[].slot``); a member's own ``spec.replicas`` is ignored while a pool lists it, and
no member is ever written by the operator.

The operator runs under its own ServiceAccount; the node stand-in gives Deployments pods backed by
simulator processes. The stand-in starts a pod's simulator after the pod is created and deletes
the pod only once the process has exited, so a process lives inside its pod's lifetime: pods of
two members that never coexist mean two members' processes never did either.

Coexistence is judged from one watch of the namespace's pods, started before anything is created,
in resourceVersion order (one etcd orders every write): a pod exists from its ADDED event until its
DELETED event. No timing is asserted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import DEPLOYMENTS, EVENTS, PODS, Resource
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    start_node,
    stopped_at_exit,
)
from tests.e2e.test_modelpool import (
    TIMEOUT,
    as_written,
    deployment_replicas,
    isvc_body,
    isvc_phase,
    pool_slots,
    settled,
    slots,
    wait_pool,
)
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
Object = dict[str, Any]
Event = tuple[str, str, Object]


@pytest.fixture
def node(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[NodeStandInProcess]:
    """The node stand-in for this test's namespace; stopping it takes its pods along."""
    started: list[LocalProcess]
    with stopped_at_exit() as started:
        yield start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=1.5)


@asynccontextmanager
async def watched(admin: KubeClient, namespace: str) -> AsyncIterator[list[Event]]:
    """Every pod and Deployment event in ``namespace`` from before the block until its end."""
    events: list[Event] = []

    async def record(resource: Resource, kind: str, version: str) -> None:
        async with admin.watch(resource, namespace, resource_version=version) as stream:
            async for event in stream:
                if event.type != "BOOKMARK":
                    events.append((kind, event.type, event.object))

    async with anyio.create_task_group() as group:
        for resource, kind in ((PODS, "pod"), (DEPLOYMENTS, "deployment")):
            version = (await admin.list(resource, namespace)).resource_version
            group.start_soon(record, resource, kind, version)
        yield events
        await anyio.sleep(0.5)  # let the last events in
        group.cancel_scope.cancel()


def overlaps(events: list[Event]) -> list[tuple[int, set[str]]]:
    """Each moment (a resourceVersion) at which pods of two different members existed."""
    pods = sorted(
        ((int(o["metadata"]["resourceVersion"]), t, o) for k, t, o in events if k == "pod"),
        key=lambda e: e[0],
    )
    alive: dict[str, str] = {}  # pod uid -> member
    found = []
    for version, type_, pod in pods:
        uid = pod["metadata"]["uid"]
        if type_ == "DELETED":
            alive.pop(uid, None)
        else:
            alive[uid] = pod["metadata"]["labels"][ISVC_LABEL]
        if len(members := set(alive.values())) > 1:
            found.append((version, members))
    return found


async def pool_events(admin: KubeClient, namespace: str, pool: str) -> list[Object]:
    """The Events (events.k8s.io) regarding ``pool``."""
    found = await admin.list(EVENTS, namespace)
    return [e for e in found.items if e["regarding"]["name"] == pool]


@pytest.mark.anyio  # here, not only by conftest: anyio must see it while pytest parametrizes
@pytest.mark.parametrize("order", ["kubectl-apply", "all-at-once"])
async def test_a_pool_applied_with_its_members_starts_only_its_choice(
    admin: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,
    order: str,
) -> None:
    """The README quick start: both members leave ``replicas`` unset (= 1) and are created with
    their pool, no wait in between; only the pool's default may ever have a pod, and nobody writes
    a member.

    ``kubectl-apply``: back to back in the order ``kubectl apply -f manifests/samples/`` creates
    them (file names: the members, then the pool). The happy path warns of nothing. ``all-at-once``:
    the three creates race, so the pool may exist before a member does; then, and only then, a
    ``Degraded`` warning (a member not found) is right, and no other.
    """
    created: dict[str, Object] = {}

    async def create_member(name: str) -> None:
        created[name] = await admin.create(ISVC, isvc_body(name, replicas=None), namespace)

    async with watched(admin, namespace) as events:
        if order == "kubectl-apply":
            await create_member("a")
            await create_member("b")
            await admin.create(POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
        else:
            async with anyio.create_task_group() as group:
                group.start_soon(create_member, "a")
                group.start_soon(create_member, "b")
                group.start_soon(admin.create, POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
        pool = await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
        b = await isvc_phase(admin, namespace, "b", "Stopped")

    seen = [(k, t, o["metadata"]["name"]) for k, t, o in events]
    assert overlaps(events) == [], seen
    assert {o["metadata"]["labels"][ISVC_LABEL] for k, _, o in events if k == "pod"} == {"a"}, seen
    raised_b = [o for k, _, o in events if k == "deployment" and o["metadata"]["name"] == "b"
                and (o["spec"].get("replicas") or 0) > 0]  # fmt: skip
    assert raised_b == [], "b's Deployment was raised without a grant"
    assert slots(pool) == {"a": "Granted", "b": "Released"}
    assert await deployment_replicas(admin, namespace, "a") == 1
    assert await deployment_replicas(admin, namespace, "b") == 0
    # b asks to run (replicas unset, and it stays so: nobody writes it); its pool decided 0.
    (ready_b,) = [c for c in b["status"]["conditions"] if c["type"] == "Ready"]
    assert (b["status"]["pool"], b["status"]["desiredReplicas"], ready_b["reason"]) == (
        "gpu",
        0,
        "NotGranted",
    )
    a = await admin.get(ISVC, "a", namespace)
    for member in (a, b):
        name = member["metadata"]["name"]
        assert "replicas" not in member["spec"], f"{name}'s spec.replicas was written"
        assert as_written(member) == as_written(created[name]), f"{name} was written"

    # Events are sent in order: once the pool's SwapCompleted is in, any warning before it is too.
    async def completed() -> list[Object] | None:
        found = await pool_events(admin, namespace, "gpu")
        return found if any(e["reason"] == "SwapCompleted" for e in found) else None

    found = await eventually(completed, timeout=TIMEOUT, what="the pool's SwapCompleted event")
    warnings = [(e["reason"], e.get("note")) for e in found if e["type"] == "Warning"]
    if order == "all-at-once":
        warnings = [w for w in warnings if w[0] != "Degraded"]
    assert warnings == [], warnings
    async with http_client(timeout=10, trust_env=False) as http:
        metrics = (await http.get(operator.metrics_url)).text
    assert "member_write_conflicts" not in metrics


async def test_a_members_own_replicas_move_nothing_its_pool_decided(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    """A member's manifest re-applied (``kubectl apply``, Helm, Argo CD) with other replicas: the
    resident asking for 0 keeps running, the parked member asking for 1 stays down."""
    for name in ("a", "b"):
        await admin.create(ISVC, isvc_body(name, replicas=None), namespace)
    await admin.create(POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
    await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
    await isvc_phase(admin, namespace, "b", "Stopped")
    deployments = {n: await admin.get(DEPLOYMENTS, n, namespace) for n in ("a", "b")}

    async with watched(admin, namespace) as events:
        wrote = {
            "a": await admin.patch(ISVC, "a", {"spec": {"replicas": 0}}, namespace),
            "b": await admin.patch(ISVC, "b", {"spec": {"replicas": 1}}, namespace),
        }

        async def observed() -> bool:
            for name, obj in wrote.items():
                status = (await admin.get(ISVC, name, namespace)).get("status") or {}
                if status.get("observedGeneration") != obj["metadata"]["generation"]:
                    return False
            return True

        await eventually(observed, timeout=TIMEOUT, what="both new generations observed")

    pods = [(t, o["metadata"]["name"]) for k, t, o in events if k == "pod"
            and (t != "MODIFIED" or o["metadata"].get("deletionTimestamp"))]  # fmt: skip
    assert pods == [], "a pod was started or stopped"
    resized = [(o["metadata"]["name"], o["spec"].get("replicas")) for k, _, o in events
               if k == "deployment" and o["spec"].get("replicas")
               != deployments[o["metadata"]["name"]]["spec"].get("replicas")]  # fmt: skip
    assert resized == [], "a Deployment was resized"
    assert await pool_slots(admin, namespace) == {"a": "Granted", "b": "Released"}
    for name, before in deployments.items():
        now = await admin.get(DEPLOYMENTS, name, namespace)
        assert now["metadata"]["generation"] == before["metadata"]["generation"], name
    a = await admin.get(ISVC, "a", namespace)
    b = await admin.get(ISVC, "b", namespace)
    assert (a["status"]["phase"], a["status"]["desiredReplicas"]) == ("Ready", 1)
    assert (b["status"]["phase"], b["status"]["desiredReplicas"]) == ("Stopped", 0)


async def test_an_inference_service_outside_any_pool_starts_on_its_own(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    created = await admin.create(ISVC, isvc_body("solo", replicas=None), namespace)
    solo = await isvc_phase(admin, namespace, "solo", "Ready")
    assert "pool" not in solo["status"]
    assert solo["status"]["desiredReplicas"] == 1
    assert await deployment_replicas(admin, namespace, "solo") == 1
    assert as_written(solo) == as_written(created), "solo was written"
