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

In the slot-server variant (``Harness.slot_server``) a member never has a pod of its own: instead
of "``a``'s Deployment at 0 and no pod", both members' Deployments want 0 and the monitor's watch
never saw a pod of either (not only none at the end: a pod that came and went is a swap done the
pod way); the slot server's ``/models`` ends with exactly ``b`` loaded, and its pod is the one
that served at the start (a swap never restarts the server). The monitor counts the server's
children as the members whose model they serve, so "no two members at once" covers it unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import httpx

from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.local.system import OperatorProcess
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, PODS
from tests.e2e.faultplan import CLIENT_DEADLINE_SECONDS, SETTLE_SECONDS, SWAP_BUDGET_SECONDS
from tests.e2e.faultproxy import Object
from tests.e2e.httpclients import http_client
from tests.e2e.test_slot_server import loaded_models
from tests.e2e.waiting import eventually

if TYPE_CHECKING:
    from tests.e2e.faultscenario import Run


async def judge(run: Run) -> list[str]:
    failures: list[str] = []
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
    if run.h.slot_server:
        failures += await slot_server_end(run)
    else:
        failures += await member_pods_end(run)
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


async def member_pods_end(run: Run) -> list[str]:
    """Member pods: ``a``'s Deployment wants 0 and ``a`` has no pod left."""
    failures: list[str] = []
    admin, ns = run.h.admin, run.h.namespace
    a_deployment = await _get(admin, DEPLOYMENTS, run.a, ns)
    if a_deployment is not None and (a_deployment.get("spec") or {}).get("replicas"):
        failures.append(f"a's Deployment still wants {a_deployment['spec']['replicas']}")
    pods = await admin.list(PODS, ns, label_selector=f"{ISVC_LABEL}={run.a}")
    if pods.items:
        failures.append(f"a still has pods: {[p['metadata']['name'] for p in pods.items]}")
    return failures


#: How long the slot server's ``/models`` may take to show the settled pool: the pool's resident
#: is written once ``/models`` showed ``b`` loaded, so this is slack, not a wait for the swap.
SLOT_MODELS_SECONDS = 10.0


async def slot_server_end(run: Run) -> list[str]:
    """The slot-server variant's end: the same server, exactly ``b`` loaded in it, no member pod
    ever, both members' Deployments at 0."""
    failures: list[str] = []
    admin, ns = run.h.admin, run.h.namespace
    for role, member in (("a", run.a), ("b", run.b)):
        deployment = await _get(admin, DEPLOYMENTS, member, ns)
        if deployment is not None and (deployment.get("spec") or {}).get("replicas"):
            failures.append(f"{role}'s Deployment wants {deployment['spec']['replicas']}")
    ever = [
        e.subject for e in list(run.h.monitor.timeline)
        if e.source == "pod" and e.what == "added"
        and e.subject.split("/")[0] in (run.a, run.b)
    ]  # fmt: skip
    pods = await admin.list(PODS, ns, label_selector=f"{ISVC_LABEL} in ({run.a},{run.b})")
    ever += [p["metadata"]["name"] for p in pods.items]
    if ever:
        failures.append(f"a member had a pod of its own: {sorted(set(ever))}")
    server = await run.slot_pods()
    if not run.slot_pod_at_start or server != run.slot_pod_at_start:
        failures.append(f"the slot server's pod was replaced: {run.slot_pod_at_start} -> {server}")
    wanted = {f"model-{run.a}": "unloaded", f"model-{run.b}": "loaded"}
    seen: dict[str, str] = {}

    async def only_b_loaded() -> bool:
        nonlocal seen
        async with http_client(timeout=5, trust_env=False) as http:
            seen = await loaded_models(http, run.slot_url)
        return seen == wanted

    try:
        await eventually(only_b_loaded, timeout=SLOT_MODELS_SECONDS, what="only b loaded")
    except (AssertionError, httpx.HTTPError) as err:
        failures.append(f"the slot server's /models is not exactly b loaded: {seen} ({err})")
    return failures


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
