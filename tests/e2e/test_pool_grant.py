"""A pool member runs only once its pool grants it the slot, against a real API server.

The contract: docs/modelpool.md ("The grant").

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
from controlplane.controllers.modelpool.grant import GRANTED_BY_ANNOTATION
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import DEPLOYMENTS, PODS, Resource
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.operator_process import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    start_node,
    stopped_at_exit,
)
from tests.e2e.test_modelpool import isvc_body, isvc_phase, settled, wait_pool

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


async def test_a_pool_applied_with_its_members_starts_only_its_choice(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    """The README quick start: both members leave ``replicas`` unset (= 1) and are created at once
    with their pool, members first; only the pool's default may ever have a pod."""
    async with watched(admin, namespace) as events:
        async with anyio.create_task_group() as group:
            group.start_soon(admin.create, ISVC, isvc_body("a", replicas=None), namespace)
            group.start_soon(admin.create, ISVC, isvc_body("b", replicas=None), namespace)
            group.start_soon(admin.create, POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
        await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
        b = await isvc_phase(admin, namespace, "b", "Stopped")

    seen = [(k, t, o["metadata"]["name"]) for k, t, o in events]
    assert overlaps(events) == [], seen
    assert {o["metadata"]["labels"][ISVC_LABEL] for k, _, o in events if k == "pod"} == {"a"}, seen
    raised_b = [o for k, _, o in events if k == "deployment" and o["metadata"]["name"] == "b"
                and (o["spec"].get("replicas") or 0) > 0]  # fmt: skip
    assert raised_b == [], "b's Deployment was raised without a grant"
    a = await admin.get(ISVC, "a", namespace)
    assert (a["metadata"].get("annotations") or {}).get(GRANTED_BY_ANNOTATION) == "gpu"
    assert GRANTED_BY_ANNOTATION not in (b["metadata"].get("annotations") or {})
    # b asked to run (replicas unset) until the pool wrote its decision: 0, no grant
    assert (b["spec"]["replicas"], b["status"]["pool"]) == (0, "gpu")


async def test_an_inference_service_outside_any_pool_starts_on_its_own(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    await admin.create(ISVC, isvc_body("solo", replicas=None), namespace)
    solo = await isvc_phase(admin, namespace, "solo", "Ready")
    assert "pool" not in solo["status"]
    assert GRANTED_BY_ANNOTATION not in (solo["metadata"].get("annotations") or {})
