"""Reviews: derived from the declarations, one per permission, fresh bodies, sent concurrently."""

from __future__ import annotations

import anyio
import pytest

from controlplane.controllers import rbac
from controlplane.preflight.backoff import DEFAULT_POLICY, no_jitter
from controlplane.preflight.check import check_permissions
from controlplane.preflight.permissions import (
    Component,
    ScopedPermission,
    permission_set_digest,
    permissions_for,
)
from controlplane.preflight.review import review_body
from controlplane.preflight.testing import FakeApiServer, FakeClock, Submitted
from controlplane.runtime.errors import (
    InternalError,
    RequestTimeout,
    ServiceUnavailable,
    TransportError,
)
from controlplane.runtime.rbac import Permission, PolicyRule

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_router_proxy_checks_exactly_its_declared_rules_in_its_namespace() -> None:
    wanted = permissions_for(Component.ROUTER_PROXY, "team-a")
    declared = {p for rule in rbac.ROUTER_PROXY_RULES for p in rule.permissions()}
    assert {p.permission for p in wanted} == declared
    assert {p.namespace for p in wanted} == {"team-a"}
    assert len(wanted) == len(set(wanted))


def test_operator_checks_cluster_rules_everywhere_and_leader_election_at_home() -> None:
    wanted = permissions_for(Component.OPERATOR, "modelpool-system")
    cluster = {p.permission for p in wanted if p.namespace is None}
    home = {p.permission for p in wanted if p.namespace == "modelpool-system"}
    assert cluster == {p for rule in rbac.OPERATOR_CLUSTER_RULES for p in rule.permissions()}
    assert home == {p for rule in rbac.LEADER_ELECTION_RULES for p in rule.permissions()}


def test_declarations_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule added to the declarations is checked, and changes the cache key, with no edit here."""
    before = permissions_for(Component.ROUTER_PROXY, "ns")
    extra = PolicyRule(("",), ("configmaps",), ("get",))
    monkeypatch.setattr(
        "controlplane.preflight.permissions.ROUTER_PROXY_RULES", (*rbac.ROUTER_PROXY_RULES, extra)
    )
    after = permissions_for(Component.ROUTER_PROXY, "ns")
    assert ScopedPermission(Permission("", "configmaps", "get"), "ns") in after
    assert permission_set_digest(after) != permission_set_digest(before)


def test_a_subresource_becomes_resource_plus_subresource_and_cluster_scope_has_no_namespace() -> (
    None
):
    status = ScopedPermission(
        Permission("inference.modelpool.dev", "modelpools/status", "patch"), None
    )
    assert review_body(status)["spec"]["resourceAttributes"] == {
        "group": "inference.modelpool.dev",
        "resource": "modelpools",
        "subresource": "status",
        "verb": "patch",
    }
    named = ScopedPermission(Permission("coordination.k8s.io", "leases", "update", "lock"), "ns")
    assert review_body(named)["spec"]["resourceAttributes"] == {
        "group": "coordination.k8s.io",
        "resource": "leases",
        "verb": "update",
        "name": "lock",
        "namespace": "ns",
    }
    assert str(named) == "update leases.coordination.k8s.io (name lock) in namespace ns"


async def test_each_retry_resubmits_its_own_permission_in_a_fresh_object() -> None:
    clock = FakeClock()
    # The fake scribbles on every body it receives: re-sending one would send a wrong verb.
    server = FakeApiServer(clock, mutate_bodies=True)
    wanted = permissions_for(Component.ROUTER_PROXY, "ns")
    for index, permission in enumerate(wanted):
        # Answers, not silence: a silent server is probed by one review (tests further down).
        failures = [InternalError(500, "", "")] * (index % 4) + [ServiceUnavailable(503, "", "")]
        server.script(permission, *failures, True)
    result = await check_permissions(
        wanted, server, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter
    )
    assert all(r.allowed for r in result.results)
    for index, permission in enumerate(wanted):
        calls = server.calls_for(permission)
        assert len(calls) == index % 4 + 2
        assert result.results[index].attempts == len(calls)
    # Nothing but the permissions' own attributes was ever sent (no "mutated" verb, no mix-ups).
    assert len(server.calls) == sum(index % 4 + 2 for index in range(len(wanted)))
    assert result.reviews_sent == len(server.calls)


async def test_one_probe_then_the_other_reviews_are_in_flight_together() -> None:
    wanted = permissions_for(Component.ROUTER_PROXY, "ns")
    in_flight = 0
    peak = 0
    calls = 0
    all_in = anyio.Event()

    async def server(body: dict[str, object]) -> dict[str, object]:
        nonlocal in_flight, peak, calls
        calls += 1
        if calls == 1:  # the probe: alone, until it is answered
            assert in_flight == 0
            return {**body, "status": {"allowed": True}}
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == len(wanted) - 1:
            all_in.set()
        with anyio.fail_after(5):  # a sequential sender would never get here
            await all_in.wait()
        in_flight -= 1
        return {**body, "status": {"allowed": True}}

    result = await check_permissions(
        wanted,
        server,
        policy=DEFAULT_POLICY,
        clock=FakeClock(),
        uniform=no_jitter,
        max_in_flight=len(wanted),
    )
    assert peak == len(wanted) - 1
    assert calls == len(wanted)
    assert all(r.allowed for r in result.results)


async def test_while_the_server_is_silent_only_one_review_asks() -> None:
    wanted = permissions_for(Component.ROUTER_PROXY, "ns")
    clock = FakeClock()
    server = FakeApiServer(clock)
    # Silent for the first six attempts (whoever sends them), then answering.
    silence = [TransportError("connection refused")] * 6

    async def flaky(body: dict[str, object]) -> dict[str, object]:
        if silence:
            server.calls.append(Submitted(body, clock.now()))
            raise silence.pop()
        return await server(body)

    result = await check_permissions(
        wanted, flaky, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter
    )
    assert all(r.allowed for r in result.results)
    # Six silent probes, then one answered review per permission: not 6 x 15 silent attempts.
    assert result.reviews_sent == 6 + len(wanted)
    assert len({c.attributes["resource"] for c in server.calls[:6]}) == 1, "one prober"


async def test_reviews_never_sent_while_the_server_stays_silent_say_so() -> None:
    wanted = permissions_for(Component.ROUTER_PROXY, "ns")
    clock = FakeClock()

    async def silent(body: dict[str, object]) -> dict[str, object]:
        raise TransportError("connection refused")

    result = await check_permissions(
        wanted, silent, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter
    )
    assert not any(r.answered for r in result.results)
    probed = [r for r in result.results if r.attempts]
    assert len(probed) == 1
    waited = [r for r in result.results if not r.attempts]
    assert all("not sent" in r.error and "connection refused" in r.error for r in waited)


async def test_in_flight_limit_bounds_concurrency_but_not_during_backoff() -> None:
    wanted = permissions_for(Component.OPERATOR, "ns")
    clock = FakeClock()
    in_flight = 0
    peak = 0

    async def server(body: dict[str, object]) -> dict[str, object]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.001)
        in_flight -= 1
        return {**body, "status": {"allowed": True}}

    result = await check_permissions(
        wanted, server, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter, max_in_flight=4
    )
    assert len(wanted) > 4
    assert peak == 4
    assert len(result.results) == len(wanted)


async def test_a_denial_is_an_answer_and_is_not_retried() -> None:
    clock = FakeClock()
    server = FakeApiServer(clock)
    wanted = permissions_for(Component.ROUTER_PROXY, "ns")
    server.script(wanted[2], RequestTimeout("slow"), False, True)
    result = await check_permissions(
        wanted, server, policy=DEFAULT_POLICY, clock=clock, uniform=no_jitter
    )
    assert [r.permission for r in result.denied] == [wanted[2]]
    assert len(server.calls_for(wanted[2])) == 2
    assert result.denied[0].reason == "no RBAC policy matched"
