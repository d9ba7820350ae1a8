"""The pool controller's decisions are written into the pool's own status, never into a member:
optimistic (the cached ``resourceVersion``), a 409 requeued and not repeated blindly, the grant
given only once every other member is released, and a drain whose idle check failed deferred, never
forced."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.activation import new_pool_lease
from controlplane.api.v1alpha1.demand import AdmissionAck, ReportedDemand, demand_lease
from controlplane.api.v1alpha1.inferenceservice import RUNTIME_LLAMACPP
from controlplane.controllers.modelpool import ModelPoolReconciler
from controlplane.controllers.modelpool.intent import LeaseObserver
from controlplane.probes.idle import IdleOutcome, IdleReport
from controlplane.runtime.client import KubeClient, ObjectList
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.endpoints import SERVICE_NAME_LABEL as SERVICE_NAME
from controlplane.runtime.errors import Conflict
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, LEASES, PODS, Resource

Object = dict[str, Any]
NS = "ns"


class FakeApi:
    """Status writes answer 409 while ``conflicts`` lasts; every write is kept. A member update
    is recorded too: there must be none."""

    def __init__(self, conflicts: int = 0) -> None:
        self.conflicts = conflicts
        self.updates: list[Object] = []
        self.status_writes: list[Object] = []
        #: Pods the API server holds, which a live LIST finds (the caches may not, yet).
        self.pods: list[Object] = []
        self.listed: list[str | None] = []

    async def list(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str | None = None
    ) -> ObjectList:
        self.listed.append(label_selector)
        return ObjectList(copy.deepcopy(self.pods), "9")

    async def update(self, resource: Resource, obj: Object) -> Object:
        self.updates.append(copy.deepcopy(obj))
        return obj

    async def update_status(self, resource: Resource, obj: Object) -> Object:
        self.status_writes.append(copy.deepcopy(obj))
        if self.conflicts > 0:
            self.conflicts -= 1
            raise Conflict(409, "Conflict", "the object has been modified; please apply again")
        return obj


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, str]] = []

    def event(self, regarding: Object, type_: str, reason: str, action: str, note: str) -> None:
        self.seen.append((regarding["metadata"]["name"], type_, reason, note))


def member(name: str, replicas: int = 1) -> Object:
    meta: Object = {"name": name, "namespace": NS, "resourceVersion": f"7{len(name)}"}
    return {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "InferenceService",
            "metadata": meta, "spec": {"model": {"name": name, "source": "/m"},
                                       "replicas": replicas}}  # fmt: skip


def reconciler(
    api: FakeApi,
    events: Events,
    pool: str,
    *members: Object,
    slots: dict[str, str] | None = None,
    capacity: dict[str, Any] | None = None,
) -> ModelPoolReconciler:
    """A reconciler over caches holding ``pool`` (members a and b, default a, its decision
    ``slots``, its ``capacity`` if any) and ``members``."""
    client = cast(Any, api)  # the informers are never run: only their stores are read

    def informer(resource: Resource, *objects: Object) -> Informer:
        found = Informer(client, resource)
        for obj in objects:
            found.store.upsert(copy.deepcopy(obj))
        return found

    pool_obj: Object = {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "ModelPool",
                "metadata": {"name": pool, "namespace": NS, "generation": 1,
                             "resourceVersion": "5"},
                "spec": {"members": [{"inferenceServiceRef": {"name": "a"}},
                                     {"inferenceServiceRef": {"name": "b"}}],
                         "default": "a"},
                "status": {"members": [{"name": n, "slot": v}
                                       for n, v in (slots or {}).items()]}}  # fmt: skip
    if capacity is not None:
        pool_obj["spec"]["capacity"] = capacity
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


def slots_written(api: FakeApi) -> dict[str, str | None]:
    return {m["name"]: m.get("slot") for m in api.status_writes[-1]["status"]["members"]}


def cache_written(reconciler: ModelPoolReconciler, api: FakeApi, version: str) -> None:
    """The watch brings the pool with the status just written."""
    written = copy.deepcopy(api.status_writes[-1])
    written["metadata"]["resourceVersion"] = version
    reconciler.pools.store.upsert(written)


@pytest.mark.anyio
async def test_a_409_on_the_decision_requeues_and_is_not_repeated() -> None:
    api, events = FakeApi(conflicts=1), Events()
    pool = "conflicted"
    owner_up = reconciler(api, events, pool, member("a"), member("b"))

    result = await owner_up.reconcile(Request(NS, pool))

    assert result == Result(requeue=True)
    assert len(api.status_writes) == 1, "the refused write was retried blindly"
    assert api.status_writes[0]["metadata"]["resourceVersion"] == "5", "not optimistic"
    assert api.updates == [], "a member was written"


def acknowledge(
    reconciler: ModelPoolReconciler, api: FakeApi, pool: str, name: str, generation: int | None
) -> None:
    """The InferenceService controller carried out the pool's last decision about ``name``: its
    Deployment (at ``generation``, None: none) follows, and its status says so."""
    written = next(m for m in api.status_writes[-1]["status"]["members"] if m["name"] == name)
    cached = reconciler.inference_services.store.get(f"{NS}/{name}")
    assert cached is not None
    seen = {"pool": pool, "slot": written["slot"], "since": written.get("since")}
    if generation is not None:
        seen["deploymentGeneration"] = generation
    reconciler.inference_services.store.upsert({**cached, "status": {"poolDecision": seen}})


def deployment_at_zero(name: str, generation: int) -> Object:
    return {"metadata": {"name": name, "namespace": NS, "generation": generation},
            "spec": {"replicas": 0},
            "status": {"observedGeneration": generation}}  # fmt: skip


@pytest.mark.anyio
async def test_the_grant_waits_until_every_other_member_is_released() -> None:
    api, events = FakeApi(), Events()
    pool = "granting"
    # b holds the grant (its Deployment already at 0); a, the default, is the owner
    owner_up = reconciler(api, events, pool, member("a"), member("b"), slots={"b": "Granted"})

    await owner_up.reconcile(Request(NS, pool))

    assert slots_written(api) == {"a": None, "b": "Released"}, (
        "the owner was granted while another member still held the grant"
    )
    since = api.status_writes[-1]["status"]["members"][1]["since"]
    assert since, "a decision carries when it was made, for the member to acknowledge"
    cache_written(owner_up, api, "6")

    await owner_up.reconcile(Request(NS, pool))
    assert slots_written(api)["a"] is None, "granted before b acknowledged its release"
    cache_written(owner_up, api, "7")

    acknowledge(owner_up, api, pool, "b", None)
    await owner_up.reconcile(Request(NS, pool))

    assert slots_written(api) == {"a": "Granted", "b": "Released"}
    assert api.listed == ["inference.modelpool.dev/inferenceservice in (b)"], (
        "granted without a live look at the other members' pods"
    )
    assert api.updates == [], "a member was written: the decision is the pool's status alone"
    assert [e for e in events.seen if e[1] == "Warning"] == [], "a warning on the happy path"


@pytest.mark.anyio
async def test_a_member_with_pods_left_holds_the_grant_back() -> None:
    """b is released but a pod of it is still Terminating: the GPU is not free yet."""
    api, events = FakeApi(), Events()
    pool = "terminating"
    owner_up = reconciler(api, events, pool, member("a"), member("b"), slots={"b": "Released"})
    pod = {"metadata": {"name": "b-0", "namespace": NS,
                        "labels": {"inference.modelpool.dev/inferenceservice": "b"}}}  # fmt: skip
    owner_up.pods.store.upsert(pod)
    await owner_up.reconcile(Request(NS, pool))  # writes since for b's release
    acknowledge(owner_up, api, pool, "b", None)
    cache_written(owner_up, api, "6")

    await owner_up.reconcile(Request(NS, pool))

    assert slots_written(api) == {"a": None, "b": "Released"}


@pytest.mark.anyio
async def test_a_pod_the_cache_has_not_seen_holds_the_grant_back() -> None:
    """b acknowledged its release, the cache shows no pod: the live LIST still finds one."""
    api, events = FakeApi(), Events()
    pool = "late-pod"
    owner_up = reconciler(api, events, pool, member("a"), member("b"), slots={"b": "Released"})
    await owner_up.reconcile(Request(NS, pool))
    acknowledge(owner_up, api, pool, "b", None)
    cache_written(owner_up, api, "6")
    api.pods = [{"metadata": {"name": "b-0", "namespace": NS}}]

    result = await owner_up.reconcile(Request(NS, pool))

    assert slots_written(api)["a"] is None
    assert result.requeue_after is not None, "a withheld grant must be looked at again"
    api.pods = []
    cache_written(owner_up, api, "7")
    await owner_up.reconcile(Request(NS, pool))
    assert slots_written(api)["a"] == "Granted"


@pytest.mark.anyio
async def test_a_terminating_pod_the_cache_has_not_seen_holds_its_share_of_a_budget() -> None:
    """A pool with a budget of one member: b acknowledged its release and the cache shows no pod,
    but the live LIST finds b's pod Terminating (its process may not have exited): a does not
    fit beside it until it is gone."""
    api, events = FakeApi(), Events()
    pool = "budget-terminating"
    owner_up = reconciler(
        api, events, pool, member("a"), member("b"), slots={"b": "Released"},
        capacity={"members": 1},
    )  # fmt: skip
    await owner_up.reconcile(Request(NS, pool))
    acknowledge(owner_up, api, pool, "b", None)
    cache_written(owner_up, api, "6")
    labels = {"inference.modelpool.dev/inferenceservice": "b"}
    marked = {"name": "b-0", "namespace": NS, "deletionTimestamp": "2026-01-01T00:00:00Z"}
    api.pods = [{"metadata": {**marked, "labels": labels}}]

    await owner_up.reconcile(Request(NS, pool))

    assert slots_written(api)["a"] is None, "granted beside a pod not yet gone"
    api.pods = []
    cache_written(owner_up, api, "7")
    await owner_up.reconcile(Request(NS, pool))
    assert slots_written(api)["a"] == "Granted"
    assert api.status_writes[-1]["status"]["budget"] == {"capacity": "1", "used": "1"}


@pytest.mark.anyio
async def test_a_raise_landing_after_the_release_holds_the_grant_back() -> None:
    """The abandoned swap's race: b's raise (Deployment generation 2) lands after the pool
    released b, and b's acknowledgement names generation 3 (its lowering). While the pool's cache
    still shows generation 1 at 0, b is not released; once it shows 3 at 0, it is."""
    api, events = FakeApi(), Events()
    pool = "late-raise"
    owner_up = reconciler(api, events, pool, member("a"), member("b"), slots={"b": "Released"})
    owner_up.deployments.store.upsert(deployment_at_zero("b", 1))
    await owner_up.reconcile(Request(NS, pool))
    acknowledge(owner_up, api, pool, "b", 3)
    cache_written(owner_up, api, "6")

    await owner_up.reconcile(Request(NS, pool))
    assert slots_written(api)["a"] is None, "granted on a Deployment older than b acknowledged"

    owner_up.deployments.store.upsert(deployment_at_zero("b", 3))
    cache_written(owner_up, api, "7")
    await owner_up.reconcile(Request(NS, pool))
    assert slots_written(api)["a"] == "Granted"


@pytest.mark.anyio
async def test_an_acknowledgement_of_an_earlier_release_does_not_count() -> None:
    """b acknowledged a release of long ago; it was granted and released since: its new release
    is not acknowledged yet, so nothing is granted."""
    api, events = FakeApi(), Events()
    pool = "stale-ack"
    owner_up = reconciler(api, events, pool, member("a"), member("b"), slots={"b": "Granted"})
    cached = owner_up.inference_services.store.get(f"{NS}/b")
    assert cached is not None
    old = {"pool": pool, "slot": "Released", "since": "2026-01-01T00:00:00.000000Z"}
    owner_up.inference_services.store.upsert({**cached, "status": {"poolDecision": old}})

    await owner_up.reconcile(Request(NS, pool))
    cache_written(owner_up, api, "6")
    await owner_up.reconcile(Request(NS, pool))

    assert slots_written(api) == {"a": None, "b": "Released"}


class AnsweringProbe:
    """An idle probe that gives one answer (a failure: a 500, a timeout, a body that is not
    slots; or idle), recording what it was asked."""

    def __init__(self, outcome: IdleOutcome, detail: str) -> None:
        self.probed: list[str] = []
        self.answer = IdleReport(outcome, detail)

    async def probe(
        self, base_url: str, *, member: str = "", model: str | None = None
    ) -> IdleReport:
        self.probed.append(base_url)
        return self.answer


@pytest.mark.anyio
async def test_a_failed_idle_check_defers_the_drain_and_never_forces_it() -> None:
    """a is the Ready resident serving at an endpoint; an intent asks for b. The probe cannot
    prove a idle: a must not be written (no drain, no owner up), the pool says IdleCheckFailed."""
    api, events, probe = (
        FakeApi(),
        Events(),
        AnsweringProbe(IdleOutcome.FAILED, "/slots answered 500"),
    )
    pool = "deferring"
    resident = {**member("a"), "status": {"phase": "Ready"}}
    owner = reconciler(api, events, pool, resident, member("b"), slots={"a": "Granted"})
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
    # admission to a was closed by an earlier reconcile (the fence)
    closed = {"residentMember": "a", "admissionClosed": ["a"], "admissionGeneration": 1}
    owner.pools.store.upsert({**cached, "status": {**cached["status"], **closed}})

    result = await owner.reconcile(Request(NS, pool))

    assert probe.probed == ["http://127.0.0.1:18080"]
    assert api.updates == []
    assert slots_written(api) == {"a": "Granted", "b": None}, "a was released unproven idle"
    status = api.status_writes[-1]["status"]
    deferred = next(c for c in status["conditions"] if c["type"] == "SwapDeferred")
    assert (deferred["status"], deferred["reason"]) == ("True", "IdleCheckFailed")
    assert result.requeue_after is not None, "a deferred drain must be probed again"


def _fenced_swap(
    status: dict[str, Any], reports: list[Object]
) -> tuple[FakeApi, AnsweringProbe, ModelPoolReconciler, str]:
    """a is the Ready resident at an endpoint, an intent asks for b, ``status`` is what the pool's
    status already says and ``reports`` are the router replicas' demand reports."""
    api, events, probe = FakeApi(), Events(), AnsweringProbe(IdleOutcome.IDLE, "every slot idle")
    pool = "fenced"
    resident = {**member("a"), "status": {"phase": "Ready"}}
    owner = reconciler(api, events, pool, resident, member("b"), slots={"a": "Granted"})
    owner.probes = {RUNTIME_LLAMACPP: probe}
    owner.endpoint_slices.store.upsert(
        {
            "metadata": {"name": "a-s", "namespace": NS, "labels": {SERVICE_NAME: "a"}},
            "addressType": "FQDN",
            "ports": [{"name": "http", "port": 18080}],
            "endpoints": [{"addresses": ["a-0.ns.localhost"], "conditions": {"ready": True}}],
        }
    )
    for lease in [new_pool_lease(NS, pool, "router-0", "b", 60), *reports]:
        owner.leases.store.upsert(lease)
        owner.observer.on_add(lease, True)
    cached = owner.pools.store.get(f"{NS}/{pool}")
    assert cached is not None
    owner.pools.store.upsert({**cached, "status": {**cached["status"], **status}})
    return api, probe, owner, pool


def _report(identity: str, ack: AdmissionAck | None) -> Object:
    """A replica's report; one without an acknowledgement (an older replica's) is held only
    while it has demand."""
    demand = {"b": ReportedDemand(held=1)} if ack is None else {}
    return demand_lease(NS, "fenced", identity, 15, demand, admission=ack)


@pytest.mark.anyio
async def test_a_drain_first_closes_admission_and_probes_nothing_until_it_is_published() -> None:
    api, probe, owner, pool = _fenced_swap({"residentMember": "a"}, [])
    await owner.reconcile(Request(NS, pool))
    assert probe.probed == [], "probed before the closure was published"
    status = api.status_writes[-1]["status"]
    assert (status["admissionClosed"], status["admissionGeneration"]) == (["a"], 1)
    assert slots_written(api) == {"a": "Granted", "b": None}


@pytest.mark.parametrize(
    ("ack", "probed"),
    [
        (None, False),  # a replica that acknowledges nothing (older, or malformed)
        (AdmissionAck(1, {}), False),  # it applied an older generation
        (AdmissionAck(2, {"a": 1}), False),  # a request still in flight on a
        (AdmissionAck(2, {"b": 3}), True),  # in flight elsewhere does not matter
        (AdmissionAck(3, {}), True),
    ],
)
@pytest.mark.anyio
async def test_the_probe_waits_for_every_live_replica_to_acknowledge_the_closure(
    ack: AdmissionAck | None, probed: bool
) -> None:
    closed = {"residentMember": "a", "admissionClosed": ["a"], "admissionGeneration": 2}
    reports = [_report("router-0", AdmissionAck(2, {})), _report("router-1", ack)]
    api, probe, owner, pool = _fenced_swap(closed, reports)
    result = await owner.reconcile(Request(NS, pool))
    assert probe.probed == (["http://127.0.0.1:18080"] if probed else [])
    released = slots_written(api).get("a") == "Released"
    assert released == probed, "a released although a replica had not closed it"
    if not probed:
        assert result.requeue_after is not None, "a fenced drain must be looked at again"
