"""The InferenceService reconciler's KV cache steps against a fake API server and a fake client:
the save comes before the Deployment is lowered, its record survives a status conflict, and a
restore never waits past its bound for a server that is not behind its Service."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.controllers.inferenceservice.reconciler import InferenceServiceReconciler
from controlplane.probes.slotcache import CacheOutcome, CacheReport, SlotCacheClient
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request
from controlplane.runtime.errors import Conflict
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, PODS, SERVICES, Resource
from tests.unit.test_pool_grant import NS, Clock, FakeApi, deployment, isvc

pytestmark = pytest.mark.anyio

Object = dict[str, Any]
GATE = "inference.modelpool.dev/kv-cache-restored"
NOW = datetime(2026, 12, 1, 3, 0, 0, tzinfo=UTC)


class Api(FakeApi):
    """The fake API server, with pod status patches and status conflicts on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.patches: list[tuple[str, Object]] = []
        self.conflicts = 0
        self.statuses: list[Object] = []

    async def update_status(self, resource: Resource, obj: Object) -> Object:
        self.calls.append(("status", resource.plural))
        if self.conflicts:
            self.conflicts -= 1
            raise Conflict(409, "Conflict", "the object has been modified")
        self.statuses.append(copy.deepcopy(obj))
        self.put(resource, obj)
        return copy.deepcopy(obj)

    async def patch(
        self, resource: Resource, name: str, patch: Object, *_: Any, **__: Any
    ) -> Object:
        self.calls.append(("patch", resource.plural))
        self.patches.append((name, patch))
        return {}


class Slots:
    """A fake SlotCacheClient: answers what the test says, records each call in the API's log."""

    def __init__(self, api: Api, report: CacheReport) -> None:
        self.api = api
        self.report = report
        self.restored: list[tuple[str, tuple[int, ...]]] = []

    async def save(self, url: str, *, timeout: float, member: str = "") -> CacheReport:
        self.api.calls.append(("kv-save", url))
        return self.report

    async def restore(
        self, url: str, slots: Iterable[int], *, timeout: float, member: str = ""
    ) -> CacheReport:
        self.api.calls.append(("kv-restore", url))
        self.restored.append((url, tuple(slots)))
        return self.report


class World:
    def __init__(self, report: CacheReport) -> None:
        self.api = Api()
        self.clock = Clock()
        self.slots = Slots(self.api, report)
        self.events: list[tuple[Any, ...]] = []
        recorder = cast(EventRecorder, SimpleNamespace(event=lambda *a: self.events.append(a)))
        client = cast(Any, self.api)
        self.isvcs = Informer(client, InferenceService.resource())
        self.deployments = Informer(client, DEPLOYMENTS)
        self.pods = Informer(client, PODS)
        self.slices = Informer(client, ENDPOINT_SLICES)
        self.reconciler = InferenceServiceReconciler(
            cast(KubeClient, self.api),
            recorder,
            inference_services=self.isvcs,
            deployments=self.deployments,
            services=Informer(client, SERVICES),
            pods=self.pods,
            pools=Informer(client, ModelPool.resource()),
            endpoint_slices=self.slices,
            slot_cache=cast(SlotCacheClient, self.slots),
            clock=self.clock,
            wall_clock=lambda: NOW,
        )

    def isvc(self, obj: Object) -> None:
        self.isvcs.store.upsert(copy.deepcopy(obj))
        self.api.put(InferenceService.resource(), obj)

    def pod(self, name: str, *, ready: bool, containers_ready: bool, gated: bool = True) -> None:
        self.pods.store.upsert(
            {
                "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                             "labels": {"inference.modelpool.dev/inferenceservice": "a"}},
                "spec": {"readinessGates": [{"conditionType": GATE}]} if gated else {},
                "status": {"conditions": [
                    {"type": "Ready", "status": str(ready)},
                    {"type": "ContainersReady", "status": str(containers_ready)},
                ]},
            }
        )  # fmt: skip

    def listed(self, pod: str, port: int = 41000) -> None:
        """``pod`` behind the Service ``a`` (not ready: the slice lists it all the same)."""
        self.slices.store.upsert(
            {
                "metadata": {"name": "a-sim", "namespace": NS,
                             "labels": {"kubernetes.io/service-name": "a"}},
                "addressType": "FQDN",
                "ports": [{"name": "http", "port": port}],
                "endpoints": [{"addresses": [f"{pod}.{NS}.localhost"],
                               "conditions": {"ready": False},
                               "targetRef": {"kind": "Pod", "name": pod}}],
            }
        )  # fmt: skip

    async def reconcile(self) -> Any:
        return await self.reconciler.reconcile(Request(NS, "a"))


def enabled(replicas: int, **status: Any) -> Object:
    obj = isvc("a", replicas=replicas)
    obj["spec"]["kvCache"] = {"enabled": True, "timeoutSeconds": 5}
    if status:
        obj["status"] = status
    return obj


SAVED = CacheReport(CacheOutcome.SUCCEEDED, "saved 1 of 1 slot(s), 48 token(s)", (0,), 48, 900)


async def test_the_save_comes_before_the_deployment_is_lowered_and_is_recorded() -> None:
    world = World(SAVED)
    world.isvc(enabled(replicas=0))
    world.deployments.store.upsert(deployment("a", 1))
    world.pod("a-1", ready=True, containers_ready=True)
    world.listed("a-1")
    world.api.conflicts = 1  # someone else wrote the status meanwhile: re-read and write again

    await world.reconcile()

    order = [call for call in world.api.calls if call[0] in ("kv-save", "status", "apply")]
    assert order[:4] == [
        ("kv-save", "http://127.0.0.1:41000"),
        ("status", "inferenceservices"),  # the conflict
        ("status", "inferenceservices"),  # written after a live GET
        ("apply", "deployments"),
    ]
    assert world.api.applied[0]["spec"]["replicas"] == 0
    last_save = world.api.statuses[0]["status"]["kvCache"]["lastSave"]
    assert (last_save["outcome"], last_save["slots"], last_save["pod"]) == ("Succeeded", [0], "a-1")
    assert [e[2] for e in world.events][:1] == ["KvCacheSaved"]


async def test_a_deployment_lowered_without_a_ready_pod_saves_nothing() -> None:
    world = World(SAVED)
    world.isvc(enabled(replicas=0))
    world.deployments.store.upsert(deployment("a", 1))
    world.pod("a-1", ready=False, containers_ready=False)
    await world.reconcile()
    assert not [c for c in world.api.calls if c[0] == "kv-save"]
    assert world.api.applied[0]["spec"]["replicas"] == 0


async def test_a_restore_loads_the_saved_slots_then_opens_the_gate() -> None:
    world = World(CacheReport(CacheOutcome.SUCCEEDED, "restored 1 of 1 slot(s)", (0,), 48))
    world.isvc(enabled(1, kvCache={"lastSave": {"outcome": "Succeeded", "slots": [0]}}))
    world.deployments.store.upsert(deployment("a", 1))
    world.pod("a-2", ready=False, containers_ready=True)
    world.listed("a-2", port=41001)
    await world.reconcile()
    assert world.slots.restored == [("http://127.0.0.1:41001", (0,))]
    order = [c[0] for c in world.api.calls if c[0] in ("kv-restore", "status", "patch")]
    assert order[:3] == ["kv-restore", "status", "patch"], "recorded, then the gate"
    ((pod, patch),) = world.api.patches
    (condition,) = patch["status"]["conditions"]
    assert (pod, condition["type"], condition["reason"]) == ("a-2", GATE, "Restored")


async def test_a_server_never_behind_its_service_is_given_up_on_at_the_bound() -> None:
    world = World(SAVED)
    world.isvc(enabled(1, kvCache={"lastSave": {"outcome": "Succeeded", "slots": [0]}}))
    world.deployments.store.upsert(deployment("a", 1))
    world.pod("a-2", ready=False, containers_ready=True)  # loaded, but in no slice

    result = await world.reconcile()
    assert result.requeue_after is not None, "looked at again soon"
    assert world.api.patches == []
    world.clock.now += 4.9
    await world.reconcile()
    assert world.api.patches == [], "still within timeoutSeconds (5)"
    world.clock.now += 0.2
    await world.reconcile()
    ((_, patch),) = world.api.patches
    (condition,) = patch["status"]["conditions"]
    assert (condition["status"], condition["reason"]) == ("True", "RestoreFailed")
    assert "not listed behind its Service" in condition["message"]
    assert world.slots.restored == []


async def test_nothing_saved_opens_the_gate_before_the_server_is_up() -> None:
    world = World(SAVED)
    world.isvc(enabled(1))
    world.deployments.store.upsert(deployment("a", 1))
    world.pod("a-1", ready=False, containers_ready=False)
    await world.reconcile()
    ((_, patch),) = world.api.patches
    assert patch["status"]["conditions"][0]["reason"] == "NothingToRestore"
    assert world.slots.restored == []


async def test_a_stale_cache_neither_saves_nor_restores_twice() -> None:
    world = World(SAVED)
    world.isvc(enabled(replicas=0))
    world.deployments.store.upsert(deployment("a", 1))
    world.pod("a-1", ready=True, containers_ready=True)
    world.listed("a-1")
    await world.reconcile()
    await world.reconcile()  # the Deployment's cached copy still says 1: our lowering is on its way
    assert [c[0] for c in world.api.calls].count("kv-save") == 1
    world.deployments.store.upsert(deployment("a", 0))
    await world.reconcile()
    world.deployments.store.upsert(deployment("a", 1))  # raised again, then lowered: a new save
    await world.reconcile()
    assert [c[0] for c in world.api.calls].count("kv-save") == 2

    world = World(CacheReport(CacheOutcome.SUCCEEDED, "restored", (0,), 48))
    world.isvc(enabled(1, kvCache={"lastSave": {"outcome": "Succeeded", "slots": [0]}}))
    world.deployments.store.upsert(deployment("a", 1))
    world.pod("a-2", ready=False, containers_ready=True)
    world.listed("a-2")
    await world.reconcile()
    await world.reconcile()  # the pod's cached copy does not show the gate True yet
    assert len(world.slots.restored) == 1
    assert len(world.api.patches) == 1
