"""The preflight as a whole: outcomes, their messages, and the verdict cache's rules."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from controlplane.preflight.backoff import BackoffPolicy, no_jitter
from controlplane.preflight.cache import FRESH_FOR, GRACE, VerdictCache
from controlplane.preflight.permissions import Component, permissions_for
from controlplane.preflight.runner import Preflight
from controlplane.preflight.testing import FakeApiServer, FakeClock
from controlplane.preflight.verdict import (
    EXIT_ALLOWED,
    EXIT_DENIED,
    EXIT_INCONCLUSIVE,
    NOT_A_DENIAL,
    Outcome,
    Source,
)
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.errors import RequestTimeout

pytestmark = pytest.mark.anyio

SERVER = "https://apiserver.test:6443"
SHORT = BackoffPolicy(budget=20.0)
HOUR = 3600.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def config_for(token: str, server: str = SERVER) -> ClientConfig:
    return ClientConfig(
        server, ssl.create_default_context(), extra_headers={"Authorization": f"Bearer {token}"}
    )


class World:
    """One fake API server and clock, and preflights that share a cache folder."""

    def __init__(self, cache_dir: Path) -> None:
        self.clock = FakeClock()
        self.server = FakeApiServer(self.clock)
        self.cache_dir = cache_dir

    def preflight(
        self,
        *,
        token: str = "token-a",
        namespace: str = "team-a",
        component: Component = Component.ROUTER_PROXY,
        server: str = SERVER,
    ) -> Preflight:
        # A new VerdictCache each time: like a new process, only the disk is shared.
        return Preflight(
            config_for(token, server),
            component,
            namespace,
            cache=VerdictCache(self.cache_dir, clock=self.clock),
            policy=SHORT,
            clock=self.clock,
            uniform=no_jitter,
            submit=self.server,
        )

    def stall(self) -> None:
        self.server.default(RequestTimeout("no answer in time"))

    def recover(self) -> None:
        self.server.default(True)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "cache")


async def test_allowed_live_then_a_second_run_within_the_hour_makes_no_api_call(
    world: World,
) -> None:
    first = await world.preflight().run()
    assert (first.outcome, first.source, first.exit_code) == (Outcome.ALLOWED, Source.LIVE, 0)
    wanted = permissions_for(Component.ROUTER_PROXY, "team-a")
    assert first.reviews_sent == len(world.server.calls) == len(wanted)
    world.clock.advance(FRESH_FOR - 60)
    calls = len(world.server.calls)
    second = await world.preflight().run()
    assert (second.outcome, second.source) == (Outcome.ALLOWED, Source.CACHE)
    assert len(world.server.calls) == calls
    assert second.reviews_sent == 0
    assert "no API call" in second.message


async def test_past_the_hour_a_live_check_runs_again(world: World) -> None:
    await world.preflight().run()
    world.clock.advance(FRESH_FOR + 1)
    calls = len(world.server.calls)
    verdict = await world.preflight().run()
    assert verdict.source is Source.LIVE
    assert len(world.server.calls) > calls


async def test_within_grace_a_stale_verdict_stands_in_for_an_inconclusive_check(
    world: World,
) -> None:
    await world.preflight().run()
    world.clock.advance(5 * HOUR)
    world.stall()
    verdict = await world.preflight().run()
    assert (verdict.outcome, verdict.source) == (Outcome.ALLOWED, Source.STALE_CACHE)
    assert verdict.exit_code == EXIT_ALLOWED
    assert any("5.0 h old" in w and "inconclusive" in w for w in verdict.warnings)


async def test_past_grace_the_stale_verdict_is_not_used(world: World) -> None:
    await world.preflight().run()
    world.clock.advance(GRACE + 1)
    world.stall()
    verdict = await world.preflight().run()
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.exit_code == EXIT_INCONCLUSIVE


async def test_stale_verdict_is_not_used_when_the_live_check_answers(world: World) -> None:
    await world.preflight().run()
    world.clock.advance(5 * HOUR)
    world.server.script(permissions_for(Component.ROUTER_PROXY, "team-a")[0], False)
    verdict = await world.preflight().run()
    assert verdict.outcome is Outcome.DENIED


async def test_denial_is_never_cached_and_drops_a_cached_allowed(world: World) -> None:
    await world.preflight().run()
    world.clock.advance(2 * HOUR)  # past fresh, so the live check runs
    wanted = permissions_for(Component.ROUTER_PROXY, "team-a")
    world.server.script(wanted[0], False)
    assert (await world.preflight().run()).outcome is Outcome.DENIED
    assert list((world.cache_dir).glob("*.json")) == []
    # Still denied on the next run: it asked again rather than trusting any cache.
    calls = len(world.server.calls)
    assert (await world.preflight().run()).outcome is Outcome.DENIED
    assert len(world.server.calls) > calls
    # And a stall right after a denial is INCONCLUSIVE, not the older ALLOWED.
    world.stall()
    world.server.script(wanted[0], RequestTimeout("no answer in time"))
    assert (await world.preflight().run()).outcome is Outcome.INCONCLUSIVE


async def test_denied_names_each_missing_permission_kubectl_style(world: World) -> None:
    wanted = permissions_for(Component.ROUTER_PROXY, "team-a")
    lease_update = next(
        p for p in wanted if str(p.permission) == "update leases.coordination.k8s.io"
    )
    world.server.script(lease_update, False)
    world.server.script(wanted[0], False)
    verdict = await world.preflight().run()
    assert verdict.outcome is Outcome.DENIED
    assert verdict.exit_code == EXIT_DENIED
    assert set(verdict.missing) == {lease_update, wanted[0]}
    assert "preflight DENIED" in verdict.message
    assert "  - update leases.coordination.k8s.io in namespace team-a" in verdict.message
    assert f"  - {wanted[0]}" in verdict.message
    assert NOT_A_DENIAL not in verdict.message


async def test_inconclusive_says_it_is_not_a_denial_and_names_no_permission(
    world: World,
) -> None:
    world.stall()
    verdict = await world.preflight().run()
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert "preflight INCONCLUSIVE" in verdict.message
    assert "This is NOT a permissions denial" in verdict.message
    assert SERVER in verdict.message
    assert "no answer in time" in verdict.message
    assert "DENIED" not in verdict.message
    assert verdict.missing == ()
    assert len(verdict.unanswered) == len(permissions_for(Component.ROUTER_PROXY, "team-a"))


async def test_cache_key_isolates_namespaces_identities_servers_and_components(
    world: World,
) -> None:
    await world.preflight().run()
    world.stall()
    others = {
        "another namespace": world.preflight(namespace="team-b"),
        "another identity": world.preflight(token="token-b"),
        "another server": world.preflight(server="https://other.test:6443"),
        "another component": world.preflight(component=Component.OPERATOR),
    }
    for what, preflight in others.items():
        verdict = await preflight.run()
        assert verdict.outcome is Outcome.INCONCLUSIVE, what
    same = await world.preflight().run()
    assert (same.outcome, same.source) == (Outcome.ALLOWED, Source.CACHE)


async def test_inconclusive_rereads_the_cache_a_concurrent_process_filled(world: World) -> None:
    world.stall()
    preflight = world.preflight()
    # Another process succeeds while this one is retrying.
    other = world.preflight()
    original_sleep = world.clock.sleep
    filled = False

    async def sleep_and_let_the_other_succeed(seconds: float) -> None:
        nonlocal filled
        if not filled:
            filled = True
            other.cache.store(other.key, world.clock.time())
        await original_sleep(seconds)

    world.clock.sleep = sleep_and_let_the_other_succeed  # type: ignore[method-assign]
    verdict = await preflight.run()
    assert verdict.outcome is Outcome.ALLOWED
    assert verdict.source is Source.CACHE
