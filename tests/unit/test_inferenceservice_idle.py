"""Scale to zero when idle (docs/inferenceservice.md, "Scale to zero"): the standalone demand the
operator reads from the router-proxies' reports, the verdict on it, whom a report's change
wakes, and what the service then says."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.demand import STANDALONE_REPORTS, ReportedDemand, demand_lease
from controlplane.controllers.inferenceservice.idle import (
    DEMAND_RECHECK_SECONDS,
    REASON_IDLE,
    StandaloneDemand,
    explain_idle,
    idle_requeue,
    judge_standalone,
    on_standalone_report,
)
from controlplane.controllers.inferenceservice.status import PhaseDecision
from controlplane.runtime.cache import DEFAULT_INDEXERS, Store
from controlplane.runtime.informer import Informer
from controlplane.scheduling.idle import Activity, stamp

NOW = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


@dataclass
class Leases:
    """The pool-Lease informer as the controller uses it: a store, and its handlers told."""

    store: Store = field(default_factory=lambda: Store(DEFAULT_INDEXERS))
    handlers: list[Any] = field(default_factory=list)

    def add(self, obj: dict[str, Any]) -> None:
        self.store.upsert(obj)
        for handler in self.handlers:
            handler.on_add(obj, False)


def report(replica: str, demand: dict[str, ReportedDemand], pool: str = STANDALONE_REPORTS) -> Any:
    lease = demand_lease("ns", pool, replica, 15, demand)
    lease["metadata"]["resourceVersion"] = replica
    return lease


def service(
    idle_after: str | None = "5m", idle_since: datetime | None = None, scaled: bool = False
) -> InferenceService:
    spec: dict[str, Any] = {"model": {"name": "m", "source": "/models/m.gguf"}}
    if idle_after:
        spec["idleAfter"] = idle_after
    status: dict[str, Any] = {}
    if idle_since is not None:
        status["idleSince"] = stamp(idle_since)
    if scaled:
        status["scaledToZero"] = True
    return InferenceService.from_dict(
        {"metadata": {"name": "solo", "namespace": "ns"}, "spec": spec, "status": status}
    )


def test_the_demand_is_every_replicas_standalone_reports_and_nothing_else() -> None:
    leases = Leases()
    demand = StandaloneDemand(cast(Informer, leases))
    leases.handlers.append(demand)
    assert demand.activity("ns", "solo") == Activity()
    leases.add(report("proxy-0", {"solo": ReportedDemand(held=2)}))
    leases.add(report("proxy-1", {"solo": ReportedDemand(active=True), "other": ReportedDemand(1)}))
    # A pool's report naming a member of the same name is the pool's, never this service's.
    leases.add(report("proxy-2", {"solo": ReportedDemand(held=5)}, pool="gpu-0"))
    assert demand.activity("ns", "solo") == Activity(held=2, active=True)
    assert demand.activity("other-ns", "solo") == Activity()


def test_the_verdict_is_the_pools_rule_for_one_service() -> None:
    assert judge_standalone(service(idle_after=None), Activity(), NOW).due == ()
    quiet = judge_standalone(service(idle_since=NOW - timedelta(minutes=5)), Activity(), NOW)
    assert (quiet.due, quiet.act) == (("solo",), ()), "published first, acted on after"
    acted = judge_standalone(
        service(idle_since=NOW - timedelta(minutes=5), scaled=True), Activity(), NOW
    )
    assert acted.act == ("solo",)
    busy = judge_standalone(
        service(idle_since=NOW - timedelta(hours=1), scaled=True), Activity(held=1), NOW
    )
    assert (busy.due, busy.act, busy.pool_since) == ((), (), None), "a held request wakes it"


def test_a_report_wakes_every_service_of_its_namespace_that_scales_to_zero() -> None:
    services = Store(DEFAULT_INDEXERS)
    for name, spec in (("solo", {"idleAfter": "5m"}), ("always", {})):
        services.upsert({"metadata": {"name": name, "namespace": "ns"}, "spec": spec})
    requests = on_standalone_report(services, report("proxy-0", {}))
    assert [(r.namespace, r.name) for r in requests] == [("ns", "solo")]
    assert on_standalone_report(services, report("proxy-0", {}, pool="gpu-0")) == []


def test_a_service_at_zero_for_idleness_says_so() -> None:
    stopped = PhaseDecision("Stopped", "ScaledToZero", "scaled to zero; no pods left")
    acted = judge_standalone(
        service(idle_since=NOW - timedelta(minutes=5), scaled=True), Activity(), NOW
    )
    said = explain_idle(stopped, acted, "5m")
    assert (said.phase, said.reason) == ("Stopped", REASON_IDLE)
    assert "spec.idleAfter" in said.message
    running = PhaseDecision("Ready", "ServerReady", "1 ready replica(s)")
    assert explain_idle(running, acted, "5m") == running


def test_it_is_looked_at_as_its_clock_falls_due_or_while_a_report_may_expire() -> None:
    running = judge_standalone(service(idle_since=NOW - timedelta(minutes=4)), Activity(), NOW)
    assert idle_requeue(running, "5m") == pytest.approx(60.1)
    busy = judge_standalone(service(), Activity(active=True), NOW)
    assert idle_requeue(busy, "5m") == DEMAND_RECHECK_SECONDS
    assert idle_requeue(busy, None) is None
