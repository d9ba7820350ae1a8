"""Controllers and the manager against a real API server: retries, probes, metrics, events."""

from __future__ import annotations

import time

import anyio
import pytest

from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result, TerminalError
from controlplane.runtime.manager import Manager, ManagerOptions
from controlplane.runtime.resources import CONFIGMAPS, EVENTS, SECRETS
from controlplane.runtime.workqueue import DEFAULT_ITEM_BASE_DELAY
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.waiting import eventually, until

pytestmark = pytest.mark.any_cluster

LOCAL = ("127.0.0.1", 0)


class FlakyReconciler:
    """Fails twice, then succeeds; records when it was called and the queue's retry count."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, int]] = []
        self.manager: Manager | None = None

    async def reconcile(self, request: Request) -> Result:
        assert self.manager is not None
        if request.name != "target":
            return Result()  # a cluster's own ConfigMaps (kube-root-ca.crt) are not this test's
        queue = self.manager._controllers[0].queue
        self.calls.append((time.monotonic(), queue.num_requeues(request)))
        if len(self.calls) <= 2:
            raise RuntimeError(f"transient failure {len(self.calls)}")
        return Result()


async def test_failing_reconcile_is_retried_with_growing_delays_then_stops(
    cluster: TestCluster, admin: KubeClient, namespace: str
) -> None:
    reconciler = FlakyReconciler()
    manager = Manager(
        cluster.admin_config(),
        ManagerOptions(name="flaky", probe_address=LOCAL, metrics_address=None),
    )
    reconciler.manager = manager
    controller = manager.new_controller("flaky", reconciler)
    controller.for_(manager.informer(CONFIGMAPS, namespace))
    async with anyio.create_task_group() as group:
        group.start_soon(manager.run)
        await admin.create(CONFIGMAPS, {"metadata": {"name": "target"}}, namespace)
        await until(lambda: len(reconciler.calls) >= 3, what="three reconciles")
        await anyio.sleep(1.0)  # a fourth call would come within milliseconds if retries went on
        request = Request(namespace, "target")
        assert len(reconciler.calls) == 3
        assert controller.queue.num_requeues(request) == 0, "success must forget the backoff"
        (t0, r0), (t1, r1), (t2, r2) = reconciler.calls
        assert (r0, r1, r2) == (0, 1, 2)
        # Per-key backoff 5 ms then 10 ms: each wait is at least its delay (upper bounds would
        # flake on a loaded machine; the requeue counts above prove the growth).
        assert t1 - t0 >= DEFAULT_ITEM_BASE_DELAY
        assert t2 - t1 >= 2 * DEFAULT_ITEM_BASE_DELAY

        host, port = manager.addresses["probe"]
        async with http_client(base_url=f"http://{host}:{port}") as http:
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code == 200
            text = (await http.get("/metrics")).text
        assert 'controller_runtime_reconcile_total{controller="flaky",result="error"}' in text
        assert 'controller_runtime_reconcile_errors_total{controller="flaky"}' in text
        assert 'workqueue_retries_total{controller="flaky",name="flaky"}' in text
        group.cancel_scope.cancel()


class OwnerReconciler:
    """Reconciles Secrets; sees its owned ConfigMaps' changes as its own."""

    def __init__(self, admin: KubeClient) -> None:
        self.admin = admin
        self.seen: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        if request.name == "doomed":
            raise TerminalError("this one can never work")
        return Result()


async def test_owns_maps_dependents_to_owner_and_terminal_errors_are_not_retried(
    cluster: TestCluster, admin: KubeClient, namespace: str
) -> None:
    reconciler = OwnerReconciler(admin)
    manager = Manager(
        cluster.admin_config(),
        ManagerOptions(name="owner", probe_address=None, metrics_address=None),
    )
    controller = manager.new_controller("owner", reconciler, max_concurrent_reconciles=2)
    controller.for_(manager.informer(SECRETS, namespace))
    controller.owns(manager.informer(CONFIGMAPS, namespace))
    recorder = manager.event_recorder("owner-controller", "test")
    async with anyio.create_task_group() as group:
        group.start_soon(manager.run)
        owner = await admin.create(SECRETS, {"metadata": {"name": "owner"}}, namespace)
        await until(lambda: Request(namespace, "owner") in reconciler.seen, what="owner reconcile")
        before = reconciler.seen.count(Request(namespace, "owner"))
        ref = {"apiVersion": "v1", "kind": "Secret", "name": "owner",
               "uid": owner["metadata"]["uid"], "controller": True}  # fmt: skip
        await admin.create(
            CONFIGMAPS, {"metadata": {"name": "child", "ownerReferences": [ref]}}, namespace
        )
        await until(
            lambda: reconciler.seen.count(Request(namespace, "owner")) > before,
            what="the owner to be reconciled for its dependent",
        )
        assert Request(namespace, "child") not in reconciler.seen

        await admin.create(SECRETS, {"metadata": {"name": "doomed"}}, namespace)
        await until(lambda: Request(namespace, "doomed") in reconciler.seen, what="doomed")
        await anyio.sleep(0.5)
        assert reconciler.seen.count(Request(namespace, "doomed")) == 1

        for _ in range(3):
            recorder.event(owner, "Warning", "Deferred", "Swap", "pods still busy")

        async def series_count() -> int:
            events = (await admin.list(EVENTS, namespace)).items
            ours = [e for e in events if e.get("reason") == "Deferred"]
            if len(ours) != 1:
                return 0
            return int((ours[0].get("series") or {}).get("count", 1))

        assert await eventually(series_count, what="one event with a series") >= 1
        await eventually(lambda: _equals(series_count, 3), what="repeats folded into a series")
        group.cancel_scope.cancel()


async def _equals(probe: object, expected: int) -> bool:
    assert callable(probe)
    return bool(await probe() == expected)
