"""The pool's decisions live in objects the pool owns, against a real API server.

The contract: docs/modelpool.md ("The grant"). A user (or Helm 4, or Argo CD, which all apply
server-side and force conflicts) owns the InferenceServices and the ModelPool they apply; the pool
decides in its own status (``status.members[].slot``), which no apply touches, and nobody else
writes a member. So re-applying everything in the middle of a swap changes nothing: the swap goes
on to the member the intent asked for, the drained member is never raised again, the members are
written by nobody but their user, and the pool records no conflict.

The test plays the activator (it holds the pool's Lease for the target) and applies with the
kubectl built with the control plane. The pool invariant monitor that ``start_node`` attaches
fails the test if two members ever ran at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import DEPLOYMENTS, EVENTS, PODS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import kubectl
from tests.e2e.operator_process import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    start_node,
    stopped_at_exit,
)
from tests.e2e.test_modelpool import (
    deferred,
    deployment_replicas,
    ready_url,
    settled,
    slots,
    stream_in_flight,
    take_lease,
    wait_pool,
)
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
POOL = ModelPool.resource()
Object = dict[str, Any]
#: kubectl's field manager for ``apply --server-side``.
USER_MANAGER = "kubectl"


@pytest.fixture
def node(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[NodeStandInProcess]:
    started: list[LocalProcess]
    with stopped_at_exit() as started:
        yield start_node(
            cluster, tmp_path, started, namespace=namespace, load_seconds=1.5, token_seconds=0.05
        )


def manifests(namespace: str) -> str:
    """What a user keeps in git: two members that say ``replicas: 1`` and the pool."""
    documents: list[Object] = []
    for name in ("a", "b"):
        documents.append(
            {
                "apiVersion": "inference.modelpool.dev/v1alpha1",
                "kind": "InferenceService",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"model": {"name": name, "source": f"/models/{name}.gguf"}, "replicas": 1},
            }
        )
    pool = pool_body("gpu", ["a", "b"], "a")
    pool["metadata"]["namespace"] = namespace
    documents.append(pool)
    return yaml.safe_dump_all(documents)


async def apply(cluster: TestCluster, path: Path) -> None:
    """``kubectl apply --server-side --force-conflicts``: what Helm 4 and Argo CD do."""
    await kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(path))


@asynccontextmanager
async def deployment_history(
    admin: KubeClient, namespace: str
) -> AsyncIterator[dict[str, list[int]]]:
    """Every ``spec.replicas`` each Deployment of ``namespace`` had while the block ran, in its
    watch's (etcd's) order."""
    history: dict[str, list[int]] = {}

    async def record(version: str) -> None:
        async with admin.watch(DEPLOYMENTS, namespace, resource_version=version) as stream:
            async for event in stream:
                if event.type in ("ADDED", "MODIFIED"):
                    name = event.object["metadata"]["name"]
                    replicas = int(event.object["spec"].get("replicas") or 0)
                    seen = history.setdefault(name, [])
                    if not seen or seen[-1] != replicas:
                        seen.append(replicas)

    async with anyio.create_task_group() as group:
        group.start_soon(record, (await admin.list(DEPLOYMENTS, namespace)).resource_version)
        yield history
        await anyio.sleep(0.5)  # let the last events in
        group.cancel_scope.cancel()


def spec_managers(obj: Object) -> set[str]:
    """The field managers that wrote the object itself (not a subresource such as status)."""
    return {
        str(entry.get("manager"))
        for entry in obj["metadata"].get("managedFields") or ()
        if not entry.get("subresource")
    }


async def test_reapplying_members_and_pool_server_side_mid_swap_changes_nothing(
    admin: KubeClient,
    cluster: TestCluster,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,
    tmp_path: Path,
) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(manifests(namespace))
    async with deployment_history(admin, namespace) as history:
        await apply(cluster, path)
        await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
        a_url = await ready_url(admin, namespace, "a")

        async with stream_in_flight(a_url, "a"):
            await take_lease(admin, namespace, "gpu", "b")  # the activator asks for b
            await wait_pool(
                admin, namespace, "gpu", deferred("PodsBusy"), "the drain of a to wait for a"
            )
            await apply(cluster, path)  # mid-swap, while a drains
        await eventually(
            lambda: deployment_replicas(admin, namespace, "b"),
            timeout=60,
            what="b to be raised",
        )
        await apply(cluster, path)  # mid-swap, while b loads
        pool = await wait_pool(admin, namespace, "gpu", settled("b"), "b to be resident")
        await apply(cluster, path)  # and once more, settled

    assert slots(pool) == {"a": "Released", "b": "Granted"}
    assert history["a"][-1] == 0, f"a was not drained: {history['a']}"
    assert history["a"].count(1) == 1, f"a was raised again after its drain: {history['a']}"
    assert history["b"] == [0, 1], f"b's Deployment moved more than once: {history['b']}"
    assert await deployment_replicas(admin, namespace, "a") == 0
    pods = await admin.list(
        PODS, namespace, label_selector="inference.modelpool.dev/inferenceservice=a"
    )
    assert pods.items == []
    for name in ("a", "b"):
        member = await admin.get(ISVC, name, namespace)
        assert member["spec"]["replicas"] == 1, f"{name}'s spec.replicas is not the user's"
        assert spec_managers(member) == {USER_MANAGER}, f"{name} was written by another manager"
        assert "inference.modelpool.dev/granted-by" not in (
            member["metadata"].get("annotations") or {}
        )
    events = await admin.list(EVENTS, namespace)
    warnings = [
        (e.get("reason"), e.get("note"))
        for e in events.items
        if e["regarding"].get("kind") == "ModelPool"
        and e.get("type") == "Warning"
        and e.get("reason") != "PodsBusy"  # the drain that waited for the stream said so
    ]
    assert warnings == [], f"the pool recorded warnings on the happy path: {warnings}"
