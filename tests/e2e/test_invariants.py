"""The pool invariant monitor itself, against a real API server: it must fire.

A monitor that never fires proves nothing, so here the invariant is broken on purpose, with no
operator running (nothing would prevent it): two member pods of one pool created one after the
other as the admin, and two simulator processes carrying two members' identities
(:func:`controlplane.standin.process.identity_env`, as the node stand-in starts them). Each must be
reported with what was seen; the same steps done in order (the first gone before the second
comes) must not be. The settle check must name a member left running for nobody, accept one that
a held Lease asks for, and report the held Lease when asked to.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.api.v1alpha1 import ModelPool
from controlplane.api.v1alpha1.activation import TARGET_ANNOTATION, pool_lease_name
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.resources import LEASES, PODS
from controlplane.standin.process import SimulatorProcess, identity_env, simulator_argv
from tests.e2e import invariants
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.invariants import PoolInvariantMonitor, PoolInvariantViolated
from tests.e2e.kubectl import install
from tests.e2e.waiting import eventually, until

POOL = ModelPool.resource()
Object = dict[str, Any]


@pytest.fixture
async def pools(cluster: TestCluster, admin: KubeClient, namespace: str) -> None:
    """Pool ``gpu`` (members a, b) and pool ``seq`` (members c, d); no operator acts on them."""
    await install(cluster)
    for name, members in (("gpu", ("a", "b")), ("seq", ("c", "d"))):
        await admin.create(POOL, pool_body(name, members), namespace)


def member_pod(name: str, member: str) -> Object:
    """A pod labelled as ``member``'s, never scheduled (so deleting it is immediate)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {ISVC_LABEL: member}},
        "spec": {
            "containers": [{"name": "server", "image": "modelpool/sim:never-pulled"}],
            "nodeSelector": {"e2e.modelpool.dev/nowhere": "true"},
        },
    }


def started_monitor(cluster: TestCluster, namespace: str, processes: bool) -> PoolInvariantMonitor:
    monitor = PoolInvariantMonitor(cluster.admin_config(), namespace, sample_processes=processes)
    return monitor.start()


async def test_two_member_pods_of_one_pool_are_an_overlap_in_watch_order(
    cluster: TestCluster, admin: KubeClient, namespace: str, pools: None
) -> None:
    monitor = started_monitor(cluster, namespace, processes=False)
    try:
        # In order on pool seq: c's pod is gone before d's comes. Not an overlap.
        await admin.create(PODS, member_pod("c-0", "c"), namespace)
        await admin.delete(PODS, "c-0", namespace)
        await admin.create(PODS, member_pod("d-0", "d"), namespace)
        # Out of order on pool gpu: b's pod while a's still exists.
        a = await admin.create(PODS, member_pod("a-0", "a"), namespace)
        b = await admin.create(PODS, member_pod("b-0", "b"), namespace)
        await until(lambda: bool(monitor.overlaps), timeout=30, what="the monitor to see b over a")
        await until(
            lambda: "d/d-0" in {e.subject for e in monitor.timeline if e.what == "added"},
            timeout=30,
            what="the monitor to see d's pod",
        )
    finally:
        monitor.stop()

    (overlap,) = monitor.violations
    assert (overlap.kind, overlap.source, overlap.pool) == ("overlap", "pod", "gpu")
    assert overlap.members == ("b", "a")
    assert f"b-0 of b added at rv {b['metadata']['resourceVersion']}" in overlap.detail
    assert f"a-0 (added rv {a['metadata']['resourceVersion']})" in overlap.detail
    with pytest.raises(PoolInvariantViolated, match="overlap \\(pod\\) pool gpu"):
        monitor.check()


async def test_two_member_processes_of_one_pool_are_an_overlap_when_sampled(
    cluster: TestCluster, namespace: str, pools: None, tmp_path: Path
) -> None:
    monitor = started_monitor(cluster, namespace, processes=True)
    simulators: list[SimulatorProcess] = []
    try:

        async def simulator(pod: str, member: str) -> SimulatorProcess:
            argv = simulator_argv(member, host="127.0.0.1", load_seconds=0, token_seconds=0.01)
            process = SimulatorProcess(
                argv, tmp_path / f"{pod}.log", env=identity_env(namespace, pod, member)
            )
            simulators.append(process)
            await process.start()
            return process

        # In order on pool seq: c exits before d starts.
        c = await simulator("c-0", "c")
        await until(lambda: bool(monitor.running_members("seq")), timeout=30, what="c seen")
        await c.stop()
        await until(lambda: not monitor.running_members("seq"), timeout=30, what="c gone")
        await simulator("d-0", "d")
        # Together on pool gpu.
        a = await simulator("a-0", "a")
        b = await simulator("b-0", "b")
        await until(lambda: bool(monitor.overlaps), timeout=30, what="a and b seen together")
        # Simulators start and stop in a fraction of a second now: wait for the sampler's pace
        # rather than count on the test being slow (a loaded machine also slows the sampler).
        await until(lambda: monitor.samples > 10, timeout=30, what="more than ten samples")
        assert set(monitor.running_members("seq")) == {"d"}
    finally:
        for process in simulators:
            await process.stop()
        monitor.stop()

    (overlap,) = monitor.violations
    assert (overlap.kind, overlap.source, overlap.pool, overlap.members) == (
        "overlap",
        "process",
        "gpu",
        ("a", "b"),
    )
    assert f"a: pid {a.pid} pod {namespace}/a-0" in overlap.detail
    assert f"b: pid {b.pid} pod {namespace}/b-0" in overlap.detail
    assert monitor.samples > 10


async def test_settling_names_a_member_left_running_for_nobody_and_a_held_lease(
    cluster: TestCluster, admin: KubeClient, namespace: str, pools: None
) -> None:
    monitor = started_monitor(cluster, namespace, processes=False)
    try:
        await admin.create(PODS, member_pod("b-0", "b"), namespace)
        await until(lambda: bool(monitor.running_members("gpu")), timeout=30, what="b's pod")
        (unrequested,) = monitor.settle(timeout=1)
        assert (unrequested.kind, unrequested.pool, unrequested.members) == (
            "unrequested",
            "gpu",
            ("b",),
        )
        assert "b: pod b-0" in unrequested.detail

        # A held Lease asking for b makes b a member somebody asked for.
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": pool_lease_name("gpu"), "annotations": {TARGET_ANNOTATION: "b"}},
            "spec": {"holderIdentity": "e2e", "leaseDurationSeconds": 300, "renewTime": now},
        }
        await admin.create(LEASES, lease, namespace)

        async def lease_seen() -> bool:
            return bool(monitor.held_leases())

        await eventually(lease_seen, timeout=30, what="the monitor to see the Lease")
        assert monitor.settle(timeout=1) == []
        (held,) = monitor.settle(timeout=1, leases_released=True)
        assert (held.kind, held.pool) == ("lease-held", "gpu")
        assert "held by e2e for b" in held.detail
    finally:
        monitor.stop()
    assert [v.kind for v in monitor.violations] == ["unrequested", "lease-held"]


def test_a_process_first_seen_before_its_exec_is_identified_by_a_slowed_sampler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a loaded machine the sampler slows down (it sleeps nine times a sample's duration), so
    one second may hold a single sample. A member first read before its exec (its parent's
    environment, no identity) must still be read again until it shows one: a CI run missed a
    member this way. Here every sample is two seconds after the last, and the identity appears
    on the third read."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monitor = PoolInvariantMonitor(
            ClientConfig("https://127.0.0.1:1", ssl.create_default_context()), "ns"
        )
        reads = 0
        real_read = invariants._read_identity

        def read_identity(pid: int, namespace: str, models: Any) -> tuple[str, str, bool] | None:
            nonlocal reads
            if pid != child.pid:
                return real_read(pid, namespace, models)
            reads += 1
            return ("ns/d", "ns/d-0", False) if reads >= 3 else None

        clock = [1000.0]
        monkeypatch.setattr(invariants, "_read_identity", read_identity)
        clocks = SimpleNamespace(monotonic=lambda: clock[0], perf_counter=time.perf_counter)
        monkeypatch.setattr(invariants, "time", clocks)
        for _ in range(invariants.IDENTIFY_RETRY_READS):
            monitor._sample()
            clock[0] += 2.0
        assert reads == 3
        assert [p.member for p in monitor._live.values()] == ["ns/d"]
    finally:
        child.kill()
        child.wait()
