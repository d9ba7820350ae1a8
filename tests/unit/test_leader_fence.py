"""The leader's write fence (docs/faults.md, "Fencing"), judged on a clock the test moves.

The elector's renewals go through a client that only counts; what is tested is when
:meth:`LeaderElector.holds_lease` stops being true and what the fenced client then refuses.
"""

from __future__ import annotations

import ssl
from typing import Any

import anyio
import pytest

from controlplane.operator import settings
from controlplane.runtime import leaderelection
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.errors import NotLeading, TransportError
from controlplane.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from controlplane.runtime.resources import DEPLOYMENTS


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class LeaseServer:
    """Answers the elector's GET/create/update of one Lease as the API server would (a
    resourceVersion that moves on every write), with a holder the test can change."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    async def get(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
        from controlplane.runtime.errors import NotFound

        if self.lease is None:
            raise NotFound(404, "NotFound", name)
        return {**self.lease, "spec": dict(self.lease["spec"])}

    async def create(self, resource: Any, obj: dict[str, Any]) -> dict[str, Any]:
        return self._store(obj)

    async def update(self, resource: Any, obj: dict[str, Any]) -> dict[str, Any]:
        return self._store(obj)

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self.version)}
        self.lease = obj
        return obj

    def taken_by(self, holder: str) -> None:
        assert self.lease is not None
        self.lease["spec"]["holderIdentity"] = holder
        self.version += 1


def elector(server: LeaseServer, clock: Clock) -> LeaderElector:
    config = LeaderElectionConfig("op", "ns", "me", 15.0, 10.0, 2.0)
    return LeaderElector(server, config, clock=clock)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_the_fence_closes_at_the_renew_deadline_of_the_last_renewal_on_our_clock() -> None:
    server, clock = LeaseServer(), Clock()
    leader = elector(server, clock)
    assert await leader.try_acquire_or_renew()
    leader._set_leading(True)
    leader.write_refusal("PATCH", "/x")  # just renewed: passes
    clock.now += 9.9
    leader.write_refusal("PATCH", "/x")
    clock.now += 0.2  # 10.1 s after the renewal began: a successor may be near
    with pytest.raises(NotLeading, match="past its renew deadline"):
        leader.write_refusal("PATCH", "/x")
    assert await leader.try_acquire_or_renew(leading=True)
    leader.write_refusal("PUT", "/x")  # renewed: open again


@pytest.mark.anyio
async def test_a_renewal_that_finds_another_holder_ends_leadership_at_once() -> None:
    server, clock = LeaseServer(), Clock()
    leader = elector(server, clock)
    assert await leader.try_acquire_or_renew()
    leader._set_leading(True)
    server.taken_by("successor")
    assert not await leader.try_acquire_or_renew(leading=True)
    assert not leader.holds_lease(), "well inside the renew deadline, yet not leading"
    with pytest.raises(NotLeading):
        leader.write_refusal("DELETE", "/x")
    leader._set_leading(False)
    with pytest.raises(NotLeading, match="not leading"):
        leader.write_refusal("DELETE", "/x")


@pytest.mark.anyio
async def test_a_leader_woken_past_its_deadline_stops_without_asking() -> None:
    """The renew loop ends on the fence's own judgement: after a pause it sends nothing."""
    server, clock = LeaseServer(), Clock()
    leader = elector(server, clock)
    assert await leader.try_acquire_or_renew()
    leader._set_leading(True)
    version = server.version
    clock.now += 60  # paused for a minute
    with anyio.fail_after(5):
        await leader._keep_renewing()
    assert server.version == version, "the woken leader wrote its Lease"
    assert "not renewed within 10 s" in leader._lost_because


def test_the_operator_flags_default_to_the_frameworks_timing() -> None:
    assert (
        settings.DEFAULT_LEASE_DURATION,
        settings.DEFAULT_RENEW_DEADLINE,
        settings.DEFAULT_RETRY_PERIOD,
    ) == (
        leaderelection.DEFAULT_LEASE_DURATION,
        leaderelection.DEFAULT_RENEW_DEADLINE,
        leaderelection.DEFAULT_RETRY_PERIOD,
    )


@pytest.mark.anyio
async def test_a_fenced_client_asks_before_every_write_and_sends_nothing_refused() -> None:
    asked: list[tuple[str, str]] = []

    def guard(method: str, path: str) -> None:
        asked.append((method, path))
        raise NotLeading(f"{method} {path} not sent")

    # Nothing listens on port 9: a request that were sent would fail as a transport error.
    config = ClientConfig("https://127.0.0.1:9", ssl.create_default_context())
    async with KubeClient(config, timeout=2) as client:
        fenced = client.fenced(guard)
        with pytest.raises(NotLeading):
            await fenced.apply(DEPLOYMENTS, {"metadata": {"name": "a", "namespace": "ns"}},
                               field_manager="test")  # fmt: skip
        with pytest.raises(NotLeading):
            await fenced.delete(DEPLOYMENTS, "a", "ns")
        with pytest.raises(TransportError):
            await fenced.get(DEPLOYMENTS, "a", "ns")  # a read is not asked, and is sent
        with pytest.raises(TransportError):
            await client.delete(DEPLOYMENTS, "a", "ns")  # the unfenced client is not asked
    assert [method for method, _ in asked] == ["PATCH", "DELETE"]
