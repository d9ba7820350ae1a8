"""The fault harness (docs/faults.md): a scripted swap run again and again, one fault each time.

A fault-free run first gives the write points of the swap (every write the operator and the
router-proxy made, from the wire); then each injection of the plan runs the same swap with one
fault: a crash right after one write, the operator's leader paused past its Lease after one write,
one kind of watch event held back, or every watch of one side lagging. Each run is judged by the
pool invariant monitor and the end-state oracle (:mod:`tests.e2e.faultscenario`), and the table of
runs is printed.

``make test`` runs a fixed plan of :data:`BOUNDED_POINTS` (a few minutes); ``hack/faults`` (or
``MODELPOOL_FAULTS=full``) runs every pattern at every point. The slot-server variant runs the
same harness on a pool with ``spec.slotServer`` (one long-lived server loads and unloads the
models, no member pod), on a plan of its own, :data:`SLOT_BOUNDED_POINTS`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import anyio
import pytest

from controlplane.runtime.client import KubeClient
from tests.e2e.clusters import TestCluster
from tests.e2e.faultplan import (
    CRASH_AFTER_WRITE,
    HELD_EVENTS,
    PAUSED_LEADER,
    STALE_VIEW,
    Injection,
    RunResult,
    WritePoint,
    crash_injections,
    event_injections,
    marked_point,
    pause_injections,
    table,
)
from tests.e2e.faultscenario import Harness
from tests.e2e.kubectl import install
from tests.e2e.operator_process import (
    LocalProcess,
    operator_kubeconfig_for,
    start_node,
)

#: The bounded plan's runs take about 15 s each; the full plan's about 12 min in all.
BOUNDED_TIMEOUT: Final = 420
FULL_PLAN_TIMEOUT: Final = 3600
#: How long a held-back event or a lagging view is held.
HOLD_SECONDS: Final = 4.0
#: A bounded plan: (pattern, process, point) of the full plan's injections.
BoundedPlan = tuple[tuple[str, str, str], ...]
#: The bounded plan of ``make test``.
BOUNDED_POINTS: Final[BoundedPlan] = (
    (CRASH_AFTER_WRITE, "operator", "PUT modelpools/pool/status"),
    (CRASH_AFTER_WRITE, "operator", "PATCH deployments/a"),
    (CRASH_AFTER_WRITE, "operator", "PATCH deployments/b"),
    (CRASH_AFTER_WRITE, "router-proxy", "POST leases"),
    (PAUSED_LEADER, "operator", "PUT modelpools/pool/status"),
    (HELD_EVENTS, "operator", "Pod deletions"),
    (STALE_VIEW, "operator", "every watch"),
)
#: The slot-server variant's bounded plan. Its swap has no Deployment write: the operator's steps
#: are the pool's status writes (the release of a, the grant to b, b resident), each followed by
#: an order to the server (unload a, load b) that a crash right after the write leaves unsent.
#: They are named by what they set (faultplan.marked_point): the pool's status is written more
#: often than that, by timing, so their numbers vary.
RELEASE: Final = "PUT modelpools/pool/status [a=Released]"
GRANT: Final = "PUT modelpools/pool/status [b=Granted]"
RESIDENT: Final = "PUT modelpools/pool/status [resident=b]"
SLOT_BOUNDED_POINTS: Final[BoundedPlan] = (
    (CRASH_AFTER_WRITE, "operator", RELEASE),
    (CRASH_AFTER_WRITE, "operator", GRANT),
    (CRASH_AFTER_WRITE, "operator", RESIDENT),
    (CRASH_AFTER_WRITE, "router-proxy", "POST leases"),
    (PAUSED_LEADER, "operator", RELEASE),
    (STALE_VIEW, "operator", "every watch"),
)


def the_plan(points: list[WritePoint], full: bool, bounded: BoundedPlan) -> list[Injection]:
    """Every injection of the reference run's ``points`` (``full``), or the ``bounded`` plan's,
    whose marked points (``KIND [TOKEN]``) are found in the reference by what they set."""
    if not full:
        marked = (marked_point(process, point, points) for _, process, point in bounded)
        points = [*points, *dict.fromkeys(m for m in marked if m is not None)]
    everything = [
        *crash_injections(points),
        *pause_injections(points),
        *event_injections(HOLD_SECONDS),
    ]
    if full:
        return everything
    chosen = [i for i in everything if (i.pattern, i.process, i.point) in bounded]
    missing = set(bounded) - {(i.pattern, i.process, i.point) for i in chosen}
    assert not missing, f"the bounded plan names points the swap no longer has: {missing}"
    return chosen


def _timeout() -> int:
    return FULL_PLAN_TIMEOUT if os.environ.get("MODELPOOL_FAULTS") else BOUNDED_TIMEOUT


@pytest.mark.timeout(_timeout())
async def test_every_fault_of_the_plan_is_survived(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    await run_the_plan(cluster, admin, namespace, tmp_path, started, BOUNDED_POINTS)


@pytest.mark.timeout(_timeout())
async def test_every_fault_of_the_plan_is_survived_with_a_slot_server(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    """The same harness on a pool with ``spec.slotServer``: the swap is the pool's status
    writes and orders to one long-lived server, so the crashes that matter are those between a
    status write and its order (the next operator must re-send it), and the oracle adds that the
    server ends with exactly b loaded, was never restarted, and no member ever had a pod."""
    await run_the_plan(
        cluster, admin, namespace, tmp_path, started, SLOT_BOUNDED_POINTS, slot_server=True
    )


async def run_the_plan(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
    bounded: BoundedPlan,
    *,
    slot_server: bool = False,
) -> None:
    """The reference run, then the plan (``bounded``, or all of it for ``MODELPOOL_FAULTS``),
    judged and tabled."""
    if cluster.local is None:
        pytest.skip("the fault harness runs the operator and proxies as local processes")
    await install(cluster)
    node = start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=0.5,
                      token_seconds=0.01)  # fmt: skip
    assert node.monitor is not None
    harness = Harness(
        admin, cluster.admin_config(), cluster.admin_kubeconfig, namespace, tmp_path, started,
        node.monitor,
        await operator_kubeconfig_for(cluster, admin, tmp_path / "operator-token.kubeconfig"),
        slot_server=slot_server,
    )  # fmt: skip
    reference, points = await harness.reference()
    print("write points of the swap:")
    for point in points:
        print(f"  {point.process}: {point.name}  ({point.example})")
    full = os.environ.get("MODELPOOL_FAULTS") == "full"
    only = os.environ.get("MODELPOOL_FAULTS_ONLY", "")
    plan = the_plan(points, full or bool(only), bounded)
    if only:
        plan = [i for i in plan if only in i.label]
    results: list[RunResult] = [reference]
    for injection in plan:
        result, _ = await harness.run(injection)
        print(f"{result.verdict:>11}  {injection.label}  ({result.seconds:.0f} s): {result.seen}")
        results.append(result)
        if result.failures and not full:
            break  # the bounded plan stops at its first failure: one is enough to fail it
    report = table(results)
    print(report)
    if path := os.environ.get("MODELPOOL_FAULTS_TABLE"):
        suffix = "-slot-server" if slot_server else ""
        await anyio.Path(path + suffix).write_text(report + "\n")
    failed = [r for r in results if r.failures]
    assert not failed, "\n".join(f"{r.injection.label}: {r.failures}" for r in failed)
    # A later occurrence of a write (``#5``) depends on timing and may not come in every run:
    # the full plan reports it "not reached"; the bounded plan's points must all be reached.
    not_reached = [r.injection.label for r in results[1:] if not r.injected]
    if not (full or only):
        assert not not_reached, f"faults never injected (no run reached them): {not_reached}"
