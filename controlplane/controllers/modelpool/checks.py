"""The proofs the pool's plan waits for before it acts: idle probes before a drain, a live LIST
before a grant.

*Why a module of its own:* the plan (:mod:`~controlplane.controllers.modelpool.plan`) is pure and
decides on one snapshot of the caches; two of its decisions may not be trusted to a cache. A
drain needs proof from the member itself that nothing is in flight (its ``/slots``; nothing
watches them), and a grant needs proof from the API server that no other member's pod is left (a
pod's events may reach the cache after its Deployment's). Both are I/O the orchestrator runs
between the plan and the status write; both answer "not proven" rather than guess. Kept apart so
that what counts as proof is read in one file, next to nothing else.

**Idle probes** (llama.cpp ``GET /slots``, :class:`~controlplane.probes.llamacpp.SlotsProbe`): a
non-owner that serves requests is released only after its probe says idle on every ready
endpoint, all probed at once; busy is ``PodsBusy``, anything unproven ``IdleCheckFailed``
(:func:`~controlplane.controllers.modelpool.plan.blocking_reports` judges the reports).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import anyio

from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.modelpool import metrics
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.slotmembers import unreadable_why
from controlplane.probes.idle import IdleOutcome, IdleProbe, IdleReport
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import KubeError
from controlplane.runtime.resources import PODS
from controlplane.scheduling.budget import Budget

#: The log of the reconciler this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.controllers.modelpool.reconciler")


async def room_confirmed(
    client: KubeClient,
    namespace: str,
    members: Sequence[str],
    owner: str,
    budget: Budget | None,
    holding: Sequence[str],
) -> bool:
    """The grant's last check, on a live LIST (a consistent read) of the other members' pods,
    since a pod's events may reach our cache after its Deployment's: of an exclusive pool, no
    pod of any member but ``owner`` is left; of a pool with a budget, ``owner`` fits beside
    every member that has a pod (Terminating ones included) or holds part of the slot as the
    caches say (``holding``)."""
    others = sorted(m for m in members if m != owner)
    if not others:
        return True
    selector = f"{ISVC_LABEL} in ({','.join(others)})"
    try:
        found = await client.list(PODS, namespace, label_selector=selector)
    except KubeError as err:
        log.info("%s/%s: pods not listed before the grant (%s); deciding later", namespace,
                 owner, err)  # fmt: skip
        return False
    if budget is not None:
        with_pods = {(p["metadata"].get("labels") or {}).get(ISVC_LABEL) for p in found.items}
        occupied = {str(m) for m in with_pods if m} | set(holding)
        if budget.fits(owner, occupied):
            return True
        log.info("%s/%s: not granted yet: it does not fit beside %s", namespace, owner,
                 ", ".join(sorted(occupied)))  # fmt: skip
        return False
    if found.items:
        names = ", ".join(sorted(p["metadata"]["name"] for p in found.items))
        log.info("%s/%s: not granted yet: pods of other members remain: %s", namespace, owner,
                 names)  # fmt: skip
    return not found.items


async def probe_members(
    probes: Mapping[str, IdleProbe],
    members: Mapping[str, MemberState],
    names: Sequence[str],
    models_of: Mapping[str, str],
) -> dict[str, list[tuple[str, IdleReport]]]:
    """Probe every ready endpoint of each member (a starting one's starting endpoints), all
    at once, with the idle probe of its runtime (``probes``); of a member served by a slot
    server, about its model (``models_of``)."""
    reports: dict[str, list[tuple[str, IdleReport]]] = {name: [] for name in names}

    async def one(probe: IdleProbe, runtime: str, member: str, url: str) -> None:
        started = time.perf_counter()
        if (why := unreadable_why(url)) is not None:
            reports[member].append(("slot server", IdleReport(IdleOutcome.FAILED, why)))
            return
        report = await probe.probe(url, member=member, model=models_of.get(member))
        metrics.IDLE_PROBE_DURATION.labels(runtime).observe(time.perf_counter() - started)
        metrics.IDLE_PROBES.labels(runtime, report.outcome.value).inc()
        reports[member].append((url, report))

    async with anyio.create_task_group() as group:
        for name in names:
            state = members[name]
            probe = probes.get(state.runtime)
            if probe is None:
                why = f"runtime {state.runtime!r} has no idle probe"
                reports[name].append(("-", IdleReport(IdleOutcome.FAILED, why)))
            elif not state.probe_urls:
                why = "Ready, but no ready endpoint to probe"
                reports[name].append(("-", IdleReport(IdleOutcome.FAILED, why)))
            else:
                for url in state.probe_urls:
                    group.start_soon(one, probe, state.runtime, name, url)
    for results in reports.values():
        results.sort()
    return reports
