"""The informer against a real API server: its cache converges whatever the stream does."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import pytest

from controlplane.runtime.cache import Object
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.informer import DeletedFinalStateUnknown, Informer, InformerSettings
from controlplane.runtime.resources import CONFIGMAPS, LEASES, NAMESPACES, Resource
from tests.e2e.clusters import TestCluster
from tests.e2e.waiting import eventually, until

pytestmark = pytest.mark.any_cluster


class Recorder:
    """Remembers what the informer said, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_add(self, obj: Object, initial: bool) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: Object, new: Object) -> None:
        self.events.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        self.events.append(("delete", obj))


@asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    async with anyio.create_task_group() as group:
        group.start_soon(informer.run)
        with anyio.fail_after(30):
            await informer.wait_for_sync()
        yield informer
        group.cancel_scope.cancel()


async def _server_state(admin: KubeClient, resource: Resource, namespace: str) -> dict[str, str]:
    listed = await admin.list(resource, namespace, label_selector=BURST)
    return {
        f"{namespace}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in listed.items
    }


def _cache_state(informer: Informer) -> dict[str, str]:
    return {key: informer.store.resource_version(key) or "" for key in informer.store}


async def _converged(admin: KubeClient, informer: Informer, namespace: str) -> bool:
    return _cache_state(informer) == await _server_state(admin, informer.resource, namespace)


#: The burst's objects: a cluster keeps ConfigMaps of its own in every namespace (kube-root-ca.crt).
BURST = "app=burst"


def _configmap(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "burst"}}, "data": data}


async def _burst(admin: KubeClient, namespace: str, prefix: str, count: int) -> None:
    """Concurrent creates, then updates of half, then deletes of a quarter."""
    async with anyio.create_task_group() as group:
        for i in range(count):
            group.start_soon(
                admin.create, CONFIGMAPS, _configmap(f"{prefix}-{i}", v="0"), namespace
            )
    async with anyio.create_task_group() as group:
        for i in range(0, count, 2):
            group.start_soon(
                admin.patch, CONFIGMAPS, f"{prefix}-{i}", {"data": {"v": "1"}}, namespace
            )
    async with anyio.create_task_group() as group:
        for i in range(0, count, 4):
            group.start_soon(admin.delete, CONFIGMAPS, f"{prefix}-{i}", namespace)


async def test_cache_equals_server_after_a_burst_and_server_ended_watches(
    admin: KubeClient, namespace: str
) -> None:
    # A 2-3 s server timeout makes the server end several watches during the test.
    settings = InformerSettings(watch_timeout_range=(2, 3))
    informer = Informer(admin, CONFIGMAPS, namespace, label_selector=BURST, settings=settings)
    recorder = Recorder()
    informer.add_handler(recorder)
    async with running(informer):
        await _burst(admin, namespace, "a", 80)
        await eventually(lambda: _converged(admin, informer, namespace), what="cache == server")
        await until(lambda: informer.stats["watches"] >= 3, what="three watches")
        await _burst(admin, namespace, "b", 40)
        await eventually(lambda: _converged(admin, informer, namespace), what="cache == server")
    assert informer.stats["lists"] == 1, "a normally ended watch must re-watch, not relist"
    assert len(informer.store) == 60 + 30  # 80 and 40 created, a quarter of each deleted
    assert informer.store.index_keys("label", "app=burst") == sorted(informer.store.keys())
    deleted = [e for kind, e in recorder.events if kind == "delete"]
    assert len(deleted) == 30
    assert not any(isinstance(e, DeletedFinalStateUnknown) for e in deleted)


@pytest.mark.local_only  # forcing 410 needs direct etcd access (the local control plane)
async def test_relists_after_410_gone_and_reports_missed_deletions(
    admin: KubeClient, namespace: str, cluster: TestCluster
) -> None:
    assert cluster.local is not None
    informer = Informer(admin, CONFIGMAPS, namespace, label_selector=BURST)
    recorder = Recorder()
    informer.add_handler(recorder)
    for i in range(10):
        await admin.create(CONFIGMAPS, _configmap(f"c-{i}"), namespace)
    async with running(informer):
        await eventually(lambda: _converged(admin, informer, namespace), what="initial sync")
    stale_version = informer.last_resource_version

    # While nobody watches: change, delete, then compact etcd past the informer's version.
    for i in range(5):
        await admin.delete(CONFIGMAPS, f"c-{i}", namespace)
    await admin.patch(CONFIGMAPS, "c-9", {"data": {"v": "changed"}}, namespace)
    await admin.create(CONFIGMAPS, _configmap("c-new"), namespace)
    await anyio.to_thread.run_sync(cluster.local.compact_etcd)

    async with running(informer):  # resumes: watches from the stale version first
        await eventually(lambda: _converged(admin, informer, namespace), what="cache == server")
    assert informer.stats["gone"] >= 1
    assert informer.stats["lists"] == 2
    assert int(informer.last_resource_version) > int(stale_version)
    tombstones = [e for kind, e in recorder.events if kind == "delete"]
    assert sorted(t.key for t in tombstones) == [f"{namespace}/c-{i}" for i in range(5)]
    assert all(isinstance(t, DeletedFinalStateUnknown) for t in tombstones)
    assert ("update", "c-9") in recorder.events
    assert ("add", "c-new") in recorder.events


async def test_bookmarks_advance_the_resource_version(admin: KubeClient, namespace: str) -> None:
    settings = InformerSettings(watch_timeout_range=(4, 5))
    informer = Informer(admin, LEASES, namespace, settings=settings)
    other = f"bookmarks-other-{secrets.token_hex(3)}"
    await admin.create(NAMESPACES, {"metadata": {"name": other}})
    try:
        async with running(informer):
            synced_version = int(informer.last_resource_version or "0")
            # Writes elsewhere advance the global version; this informer sees no events.
            for i in range(5):
                await admin.create(
                    LEASES, {"metadata": {"name": f"l-{i}"}, "spec": {"holderIdentity": "x"}}, other
                )
            await until(lambda: informer.stats["bookmarks"] >= 1, timeout=20, what="a bookmark")
            assert informer.stats["events"] == 0
            assert int(informer.last_resource_version) > synced_version
    finally:
        with suppress(NotFound):
            await admin.delete(NAMESPACES, other)
