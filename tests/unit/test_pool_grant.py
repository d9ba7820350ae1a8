"""A pool member runs only once its pool grants it the slot (docs/modelpool.md, "The grant").

The pure decision (:func:`deployment_replicas`), then the InferenceService reconciler against a
fake API server: what it applies to the Deployment, and which live reads guard a raise.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, cast

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.modelpool import SLOT_GRANTED, SLOT_RELEASED, member_slot
from controlplane.controllers.inferenceservice.reconciler import InferenceServiceReconciler
from controlplane.controllers.inferenceservice.replicas import UNLISTED_SETTLE_SECONDS
from controlplane.controllers.inferenceservice.status import (
    REASON_NOT_GRANTED,
    REASON_WAITING_FOR_POOLS,
    Hold,
    compute_phase,
    explain_hold,
)
from controlplane.controllers.modelpool.grant import (
    deployment_replicas,
    member_slots,
    pools_listing,
    withheld_by,
)
from controlplane.runtime.client import KubeClient, ObjectList
from controlplane.runtime.controller import Request
from controlplane.runtime.errors import Conflict
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, PODS, SERVICES, Resource

Object = dict[str, Any]
NS = "ns"

# -- the decision --------------------------------------------------------------------------------

G, R = SLOT_GRANTED, SLOT_RELEASED


@pytest.mark.parametrize(
    ("wanted", "slots", "current", "expected"),
    [
        # not a member: spec.replicas, as for any standalone server (creating included)
        (1, {}, None, 1),
        (1, {}, 0, 1),
        (0, {}, 1, 0),
        # granted by its pool: it runs, whatever its own spec.replicas says (the pool decides)
        (1, {"gpu": G}, 0, 1),
        (1, {"gpu": G}, None, 1),
        (0, {"gpu": G}, 0, 1),
        # released by its pool: it stops, whatever its own spec.replicas says
        (1, {"gpu": R}, 1, 0),
        (1, {"gpu": R}, None, 0),
        # not decided yet: never raised (not created above 0, not raised from 0) ...
        (1, {"gpu": None}, None, 0),
        (1, {"gpu": None}, 0, 0),
        # ... and one that runs (it joined the pool while running) is not killed unprobed
        (1, {"gpu": None}, 1, 1),
        (0, {"gpu": None}, 1, 1),
        # listed by two pools: either one's grant lets it run, a release stops it otherwise
        (1, {"a": R, "b": G}, 0, 1),
        (1, {"a": R, "b": None}, 1, 0),
    ],
)
def test_deployment_replicas(
    wanted: int, slots: dict[str, str | None], current: int | None, expected: int
) -> None:
    assert deployment_replicas(wanted, slots, current) == expected


@pytest.mark.parametrize(
    ("slots", "expected"),
    [({"gpu": None}, "gpu"), ({"gpu": R}, "gpu"), ({"gpu": G}, None), ({}, None),
     ({"b": None, "a": R}, "a, b"), ({"a": R, "b": G}, None)],
)  # fmt: skip
def test_withheld_by(slots: dict[str, str | None], expected: str | None) -> None:
    assert withheld_by(slots) == expected


def pool(
    name: str, *members: str, deleting: bool = False, slots: dict[str, str] | None = None
) -> Object:
    """A pool listing ``members``; ``slots`` is its decision (``status.members[].slot``)."""
    meta: Object = {"name": name, "namespace": NS}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    refs = [{"inferenceServiceRef": {"name": m}} for m in members]
    status = {"members": [{"name": m, "slot": slot} for m, slot in (slots or {}).items()]}
    return {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "ModelPool",
            "metadata": meta, "spec": {"members": refs}, "status": status}  # fmt: skip


def test_pools_listing_skips_pools_being_deleted() -> None:
    pools = [pool("z", "a"), pool("b", "x"), pool("y", "a"), pool("d", "a", deleting=True)]
    assert pools_listing(pools, "a") == ["y", "z"]


def test_member_slots_reads_each_listing_pools_decision() -> None:
    pools = [
        pool("gpu", "a", "b", slots={"a": G, "b": R}),
        pool("other", "x", slots={"a": G}),  # does not list a: its word about a counts for nothing
        pool("gpu2", "a"),  # lists a, has not decided
        pool("gone", "a", deleting=True, slots={"a": G}),
    ]
    assert member_slots(pools, "a") == {"gpu": G, "gpu2": None}
    assert member_slots(pools, "b") == {"gpu": R}
    assert member_slot(pool("p", "a", slots={"a": "Bogus"}), "a") is None, "unknown: undecided"


def test_a_withheld_member_says_which_pool_holds_it() -> None:
    observed = {"metadata": {"generation": 1}, "spec": {"replicas": 0},
                "status": {"observedGeneration": 1}}  # fmt: skip
    decision = explain_hold(compute_phase(0, observed, 0), Hold(withheld_by="gpu"))
    assert (decision.phase, decision.reason) == ("Stopped", REASON_NOT_GRANTED)
    assert "gpu" in decision.message
    settling = explain_hold(compute_phase(0, observed, 0), Hold(settle_seconds=1.0))
    assert (settling.phase, settling.reason) == ("Creating", REASON_WAITING_FOR_POOLS)
    ready = {**observed, "status": {"observedGeneration": 1, "readyReplicas": 1}}
    assert explain_hold(compute_phase(1, ready, 1), Hold(withheld_by="gpu")).phase == "Ready"


# -- the reconciler ------------------------------------------------------------------------------


class FakeApi:
    """The API server as the InferenceService reconciler uses it; records every call."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Object] = {}
        self.calls: list[tuple[str, str]] = []
        self.applied: list[Object] = []
        self.statuses: list[Object] = []

    def put(self, resource: Resource, obj: Object) -> None:
        self.objects[(resource.plural, obj["metadata"]["name"])] = copy.deepcopy(obj)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object:
        self.calls.append(("get", resource.plural))
        return copy.deepcopy(self.objects[(resource.plural, name)])

    async def list(self, resource: Resource, namespace: str | None = None) -> ObjectList:
        self.calls.append(("list", resource.plural))
        items = [copy.deepcopy(o) for (plural, _), o in self.objects.items()
                 if plural == resource.plural]  # fmt: skip
        return ObjectList(items, "1")

    async def apply(self, resource: Resource, obj: Object, **_: Any) -> Object:
        self.calls.append(("apply", resource.plural))
        answer = copy.deepcopy(obj)
        if resource == DEPLOYMENTS:
            self.applied.append(copy.deepcopy(obj))
            answer["metadata"]["generation"] = 40 + len(self.applied)  # what the server gives
        return answer

    async def update_status(self, resource: Resource, obj: Object) -> Object:
        self.calls.append(("status", resource.plural))
        self.statuses.append(copy.deepcopy(obj))
        return obj


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def isvc(name: str, replicas: int | None = None) -> Object:
    spec: Object = {"model": {"name": name, "source": f"/m/{name}.gguf"}}
    if replicas is not None:
        spec["replicas"] = replicas
    obj: Object = {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "InferenceService",
                   "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                                "resourceVersion": "1", "generation": 1}, "spec": spec}  # fmt: skip
    return obj


def deployment(name: str, replicas: int) -> Object:
    return {"metadata": {"name": name, "namespace": NS, "generation": 1,
                         "ownerReferences": [{"uid": f"uid-{name}", "controller": True}]},
            "spec": {"replicas": replicas},
            "status": {"observedGeneration": 1, "replicas": replicas,
                       "readyReplicas": replicas}}  # fmt: skip


class World:
    """A reconciler whose caches and API server the test fills in."""

    def __init__(self) -> None:
        self.api = FakeApi()
        self.clock = Clock()
        recorder = cast(EventRecorder, SimpleNamespace(event=lambda *a: None))
        client = self.api  # informers are never run: only their stores are read
        self.isvcs = Informer(cast(Any, client), InferenceService.resource())
        self.deployments = Informer(cast(Any, client), DEPLOYMENTS)
        self.pools = Informer(cast(Any, client), ModelPool.resource())
        self.reconciler = InferenceServiceReconciler(
            cast(KubeClient, self.api),
            recorder,
            inference_services=self.isvcs,
            deployments=self.deployments,
            services=Informer(cast(Any, client), SERVICES),
            pods=Informer(cast(Any, client), PODS),
            pools=self.pools,
            endpoint_slices=Informer(cast(Any, client), ENDPOINT_SLICES),
            clock=self.clock,
        )

    def isvc(self, obj: Object) -> None:
        """Cache ``obj`` and hold it in the API server."""
        self.isvcs.store.upsert(copy.deepcopy(obj))
        self.api.put(InferenceService.resource(), obj)

    def pool(self, obj: Object, *, live: Object | None = None) -> None:
        """Cache ``obj``; the API server holds ``live`` (the same pool when not given)."""
        self.pools.store.upsert(copy.deepcopy(obj))
        self.api.put(ModelPool.resource(), live or obj)

    async def reconcile(self, name: str) -> Any:
        return await self.reconciler.reconcile(Request(NS, name))

    async def known_for_a_while(self, name: str) -> None:
        """Reconcile once and let :data:`UNLISTED_SETTLE_SECONDS` pass; the Deployment that
        reconcile applied is cached, and the record of calls starts afresh."""
        await self.reconcile(name)
        for applied in self.api.applied:
            self.deployments.store.upsert(deployment(name, applied["spec"]["replicas"]))
        self.api.applied.clear()
        self.api.calls.clear()
        self.clock.now += UNLISTED_SETTLE_SECONDS

    def deployment_replicas(self) -> list[int]:
        return [d["spec"]["replicas"] for d in self.api.applied]


@pytest.mark.anyio
async def test_a_member_without_the_grant_gets_a_deployment_at_zero() -> None:
    world = World()
    world.pool(pool("gpu", "a", "b"))
    world.isvc(isvc("a"))
    await world.reconcile("a")
    assert world.deployment_replicas() == [0]
    assert ("list", "modelpools") not in world.api.calls, "not a raise: no live read"


@pytest.mark.anyio
async def test_a_pool_not_yet_cached_is_found_by_a_live_list() -> None:
    """Pool and members applied together: the cache has no pool yet, the API server has."""
    world = World()
    world.isvc(isvc("a"))
    await world.known_for_a_while("a")
    world.api.put(ModelPool.resource(), pool("gpu", "a", "b"))
    await world.reconcile("a")
    assert world.deployment_replicas() == [0]
    assert ("list", "modelpools") in world.api.calls


@pytest.mark.anyio
async def test_a_revoked_grant_seen_late_starts_nothing() -> None:
    """The cached pool still grants a; the live pool has released it."""
    world = World()
    world.pool(pool("gpu", "a", "b", slots={"a": G}), live=pool("gpu", "a", "b", slots={"a": R}))
    world.isvc(isvc("a"))
    world.deployments.store.upsert(deployment("a", 0))
    await world.reconcile("a")
    assert world.deployment_replicas() == [0]
    assert ("list", "modelpools") in world.api.calls


@pytest.mark.anyio
async def test_a_granted_member_is_raised_whatever_its_own_replicas_say() -> None:
    """The member's manifest says 0 (as a user, Helm or Argo CD applied it): the pool decides."""
    world = World()
    world.pool(pool("gpu", "a", "b", slots={"a": G, "b": R}))
    world.isvc(isvc("a", replicas=0))
    world.deployments.store.upsert(deployment("a", 0))
    await world.reconcile("a")
    assert world.deployment_replicas() == [1]


@pytest.mark.anyio
async def test_a_released_member_is_lowered_whatever_its_own_replicas_say() -> None:
    world = World()
    world.pool(pool("gpu", "a", "b", slots={"a": R, "b": G}))
    world.isvc(isvc("a", replicas=1))
    world.deployments.store.upsert(deployment("a", 1))
    await world.reconcile("a")
    assert world.deployment_replicas() == [0]
    assert ("list", "modelpools") not in world.api.calls, "lowering needs no live read"


@pytest.mark.anyio
async def test_a_member_that_joined_while_running_is_not_killed() -> None:
    """Its Deployment already runs: the pool drains it through the idle gate, not us."""
    world = World()
    world.pool(pool("gpu", "a", "b"))
    world.isvc(isvc("a"))
    world.deployments.store.upsert(deployment("a", 1))
    await world.reconcile("a")
    assert world.deployment_replicas() == [1]


@pytest.mark.anyio
async def test_a_non_member_starts_once_no_pool_came_to_list_it() -> None:
    world = World()
    world.isvc(isvc("solo"))
    result = await world.reconcile("solo")
    assert world.deployment_replicas() == [0], "started before a pool applied with it could land"
    assert 0 < result.requeue_after <= UNLISTED_SETTLE_SECONDS
    world.clock.now += UNLISTED_SETTLE_SECONDS
    world.deployments.store.upsert(deployment("solo", 0))
    await world.reconcile("solo")
    assert world.deployment_replicas() == [0, 1]
    assert ("list", "modelpools") in world.api.calls


@pytest.mark.anyio
async def test_leaving_the_pool_follows_spec_replicas_again() -> None:
    world = World()
    world.pool(pool("gpu", "a", "b", slots={"a": R}))
    world.isvc(isvc("a", replicas=1))
    await world.known_for_a_while("a")  # held at 0 by its pool
    world.pool(pool("gpu", "b", slots={"b": G}))  # a is removed from the pool
    await world.reconcile("a")
    assert world.deployment_replicas() == [1]


@pytest.mark.anyio
async def test_a_release_carried_out_is_acknowledged_with_the_generation_applied() -> None:
    """The pool releases a (its decision of ``since``); the reconcile that lowers a's Deployment
    echoes that decision with the generation its apply returned: what the pool waits for."""
    since = "2026-12-01T10:00:00.000001Z"
    world = World()
    released = pool("gpu", "a", "b", slots={"a": R, "b": G})
    released["status"]["members"][0]["since"] = since
    world.pool(released)
    world.isvc(isvc("a"))
    world.deployments.store.upsert(deployment("a", 1))
    await world.reconcile("a")
    assert world.deployment_replicas() == [0]
    seen = world.api.statuses[-1]["status"]["poolDecision"]
    assert seen == {"pool": "gpu", "slot": R, "since": since, "deploymentGeneration": 41}


@pytest.mark.anyio
async def test_an_undecided_member_acknowledges_nothing() -> None:
    world = World()
    world.pool(pool("gpu", "a", "b"))
    world.isvc(isvc("a"))
    await world.reconcile("a")
    assert "poolDecision" not in world.api.statuses[-1]["status"]


class DeploymentMovedOn(FakeApi):
    """The API server holds a newer Deployment than the cache: an apply naming another
    resourceVersion is refused, as kube-apiserver refuses it (tests/e2e/test_client.py)."""

    live_version = "8"

    async def apply(self, resource: Resource, obj: Object, **options: Any) -> Object:
        named = obj["metadata"].get("resourceVersion")
        if resource == DEPLOYMENTS and named is not None and named != self.live_version:
            self.calls.append(("apply", resource.plural))
            raise Conflict(409, "Conflict", "the object has been modified")
        return await super().apply(resource, obj, **options)


@pytest.mark.anyio
async def test_a_raise_names_the_deployment_it_decided_on_and_a_lowering_names_none() -> None:
    """docs/faults.md, "Fencing": a raise sent late by a paused leader must not land over what
    a successor wrote since; a lowering is always safe and is never held back."""
    world = World()
    world.api = DeploymentMovedOn()
    world.reconciler.client = cast(KubeClient, world.api)
    world.pool(pool("gpu", "a", "b", slots={"a": G, "b": R}))
    world.isvc(isvc("a"))
    cached = {**deployment("a", 0), "metadata": {**deployment("a", 0)["metadata"],
                                                  "resourceVersion": "5"}}  # fmt: skip
    world.deployments.store.upsert(cached)
    result = await world.reconcile("a")
    assert result.requeue, "a refused raise is decided again on the newer Deployment"
    assert world.api.applied == [], "nothing raised over the newer Deployment"
    assert ("status", "inferenceservices") not in world.api.calls
    cached["metadata"]["resourceVersion"] = world.api.live_version
    world.deployments.store.upsert(cached)
    await world.reconcile("a")
    assert world.deployment_replicas() == [1]
    assert world.api.applied[0]["metadata"]["resourceVersion"] == world.api.live_version

    world.isvc(isvc("b"))
    world.deployments.store.upsert({**deployment("b", 1), "metadata": {
        **deployment("b", 1)["metadata"], "resourceVersion": "3"}})  # fmt: skip
    await world.reconcile("b")
    assert world.api.applied[-1]["spec"]["replicas"] == 0
    assert "resourceVersion" not in world.api.applied[-1]["metadata"]
