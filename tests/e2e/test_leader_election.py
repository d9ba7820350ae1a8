"""Leader election between processes: fast handover, never two leaders, exit on loss."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.resources import CONFIGMAPS, LEASES
from controlplane.runtime.timeutil import micro_time
from tests.e2e.clusters import TestCluster
from tests.e2e.programs.counter_leader import (
    COUNTER,
    LEASE,
    LEASE_DURATION,
    RENEW_DEADLINE,
    RETRY_PERIOD,
)
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.any_cluster

#: The longest a handover after SIGKILL may take: the Lease must expire on the survivor's clock,
#: then one jittered retry (up to 2.2 periods), plus slack for a loaded 2-core machine.
MAX_HANDOVER = LEASE_DURATION + 2.2 * RETRY_PERIOD + 2.0
RUN_SECONDS = 60.0


class Candidates:
    """The candidate processes, restartable by identity."""

    def __init__(self, kubeconfig: Path, namespace: str, logs: Path) -> None:
        self.kubeconfig, self.namespace, self.logs = kubeconfig, namespace, logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, identity: str) -> None:
        log = (self.logs / f"{identity}.log").open("ab")
        self.processes[identity] = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.programs.counter_leader",
             str(self.kubeconfig), self.namespace, identity],
            stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def candidates(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[Candidates]:
    group = Candidates(cluster.admin_kubeconfig, namespace, tmp_path)
    yield group
    group.stop_all()
    for log in tmp_path.glob("*.log"):
        print(f"--- {log.name}\n{log.read_text()[-3000:]}")


async def _holder(admin: KubeClient, namespace: str) -> str:
    try:
        lease = await admin.get(LEASES, LEASE, namespace)
    except NotFound:
        return ""
    return str(lease["spec"].get("holderIdentity") or "")


async def test_handover_is_fast_and_there_is_never_a_second_leader(
    admin: KubeClient, namespace: str, candidates: Candidates
) -> None:
    for identity in ("a", "b"):
        candidates.start(identity)
    first = await eventually(lambda: _holder(admin, namespace), what="a first leader")
    handovers: list[tuple[signal.Signals, float]] = []
    kills = 0
    started = time.monotonic()
    leader = first
    while time.monotonic() - started < RUN_SECONDS:
        await anyio.sleep(2.0)  # let the leader write for a while
        how = signal.SIGKILL if kills % 2 == 0 else signal.SIGTERM
        candidates.processes[leader].send_signal(how)
        killed_at = time.monotonic()
        kills += 1
        survivor = "b" if leader == "a" else "a"

        async def survivor_leads(expected: str = survivor) -> bool:
            return await _holder(admin, namespace) == expected

        await eventually(survivor_leads, timeout=MAX_HANDOVER + 5, interval=0.05, what="handover")
        handovers.append((how, time.monotonic() - killed_at))
        exit_code = await anyio.to_thread.run_sync(candidates.processes[leader].wait)
        if how == signal.SIGTERM:
            assert exit_code == 0, "a graceful stop must exit 0"
        candidates.start(leader)  # the old leader comes back as a candidate
        leader = survivor
    candidates.stop_all()

    assert kills >= 8
    for how, seconds in handovers:
        assert seconds < MAX_HANDOVER, f"{how.name} handover took {seconds:.1f} s: {handovers}"
    graceful = [s for how, s in handovers if how == signal.SIGTERM]
    assert max(graceful) < LEASE_DURATION, "a released lease is taken without expiry"

    counter = await admin.get(CONFIGMAPS, COUNTER, namespace)
    history = [entry.split(":") for entry in counter["data"]["history"].split()]
    terms = [int(term) for _, term in history]
    assert terms == sorted(terms), "a write of an older term came after a newer leader's write"
    holders: dict[int, set[str]] = {}
    for identity, term in history:
        holders.setdefault(int(term), set()).add(identity)
    assert all(len(ids) == 1 for ids in holders.values()), f"two writers in one term: {holders}"
    assert len(holders) >= kills, "every leader wrote in its own term"
    print(f"handovers: {[(h.name, round(s, 2)) for h, s in handovers]}; writes: {len(history)}")


async def test_a_leader_that_loses_its_lease_stops_and_exits_non_zero(
    admin: KubeClient, namespace: str, candidates: Candidates
) -> None:
    candidates.start("a")
    await eventually(lambda: _holder(admin, namespace), what="a leader")

    async def writes() -> int:
        counter = await admin.get(CONFIGMAPS, COUNTER, namespace)
        return len(counter["data"].get("history", "").split())

    await eventually(writes, what="the leader's first writes")
    # Someone else takes the Lease and keeps renewing it, as a rogue or partitioned peer would.
    steal_until = time.monotonic() + RENEW_DEADLINE + 5
    while time.monotonic() < steal_until and candidates.processes["a"].poll() is None:
        lease = await admin.get(LEASES, LEASE, namespace)
        lease["spec"].update(holderIdentity="thief", renewTime=micro_time())
        with contextlib.suppress(Conflict):  # the victim renewed in between: try again
            await admin.update(LEASES, lease)
        await anyio.sleep(0.2)
    code = await anyio.to_thread.run_sync(lambda: candidates.processes["a"].wait(timeout=10))
    assert code == 1
    after_exit = await writes()
    await anyio.sleep(1.0)
    assert await writes() == after_exit, "the deposed leader kept writing"


async def test_a_paused_leader_writes_nothing_when_it_wakes(
    admin: KubeClient, namespace: str, candidates: Candidates
) -> None:
    """SIGSTOP the leader for longer than its Lease: the other candidate takes over and writes;
    on SIGCONT the old leader, whose caches and beliefs are as old as the pause, must not write
    (the manager's fence: docs/faults.md, "Fencing"). Without the fence its next read-modify-write
    of the counter lands after the new leader's, with the older term."""
    for identity in ("a", "b"):
        candidates.start(identity)
    leader = await eventually(lambda: _holder(admin, namespace), what="a first leader")
    other = "b" if leader == "a" else "a"

    async def history() -> list[tuple[str, int]]:
        try:
            counter = await admin.get(CONFIGMAPS, COUNTER, namespace)
        except NotFound:
            return []
        entries = (counter.get("data") or {}).get("history", "").split()
        return [(who, int(term)) for who, term in (e.split(":") for e in entries)]

    await eventually(lambda: history(), what="the leader's first writes")
    candidates.processes[leader].send_signal(signal.SIGSTOP)
    try:

        async def other_wrote() -> bool:
            return any(who == other for who, _ in await history())

        await eventually(other_wrote, timeout=MAX_HANDOVER + 5, interval=0.05, what="takeover")
        await anyio.sleep(1.0)
    finally:
        candidates.processes[leader].send_signal(signal.SIGCONT)
    code = await anyio.to_thread.run_sync(lambda: candidates.processes[leader].wait(timeout=15))
    assert code == 1, "a leader that finds its Lease taken exits non-zero"
    entries = await history()
    first_other = next(i for i, (who, _) in enumerate(entries) if who == other)
    stale = [e for e in entries[first_other:] if e[0] == leader]
    assert not stale, f"the paused leader wrote after its successor: {stale} in {entries}"
    terms = [term for _, term in entries]
    assert terms == sorted(terms), f"an older term after a newer one: {entries}"
