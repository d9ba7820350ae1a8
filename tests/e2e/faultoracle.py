"""The fault harness's oracle: what every run of the scripted swap must show (docs/faults.md).

Judged once the client has its answer (or gave up), on the run's record
(:class:`~tests.e2e.faultscenario.Run`) and the API server:

* the pool invariant monitor saw no two members of the pool at once, and the pool settles with no
  Lease held (the monitor's own settle check);
* the pool settles on ``b``, the member the last request asked for, and ``a``'s Deployment wants
  0 with no pod left;
* every answer was a 200 from ``b``'s model or a 503 with ``Retry-After``, each within the pool's
  budget; a connection may be cut only by a replica the fault killed;
* a paused leader, once continued, had no write of state accepted and exited 1;
* no process wrote a child that a swap never changes (a Service, a member's NetworkPolicy, the
  router's RBAC).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.local.system import OperatorProcess
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, PODS
from tests.e2e.faultplan import CLIENT_DEADLINE_SECONDS, SETTLE_SECONDS, SWAP_BUDGET_SECONDS
from tests.e2e.faultproxy import Object
from tests.e2e.waiting import eventually

if TYPE_CHECKING:
    from tests.e2e.faultscenario import Run


async def judge(run: Run) -> list[str]:
    failures: list[str] = []
    admin, ns = run.h.admin, run.h.namespace
    killed_replicas = {p.name for p in run.router.processes if not p.running()}
    last = run.attempts[-1] if run.attempts else None
    if last is None or last.status != 200:
        failures.append(f"the request for b was not answered 200 in "
                            f"{CLIENT_DEADLINE_SECONDS:.0f} s: {last}")  # fmt: skip
    for attempt in run.attempts:
        took = attempt.ended - attempt.started
        if attempt.status == 200 and attempt.model != f"model-{run.b}":
            failures.append(f"200 from {attempt.model}, not b's model")
        elif attempt.status == 503 and not attempt.retry_after:
            failures.append(f"503 {attempt.code} without Retry-After")
        elif attempt.status not in (None, 200, 503):
            failures.append(f"answered {attempt.status} {attempt.code}")
        elif attempt.status is None and attempt.replica not in killed_replicas:
            failures.append(f"no answer from live replica {attempt.replica}: {attempt.error}")
        if took > SWAP_BUDGET_SECONDS + 10:
            failures.append(f"an answer took {took:.1f} s, over the budget")
    try:
        await eventually(run.resident_is(run.b), timeout=SETTLE_SECONDS,
                             what=f"{run.pool} settled on b")  # fmt: skip
    except AssertionError as err:
        failures.append(str(err))
    problems = await anyio.to_thread.run_sync(
        lambda: run.h.monitor.settle(SETTLE_SECONDS, leases_released=True)
    )
    failures += [p.describe() for p in problems if p.pool == run.pool]
    failures += [
            v.describe() for v in list(run.h.monitor.violations)
            if v.kind == "overlap" and v.pool == run.pool
        ]  # fmt: skip
    a_deployment = await _get(admin, DEPLOYMENTS, run.a, ns)
    if a_deployment is not None and (a_deployment.get("spec") or {}).get("replicas"):
        failures.append(f"a's Deployment still wants {a_deployment['spec']['replicas']}")
    pods = await admin.list(PODS, ns, label_selector=f"{ISVC_LABEL}={run.a}")
    if pods.items:
        failures.append(f"a still has pods: {[p['metadata']['name'] for p in pods.items]}")
    failures += unchanged_children_written(run)
    if run.resumed_at is not None and run.paused is not None:
        failures += stale_writes(run, run.paused)
        if run.paused.popen.poll() != 1:
            failures.append(f"the paused leader did not exit 1: {run.paused.popen.poll()}")
    return failures


def stale_writes(run: Run, paused: OperatorProcess) -> list[str]:
    """What the paused leader wrote after SIGCONT that the API server accepted: any change
    of state is stale (a refused one, 409, is the API server's fence and no write). Events
    are state of nobody's; one already past the fence when the pause came is noted."""
    index = run.operator.processes.index(paused)
    assert run.resumed_at is not None
    late = [
            w for w in run.operator.proxies[index].successful_writes(run.resumed_at)
            if not (w.resource == "leases" and w.name == run.lease)
        ]  # fmt: skip
    events = [w for w in late if w.resource == "events"]
    if events:
        run.note(f"{len(events)} event(s) sent as the pause came, delivered after it")
    refused = [
            w for w in run.operator.proxies[index].writes
            if w.at >= run.resumed_at and w.status == 409
        ]  # fmt: skip
    if refused:
        run.note(f"the API server refused {len(refused)} of its writes: "
                      + ", ".join(w.describe() for w in refused))  # fmt: skip
    return [
            f"the paused leader wrote after it was continued: {w.describe()}"
            for w in late if w.resource != "events"
        ]  # fmt: skip


async def _get(admin: KubeClient, resource: Any, name: str, namespace: str) -> Object | None:
    try:
        return await admin.get(resource, name, namespace)
    except NotFound:
        return None


#: Children a swap never changes: a write of one during the swap is a controller that sees a
#: difference where there is none (after a restart, listed objects once lacked their kind).
UNCHANGED_BY_A_SWAP = ("services", "networkpolicies", "serviceaccounts", "roles", "rolebindings")


def unchanged_children_written(run: Run) -> list[str]:
    writes = [
        w for side in (run.operator, run.router) for w in side.writes()
        if w.succeeded and w.resource in UNCHANGED_BY_A_SWAP
    ]  # fmt: skip
    return [f"a child no swap changes was written: {w.describe()}" for w in writes[:3]]
