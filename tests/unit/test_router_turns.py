"""The slot's turn on a router-proxy replica: the scheduler's verdict carried out (no network).

Each test plays the pool controller (tests/unit/activator_helpers.py) and checks one promise of
docs/modelpool.md ("Scheduling the slot"): a busy resident past its floor gives the turn and its
admission closes pool-wide; the floor holds the turn; another replica's demand counts (and stops
counting when its report expires); priority orders the waiting members; the demand report is
written on change, not per request.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1.activation import new_pool_lease, read_activation
from controlplane.api.v1alpha1.demand import (
    ADMISSION_ANNOTATION,
    DEMAND_ANNOTATION,
    ReportedDemand,
    decode_demand,
    demand_lease,
    demand_lease_name,
)
from controlplane.router.activator import Activator
from controlplane.router.demand import DemandReporter, admission_ack
from controlplane.router.routing import Route
from controlplane.runtime.resources import LEASES
from tests.unit.activator_helpers import (
    claims_by,
    cluster,
    holder,
    lease,
    new_activator,
    play_controller,
    running,
    until,
)
from tests.unit.router_fakes import FakeApi, FakeView

pytestmark = pytest.mark.anyio


def targets_claimed(api: object) -> list[str | None]:
    return [read_activation(c).target for c in claims_by(api, "me")]  # type: ignore[arg-type]


async def test_a_busy_resident_past_its_floor_gives_the_turn_and_admission_closes() -> None:
    """The case today's policy starved: a is busy on this replica when b is asked for. With the
    floor served, b claims at once (while a is still in flight), every new request for a is held
    instead of forwarded, and once b has had its turn, a gets the next one."""
    view, api = cluster(scheduling={"maxWait": "30s", "minResidency": "0s"})
    activator = new_activator(view, api, activity_window=0.05)
    in_flight = activator.inflight.track("a")  # a request for a is being served
    answers: dict[str, str] = {}
    async with running(activator) as group:

        async def ask(member: str) -> None:
            answers[member] = await activator.upstream(Route(member, member, "gpu-0"))

        group.start_soon(ask, "b")
        await until(lambda: holder(api) == "me")
        assert read_activation(lease(api)).target == "b"
        assert activator.inflight.count("a") == 1, "the claim did not wait for a to go idle"
        # admission to a is closed while the intent names b: a new request for a is held
        assert activator.ready_url("gpu-0", "a") is None
        group.start_soon(ask, "a")
        await anyio.sleep(0.2)
        assert "a" not in answers
        in_flight()  # a's request finishes: the pool controller may now drain a
        await play_controller(view, api, activator)
        await until(lambda: "b" in answers)
        view.start_draining("b")
        activator.notifier.notify()
        await until(lambda: read_activation(lease(api)).target == "a")
        await play_controller(view, api, activator)
        await until(lambda: "a" in answers and not activator.swaps)
    assert targets_claimed(api) == ["b", "a"]


async def test_in_a_pool_with_a_budget_a_member_that_fits_leaves_admission_open_and_one_that_needs_room_evicts_the_idle_resident() -> (  # noqa: E501
    None
):
    """Budget of two members. b fits beside a (busy): it is claimed with nobody to leave, and a's
    admission stays open throughout. c needs room while a is idle and b busy: the claim names a
    (idle) to leave, admission closes for a only, and b keeps its fast path."""
    view, api = cluster(scheduling={"maxWait": "30s", "minResidency": "0s"})
    view.pools["gpu-0"]["spec"]["capacity"] = {"members": 2}
    view.join_residents("gpu-0", "a")
    activator = new_activator(view, api, activity_window=0.05)
    a_in_flight = activator.inflight.track("a")
    answers: dict[str, str] = {}
    async with running(activator) as group:

        async def ask(member: str) -> None:
            answers[member] = await activator.upstream(Route(member, member, "gpu-0"))

        group.start_soon(ask, "b")
        await until(lambda: holder(api) == "me")
        assert (read_activation(lease(api)).target, read_activation(lease(api)).evict) == (
            "b",
            (),
        )
        assert activator.ready_url("gpu-0", "a") is not None, "a was closed for a member that fits"
        view.join_residents("gpu-0", "b")
        activator.notifier.notify()
        await until(lambda: "b" in answers and not activator.swaps)
        a_in_flight()
        b_in_flight = activator.inflight.track("b")
        await anyio.sleep(0.1)  # a's activity window passes: a is idle, b is not
        group.start_soon(ask, "c")
        await until(lambda: read_activation(lease(api)).target == "c")
        assert read_activation(lease(api)).evict == ("a",)
        assert activator.ready_url("gpu-0", "a") is None, "admission to the evicted a is open"
        assert activator.ready_url("gpu-0", "b") is not None, "b was closed though it stays"
        view.leave_residents("gpu-0", "a")
        view.join_residents("gpu-0", "c")
        activator.notifier.notify()
        await until(lambda: "c" in answers and not activator.swaps)
        b_in_flight()
    assert targets_claimed(api) == ["b", "c"]


async def test_the_floor_holds_the_turn_until_it_ends() -> None:
    view, api = cluster(scheduling={"maxWait": "30s", "minResidency": "600ms"})
    activator = new_activator(view, api, activity_window=10)
    release = activator.inflight.track("a")
    started = anyio.current_time()
    async with running(activator) as group:
        activator.schedule.residency("gpu-0")  # a's residency is seen starting now
        answers: list[str] = []

        async def ask() -> None:
            answers.append(await activator.upstream(Route("b", "b", "gpu-0")))

        group.start_soon(ask)
        await anyio.sleep(0.3)
        assert api.lease_writes() == [], "b claimed inside a's floor"
        await until(lambda: holder(api) == "me", timeout=3)
        assert anyio.current_time() - started >= 0.55
        await play_controller(view, api, activator)
        await until(lambda: bool(answers))
    release()


async def test_another_replicas_overdue_demand_goes_first_and_stops_counting_when_it_expires() -> (
    None
):
    """Replica r2 reports a request for c that has waited past maxWait; ours for b is younger:
    c's turn comes first, so we do not claim for b. When r2's report expires (r2 died), its
    demand is gone and b claims: a dead replica loses only its own demand."""
    view, api = cluster(scheduling={"maxWait": "1s", "minResidency": "0s"})
    report = {"c": ReportedDemand(held=2, waited=5.0)}
    api.put(LEASES, demand_lease("ns", "gpu-0", "r2", 1, report))
    activator = new_activator(view, api)
    async with running(activator) as group:
        answers: list[str] = []

        async def ask() -> None:
            answers.append(await activator.upstream(Route("b", "b", "gpu-0")))

        group.start_soon(ask)
        await anyio.sleep(0.5)
        assert api.lease_writes() == [], "b claimed while c was overdue on another replica"
        # r2's report (duration 1 s) is never renewed: within about a second b claims
        await until(lambda: holder(api) == "me", timeout=4)
        assert read_activation(lease(api)).target == "b"
        await play_controller(view, api, activator)
        await until(lambda: bool(answers))


async def test_a_higher_priority_member_goes_first_and_a_lower_one_still_gets_its_turn() -> None:
    view, api = cluster(
        scheduling={"maxWait": "30s", "minResidency": "0s"}, priorities={"c": 5, "b": 0}
    )
    activator = new_activator(view, api, activity_window=0.05)
    answers: dict[str, str] = {}
    async with running(activator) as group:

        async def ask(member: str) -> None:
            answers[member] = await activator.upstream(Route(member, member, "gpu-0"))

        # b asks first, c a moment later; the Lease is busy with an admin's claim meanwhile, so
        # both are waiting when the turn is decided
        api.put(LEASES, new_pool_lease("ns", "gpu-0", "admin", "a", 1))
        group.start_soon(ask, "b")
        await anyio.sleep(0.05)
        group.start_soon(ask, "c")
        await until(lambda: holder(api) == "me", timeout=4)
        assert read_activation(lease(api)).target == "c", "priority 5 did not go first"
        await play_controller(view, api, activator)
        await until(lambda: "c" in answers)
        view.start_draining("c")
        activator.notifier.notify()
        await until(lambda: read_activation(lease(api)).target == "b")
        await play_controller(view, api, activator)
        await until(lambda: "b" in answers and not activator.swaps)


async def test_demand_is_reported_on_change_not_per_request_and_emptied_when_answered() -> None:
    view, api = cluster()
    activator = new_activator(view, api, activity_window=0.05)
    reporter = DemandReporter(
        api, "ns", "me", activator.local, activator.inflight, interval=0.1, duration=3
    )
    name = demand_lease_name("gpu-0", "me")
    async with running(activator) as group:
        group.start_soon(reporter.start)
        await anyio.sleep(0.3)
        assert reporter.writes == 0, "a replica with no demand writes nothing"
        releases = [activator.local.hold("gpu-0", "b") for _ in range(200)]
        await until(lambda: reporter.writes >= 1)
        await anyio.sleep(0.5)
        written = api.objects[("leases", name)]
        demand = decode_demand(written["metadata"]["annotations"][DEMAND_ANNOTATION])
        assert demand["b"].held == 200
        assert written["spec"]["holderIdentity"] == "me"
        assert reporter.writes == 1, "an unchanged summary was written again"
        for release in releases:
            release()
        await until(lambda: reporter.writes >= 2)
        emptied = api.objects[("leases", name)]
        assert decode_demand(emptied["metadata"]["annotations"][DEMAND_ANNOTATION]) == {}
        assert emptied["spec"]["holderIdentity"] == ""
        await anyio.sleep(1.5)
        assert reporter.writes == 2, "an empty report was renewed"
        group.cancel_scope.cancel()


async def test_a_report_is_renewed_while_its_demand_lasts() -> None:
    view, api = cluster()
    activator = new_activator(view, api)
    reporter = DemandReporter(
        api, "ns", "me", activator.local, activator.inflight, interval=0.1, duration=1
    )
    release = activator.local.hold("gpu-0", "b")
    async with anyio.create_task_group() as group:
        group.start_soon(reporter.start)
        await anyio.sleep(1.2)
        group.cancel_scope.cancel()
    release()
    assert reporter.writes >= 3, "a report with demand was not renewed at a third of its duration"
    assert reporter.writes <= 6


async def test_a_malformed_report_of_another_replica_is_ignored() -> None:
    view, api = cluster(scheduling={"maxWait": "1s", "minResidency": "0s"})
    bad = demand_lease("ns", "gpu-0", "r2", 30, {"c": ReportedDemand(held=1, waited=9.0)})
    bad["metadata"]["annotations"][DEMAND_ANNOTATION] = '{"c": {"held": "lots"}}'
    api.put(LEASES, bad)
    activator = new_activator(view, api)
    async with running(activator) as group:
        answers: list[str] = []

        async def ask() -> None:
            answers.append(await activator.upstream(Route("b", "b", "gpu-0")))

        group.start_soon(ask)
        await until(lambda: holder(api) == "me")
        assert read_activation(lease(api)).target == "b"
        await play_controller(view, api, activator)
        await until(lambda: bool(answers))


@pytest.mark.parametrize(
    ("budget", "scheduling", "expected"),
    [
        ("300s", {}, (30.0, 10.0)),  # the defaults
        ("25s", {}, (12.5, 10.0)),  # an unset bound is half a short budget
        ("8s", {}, (4.0, 4.0)),  # and the floor never exceeds the bound
        ("300s", {"maxWait": "1m", "minResidency": "0s"}, (60.0, 0.0)),
    ],
)
def test_the_settings_the_policy_takes(
    budget: str, scheduling: dict[str, str], expected: tuple[float, float]
) -> None:
    view, api = cluster(budget=budget, scheduling=scheduling)
    settings = new_activator(view, api).schedule.settings("gpu-0")
    assert (settings.max_wait, settings.min_residency) == expected


async def test_a_second_target_waits_for_this_replicas_turn_without_calling_the_api() -> None:
    """b holds the Lease; c (priority 10) is then the policy's pick. c's swap must wait for b's
    swap to end on this replica (one driver per pool here as across replicas), without asking
    the Lease API every claim interval meanwhile."""
    view, api = cluster(scheduling={"maxWait": "30s", "minResidency": "0s"}, priorities={"c": 10})
    activator = new_activator(view, api, activity_window=0.05)
    answers: dict[str, str] = {}
    async with running(activator) as group:

        async def ask(member: str) -> None:
            answers[member] = await activator.upstream(Route(member, member, "gpu-0"))

        group.start_soon(ask, "b")
        await until(lambda: holder(api) == "me")
        group.start_soon(ask, "c")
        await anyio.sleep(0.1)
        calls = api.calls
        await anyio.sleep(1.0)
        assert api.calls == calls, f"{api.calls - calls} API calls while b's swap held the turn"
        assert targets_claimed(api) == ["b"]
        await play_controller(view, api, activator)
        await until(lambda: "b" in answers)
        view.start_draining("b")
        activator.notifier.notify()
        await until(lambda: read_activation(lease(api)).target == "c")
        await play_controller(view, api, activator)
        await until(lambda: "c" in answers and not activator.swaps)
    assert targets_claimed(api) == ["b", "c"]


def _fencing_reporter(
    view: FakeView, api: FakeApi, activator: Activator, interval: float
) -> DemandReporter:
    """A reporter as the process wires it: it routes gpu-0 and acknowledges its closure."""
    reporter = DemandReporter(
        api,
        "ns",
        "me",
        activator.local,
        activator.inflight,
        interval=interval,
        routed=lambda: {"gpu-0"},
        acknowledgement=lambda pool: admission_ack(view.pool(pool), activator.inflight),
        wake=activator.progress.snapshot,
        on_live=activator.notifier.notify,
    )
    activator.admission.reported = reporter.live
    return reporter


def _ack(api: FakeApi) -> Any:
    written = api.objects[("leases", demand_lease_name("gpu-0", "me"))]
    assert written["spec"]["holderIdentity"] == "me", "a routing replica's report is held"
    return json.loads(written["metadata"]["annotations"][ADMISSION_ANNOTATION])


async def test_a_routing_replica_admits_only_once_its_report_is_live_and_acknowledges_a_closure_at_once() -> (  # noqa: E501
    None
):
    view, api = cluster()
    activator = new_activator(view, api)
    # a long interval: an acknowledgement must not wait for it
    reporter = _fencing_reporter(view, api, activator, interval=30.0)
    assert activator.ready_url("gpu-0", "a") is None, "admitted before the pool could see us"
    async with running(activator) as group:
        group.start_soon(reporter.start)
        await until(lambda: reporter.live("gpu-0"))
        assert _ack(api) == {"generation": 0, "inFlight": {}}
        assert activator.ready_url("gpu-0", "a") is not None
        ended = activator.inflight.track("a")  # a stream in flight on a
        view.pools["gpu-0"]["status"].update(admissionClosed=["a"], admissionGeneration=4)
        activator.notifier.notify()  # the pool's watch event
        await until(lambda: _ack(api)["generation"] == 4)
        assert _ack(api) == {"generation": 4, "inFlight": {"a": 1}}
        assert activator.ready_url("gpu-0", "a") is None, "a closed member was admitted"
        ended()
        await until(lambda: _ack(api)["inFlight"] == {})
        group.cancel_scope.cancel()


async def test_a_request_whose_member_closes_between_its_choice_and_its_count_is_held_again() -> (
    None
):
    view, api = cluster()
    activator = new_activator(view, api)
    route = Route("a", "a", "gpu-0")
    assert activator.ready_upstream(route) is not None
    view.pools["gpu-0"]["status"].update(admissionClosed=["a"], admissionGeneration=1)
    assert activator.closed_to(route), "the check after the count must see the closure"
    assert not activator.closed_to(Route("b", "b", "gpu-0"))
