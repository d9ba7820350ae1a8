"""Reading ready backends from EndpointSlices, including loopback names (RFC 6761)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from controlplane.controllers.modelpool import ModelPoolReconciler
from controlplane.controllers.modelpool.intent import LeaseObserver
from controlplane.router.process import CacheView
from controlplane.runtime.cache import Object, Store
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import (
    MEMBER_PORT_NAME,
    SERVICE_NAME_LABEL,
    connect_host,
    endpoint_urls_by_pod,
    member_urls,
    ready_urls,
    starting_urls,
)
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer


def _slice(address_type: str, *endpoints: tuple[str, bool], port: int = 8080) -> dict[str, Any]:
    return {
        "addressType": address_type,
        "ports": [{"name": "http", "port": port}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": r}} for a, r in endpoints],
    }


def test_localhost_names_are_loopback_without_dns() -> None:
    assert connect_host("pod-a.team.localhost", "FQDN") == "127.0.0.1"
    assert connect_host("pod-a.team.localhost.", "FQDN") == "127.0.0.1"
    assert connect_host("svc.example.internal", "FQDN") == "svc.example.internal"
    assert connect_host("10.1.2.3", "IPv4") == "10.1.2.3"
    assert connect_host("fd00::1", "IPv6") == "[fd00::1]"


def test_pods_are_found_by_their_target_ref_ready_or_not() -> None:
    slice_ = {
        "addressType": "FQDN",
        "ports": [{"name": "metrics", "port": 9100}, {"name": "http", "port": 41234}],
        "endpoints": [
            {"addresses": ["a-1.ns.localhost"], "conditions": {"ready": False},
             "targetRef": {"kind": "Pod", "name": "a-1"}},
            {"addresses": ["10.0.0.9"], "conditions": {"ready": True},
             "targetRef": {"kind": "Node", "name": "n"}},
            {"addresses": [], "targetRef": {"kind": "Pod", "name": "a-2"}},
        ],
    }  # fmt: skip
    assert endpoint_urls_by_pod([slice_], "http") == {"a-1": "http://127.0.0.1:41234"}
    assert endpoint_urls_by_pod([slice_], "grpc") == {}


def test_only_ready_endpoints_on_the_named_port() -> None:
    slices: list[dict[str, Any]] = [
        _slice("FQDN", ("a.ns.localhost", True), ("b.ns.localhost", False), port=41000),
        {"addressType": "IPv4", "ports": [{"name": "metrics", "port": 9090}],
         "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": True}}]},
    ]  # fmt: skip
    assert ready_urls(slices, "http") == ["http://127.0.0.1:41000"]
    assert ready_urls(slices) == ["http://127.0.0.1:41000", "http://10.0.0.9:9090"]
    assert ready_urls([]) == []


def test_starting_endpoints_are_the_listed_ones_neither_ready_nor_terminating() -> None:
    slice_ = {
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [
            {"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": False, "terminating": False}},
            {"addresses": ["10.0.0.3"], "conditions": {"ready": False, "terminating": True}},
            {"addresses": ["10.0.0.4"]},
        ],
    }  # fmt: skip
    assert ready_urls([slice_], "http", ready=False) == [
        "http://10.0.0.2:8080",
        "http://10.0.0.4:8080",
    ]
    assert ready_urls([slice_], "http") == ["http://10.0.0.1:8080"]
    store = Store()
    store.upsert({"metadata": {"name": "b-1", "namespace": "ns", "resourceVersion": "1",
                               "labels": {SERVICE_NAME_LABEL: "b"}}, **slice_})  # fmt: skip
    assert starting_urls(store, "ns", "b") == ["http://10.0.0.2:8080", "http://10.0.0.4:8080"]
    assert starting_urls(store, "ns", "a") == []


# -- a member's URLs: one function for the router-proxy and the pool controller -------------------


def _member_slice(namespace: str, name: str, service: str, host: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": "1",
            "labels": {SERVICE_NAME_LABEL: service},
        },
        "addressType": "FQDN",
        "ports": [{"name": "metrics", "port": 9090}, {"name": MEMBER_PORT_NAME, "port": port}],
        "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
    }


class _CountingStore(Store):
    """Counts decodes: an index look-up decodes only the member's own slices."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded: list[str] = []

    def get(self, key: str) -> Object | None:
        self.decoded.append(key)
        return super().get(key)

    def objects(self) -> list[Object]:
        raise AssertionError("a member's URLs must not scan every slice")


def _slices() -> _CountingStore:
    store = _CountingStore()
    store.upsert(_member_slice("ns", "a-1", "a", "a-0.ns.localhost", 41001))
    store.upsert(_member_slice("ns", "a-2", "a", "a-1.ns.localhost", 41002))
    store.upsert(_member_slice("other", "a-1", "a", "a-0.other.localhost", 42001))
    for i in range(50):
        store.upsert(_member_slice("ns", f"x-{i}", f"x{i}", f"x{i}.ns.localhost", 43000 + i))
    return store


def test_member_urls_are_an_index_look_up_on_the_named_port() -> None:
    store = _slices()
    assert member_urls(store, "ns", "a") == ["http://127.0.0.1:41001", "http://127.0.0.1:41002"]
    assert sorted(store.decoded) == ["ns/a-1", "ns/a-2"]  # neither other namespaces nor members
    assert member_urls(store, "ns", "missing") == []
    assert member_urls(store, "other", "a") == ["http://127.0.0.1:42001"]


class _FakeInformer:
    """A store and its handlers, told of a change right after the store has it (as the real
    informer does)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.handlers: list[Any] = []

    def add_handler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def upsert(self, obj: Object) -> None:
        old = self.store.upsert(obj)
        for handler in self.handlers:
            if old is None:
                handler.on_add(obj, False)
            else:
                handler.on_update(obj, obj)


def _view(slices: Store) -> tuple[CacheView, _FakeInformer]:
    informer = _FakeInformer(slices)
    absent = cast(Informer, _FakeInformer(Store()))
    return CacheView("ns", "router", absent, absent, absent, cast(Informer, informer)), informer


def test_the_proxy_reads_a_members_urls_again_only_after_a_slice_changed() -> None:
    store = _slices()
    view, informer = _view(store)
    first = view.member_urls("a")
    decoded = len(store.decoded)
    assert view.member_urls("a") == first
    assert len(store.decoded) == decoded  # kept: no slice changed
    moved = _member_slice("ns", "a-2", "a", "a-1.ns.localhost", 41009)
    moved["metadata"]["resourceVersion"] = "2"
    informer.upsert(moved)
    assert view.member_urls("a") == ["http://127.0.0.1:41001", "http://127.0.0.1:41009"]


def test_router_and_pool_controller_agree_on_a_members_urls() -> None:
    store = _slices()
    starting = _member_slice("ns", "a-3", "a", "a-2.ns.localhost", 41003)
    starting["endpoints"][0]["conditions"] = {"ready": False}
    store.upsert(starting)
    slices = cast(Informer, SimpleNamespace(store=store))
    absent = cast(Informer, SimpleNamespace(store=Store()))
    view, _ = _view(store)
    isvcs = Store()
    isvcs.upsert({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"replicas": 1}})
    reconciler = ModelPoolReconciler(
        cast(KubeClient, None),
        cast(EventRecorder, None),
        pools=absent,
        inference_services=cast(Informer, SimpleNamespace(store=isvcs)),
        deployments=absent,
        pods=absent,
        endpoint_slices=slices,
        leases=absent,
        observer=LeaseObserver(),
        probes={},
    )
    expected = member_urls(store, "ns", "a")
    assert view.member_urls("a") == expected
    pool = {"metadata": {"name": "gpu", "namespace": "ns"}, "spec": {}}
    assert list(reconciler.member_state(pool, "a").urls) == expected
    # and on where a starting pod answers (the driver probes it, the controller drains it)
    assert view.member_starting_urls("a") == ["http://127.0.0.1:41003"]
    assert list(reconciler.member_state(pool, "a").starting_urls) == ["http://127.0.0.1:41003"]
