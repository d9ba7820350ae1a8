"""The pool controller's member writes: optimistic, granting with 1 and revoking with 0, and a 409
made a named outcome (``MemberWriteConflict``): counted, a Warning event, the key requeued, the
refused write not repeated."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.activation import new_pool_lease
from controlplane.api.v1alpha1.inferenceservice import RUNTIME_LLAMACPP
from controlplane.controllers.memberwrites import MEMBER_WRITE_CONFLICTS_NAME
from controlplane.controllers.modelpool import REASON_MEMBER_WRITE_CONFLICT, ModelPoolReconciler
from controlplane.controllers.modelpool.grant import granted_by
from controlplane.controllers.modelpool.intent import LeaseObserver
from controlplane.probes.idle import IdleOutcome, IdleReport
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.errors import Conflict
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.metrics import REGISTRY
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, LEASES, PODS, Resource

Object = dict[str, Any]
NS = "ns"


class FakeApi:
    """Member updates answer 409 while ``conflicts`` lasts; every update and status write kept."""

    def __init__(self, conflicts: int = 0) -> None:
        self.conflicts = conflicts
        self.updates: list[Object] = []
        self.status_writes: list[Object] = []

    async def update(self, resource: Resource, obj: Object) -> Object:
        self.updates.append(copy.deepcopy(obj))
        if self.conflicts > 0:
            self.conflicts -= 1
            raise Conflict(409, "Conflict", "the object has been modified; please apply again")
        return obj

    async def update_status(self, resource: Resource, obj: Object) -> Object:
        self.status_writes.append(copy.deepcopy(obj))
        return obj


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, str]] = []

    def event(self, regarding: Object, type_: str, reason: str, action: str, note: str) -> None:
        self.seen.append((regarding["metadata"]["name"], type_, reason, note))


def member(name: str, replicas: int, grant: str | None = None) -> Object:
    meta: Object = {"name": name, "namespace": NS, "resourceVersion": f"7{len(name)}"}
    if grant is not None:
        meta["annotations"] = {"inference.modelpool.dev/granted-by": grant}
    return {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "InferenceService",
            "metadata": meta, "spec": {"model": {"name": name, "source": "/m"},
                                       "replicas": replicas}}  # fmt: skip


def reconciler(api: FakeApi, events: Events, pool: str, *members: Object) -> ModelPoolReconciler:
    """A reconciler over caches holding ``pool`` (members a and b, default a) and ``members``."""
    client = cast(Any, api)  # the informers are never run: only their stores are read

    def informer(resource: Resource, *objects: Object) -> Informer:
        found = Informer(client, resource)
        for obj in objects:
            found.store.upsert(copy.deepcopy(obj))
        return found

    pool_obj = {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "ModelPool",
                "metadata": {"name": pool, "namespace": NS, "generation": 1,
                             "resourceVersion": "5"},
                "spec": {"members": [{"inferenceServiceRef": {"name": "a"}},
                                     {"inferenceServiceRef": {"name": "b"}}],
                         "default": "a"}}  # fmt: skip
    return ModelPoolReconciler(
        cast(KubeClient, api),
        cast(EventRecorder, events),
        pools=informer(ModelPool.resource(), pool_obj),
        inference_services=informer(InferenceService.resource(), *members),
        deployments=informer(DEPLOYMENTS),
        pods=informer(PODS),
        endpoint_slices=informer(ENDPOINT_SLICES),
        leases=informer(LEASES),
        observer=LeaseObserver(),
        probes={},
    )


def conflicts(pool: str, name: str) -> float:
    labels = {"pool": pool, "member": name}
    return REGISTRY.get_sample_value(f"{MEMBER_WRITE_CONFLICTS_NAME}_total", labels) or 0.0


@pytest.mark.anyio
async def test_a_409_on_a_member_write_is_a_member_write_conflict() -> None:
    api, events = FakeApi(conflicts=1), Events()
    pool = "conflicted"
    before = conflicts(pool, "a")
    owner_up = reconciler(api, events, pool, member("a", 0), member("b", 0))

    result = await owner_up.reconcile(Request(NS, pool))

    assert result == Result(requeue=True)
    assert len(api.updates) == 1, "the refused write was retried blindly"
    assert api.updates[0]["metadata"]["resourceVersion"] == "71", "the write was not optimistic"
    assert conflicts(pool, "a") == before + 1
    assert conflicts(pool, "b") == 0
    ((regarding, type_, reason, note),) = events.seen
    assert (regarding, type_, reason) == (pool, "Warning", REASON_MEMBER_WRITE_CONFLICT)
    assert "setting a to replicas 1" in note
    assert api.status_writes == [], "status was written on a snapshot known to be stale"


@pytest.mark.anyio
async def test_the_owner_write_grants_and_the_drain_write_revokes() -> None:
    api, events = FakeApi(), Events()
    pool = "granting"
    # b is set to 0 by hand but keeps the grant; a (the default) asks to run without one
    owner_up = reconciler(api, events, pool, member("a", 1), member("b", 0, grant=pool))

    await owner_up.reconcile(Request(NS, pool))

    assert [(u["metadata"]["name"], u["spec"]["replicas"], granted_by(u)) for u in api.updates] == [
        ("b", 0, None)
    ], "the owner went up while another member still held the grant"
    # the watch brings b back, and the pool with the status just written
    owner_up.inference_services.store.upsert(member("b", 0))
    written = api.status_writes[-1]
    written["metadata"]["resourceVersion"] = "6"
    owner_up.pools.store.upsert(written)
    api.updates.clear()

    await owner_up.reconcile(Request(NS, pool))

    assert [(u["metadata"]["name"], u["spec"]["replicas"], granted_by(u)) for u in api.updates] == [
        ("a", 1, pool)
    ]
    assert conflicts(pool, "a") == 0


class FailingProbe:
    """An idle probe whose every answer is unproven (a 500, a timeout, a body that is not slots)."""

    def __init__(self) -> None:
        self.probed: list[str] = []

    async def probe(self, base_url: str, *, member: str = "") -> IdleReport:
        self.probed.append(base_url)
        return IdleReport(IdleOutcome.FAILED, "/slots answered 500")


@pytest.mark.anyio
async def test_a_failed_idle_check_defers_the_drain_and_never_forces_it() -> None:
    """a is the Ready resident serving at an endpoint; an intent asks for b. The probe cannot
    prove a idle: a must not be written (no drain, no owner up), the pool says IdleCheckFailed."""
    api, events, probe = FakeApi(), Events(), FailingProbe()
    pool = "deferring"
    resident = {**member("a", 1, grant=pool), "status": {"phase": "Ready"}}
    owner = reconciler(api, events, pool, resident, member("b", 0))
    owner.probes = {RUNTIME_LLAMACPP: probe}
    owner.endpoint_slices.store.upsert(
        {
            "metadata": {
                "name": "a-slice",
                "namespace": NS,
                "labels": {"kubernetes.io/service-name": "a"},
            },
            "addressType": "FQDN",
            "ports": [{"name": "http", "port": 18080}],
            "endpoints": [{"addresses": ["a-0.ns.localhost"], "conditions": {"ready": True}}],
        }
    )
    lease = new_pool_lease(NS, pool, "router-0", "b", 60)
    owner.leases.store.upsert(lease)
    owner.observer.on_add(lease, True)
    cached = owner.pools.store.get(f"{NS}/{pool}")
    assert cached is not None
    owner.pools.store.upsert({**cached, "status": {"residentMember": "a"}})

    result = await owner.reconcile(Request(NS, pool))

    assert probe.probed == ["http://127.0.0.1:18080"]
    assert api.updates == [], "a member was scaled although its idle check failed"
    status = api.status_writes[-1]["status"]
    deferred = next(c for c in status["conditions"] if c["type"] == "SwapDeferred")
    assert (deferred["status"], deferred["reason"]) == ("True", "IdleCheckFailed")
    assert result.requeue_after is not None, "a deferred drain must be probed again"
