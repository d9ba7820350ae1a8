"""The activator and the Lease coordinator against fakes of the cluster (no network).

The test plays the pool controller: when the Lease names a target it makes that member the
Ready resident in the fake caches and wakes the activator, as the informers would. The fake API
accepts and refuses writes as the real API server does (tests/unit/router_fakes.py).
"""

from __future__ import annotations

import anyio
import pytest

from controlplane.api.v1alpha1 import ModelPool
from controlplane.api.v1alpha1.activation import (
    POOL_LABEL,
    TARGET_ANNOTATION,
    read_activation,
    released,
)
from controlplane.controllers.modelpool.intent import LeaseObserver
from controlplane.router.activator import Activator
from controlplane.router.errors import (
    ActivationFailed,
    ActivationTimeout,
    HoldFull,
    LeaseUnavailable,
    PoolBusy,
    ProxyStopping,
)
from controlplane.router.lease import LeaseCoordinator, Renewal
from controlplane.router.retryafter import SwapHistory
from controlplane.router.routing import Route
from controlplane.runtime.metrics import REGISTRY
from controlplane.runtime.resources import LEASES
from tests.unit.activator_helpers import (
    LEASE_NAME,
    Clock,
    ask_many,
    claims_by,
    cluster,
    holder,
    lease,
    member_writes,
    new_activator,
    play_controller,
    running,
    until,
)
from tests.unit.router_fakes import FakeApi

pytestmark = pytest.mark.anyio


# -- fast path, coalescing, budget ---------------------------------------------------------------


async def test_fast_path_forwards_to_the_resident_without_a_claim() -> None:
    view, api = cluster()
    activator = new_activator(view, api)
    assert await activator.upstream(Route("llama", "a", "gpu-0")) == view.urls["a"][0]
    assert api.lease_writes() == []


async def test_concurrent_requests_coalesce_onto_one_claim_and_the_lease_is_released() -> None:
    view, api = cluster()
    activator = new_activator(view, api)
    urls: list[str] = []
    async with running(activator) as group:

        async def ask() -> None:
            urls.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        for _ in range(5):
            group.start_soon(ask)
        await play_controller(view, api, activator)
        await until(lambda: not (len(urls) < 5 or activator.swaps))
    assert urls == [view.urls["b"][0]] * 5
    claims = claims_by(api, "me")
    assert len(claims) == 1
    assert claims[0]["metadata"]["annotations"][TARGET_ANNOTATION] == "b"
    assert claims[0]["metadata"]["labels"] == {POOL_LABEL: "gpu-0"}
    assert holder(api) == ""
    assert TARGET_ANNOTATION not in lease(api)["metadata"]["annotations"]


async def test_budget_elapsed_is_503_and_an_unattended_holder_releases_the_intent() -> None:
    """The pool controller, whose owner falls back to the resident, drains the target; the
    activator writes nothing but the Lease."""
    view, api = cluster(budget="300ms")
    activator = new_activator(view, api)
    async with running(activator):
        with pytest.raises(ActivationTimeout) as caught:
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        await until(lambda: not activator.swaps, timeout=15)  # after its linger
    assert caught.value.status == 503
    assert int(caught.value.headers()["Retry-After"]) >= 1
    assert caught.value.code == "pool_activation_timeout"
    assert holder(api) == ""
    assert TARGET_ANNOTATION not in lease(api)["metadata"]["annotations"]
    assert member_writes(api) == [], "the proxy wrote a member"


async def test_a_busy_incumbent_inside_its_floor_keeps_the_slot_and_the_answer_is_pool_busy() -> (
    None
):
    # a busy resident inside its 10 s floor; the bound (here 20 s) is far off
    view, api = cluster(budget="300ms", scheduling={"maxWait": "20s", "minResidency": "10s"})
    activator = new_activator(view, api)
    release = activator.inflight.track("a")
    async with running(activator):
        with pytest.raises(PoolBusy) as caught:
            await activator.upstream(Route("qwen", "b", "gpu-0"))
    release()
    assert api.lease_writes() == []
    assert caught.value.code == "pool_busy"
    headers = caught.value.headers()
    # the turn is about 10 s away (a's floor), not the budget's 0.3 s: Retry-After says so,
    # and in milliseconds too (openai-python reads retry-after-ms first)
    assert 9 <= int(headers["Retry-After"]) <= 12
    assert headers["retry-after-ms"] == str(int(headers["Retry-After"]) * 1000)


async def test_the_claim_follows_the_incumbent_going_idle() -> None:
    view, api = cluster()
    activator = new_activator(view, api, activity_window=0.05)
    release = activator.inflight.track("a")
    result: list[str] = []
    async with running(activator) as group:

        async def ask() -> None:
            result.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        group.start_soon(ask)
        await anyio.sleep(0.2)
        assert api.lease_writes() == []
        release()
        await play_controller(view, api, activator)
        await until(lambda: bool(result))


async def test_a_failed_target_is_502_and_the_holder_releases() -> None:
    view, api = cluster()
    activator = new_activator(view, api)
    async with running(activator) as group:
        errors: list[ActivationFailed] = []

        async def ask() -> None:
            try:
                await activator.upstream(Route("qwen", "b", "gpu-0"))
            except ActivationFailed as err:
                errors.append(err)

        group.start_soon(ask)
        await until(lambda: holder(api) == "me")
        view.isvcs["b"]["status"] = {"phase": "Failed"}
        activator.notifier.notify()
        await until(lambda: bool(errors) and not activator.swaps)
    assert errors[0].status == 502
    assert holder(api) == ""
    assert member_writes(api) == []


# -- one swap driver per pool (defect 1) ---------------------------------------------------------


async def test_one_replica_never_retargets_its_own_running_swap() -> None:
    """Resident a is being drained for b; a request for a arrives 0.3 s later. It must wait
    behind b's swap (as behind another replica's), never retarget the Lease under it."""
    view, api = cluster()
    activator = new_activator(view, api)
    answers: dict[str, str] = {}
    async with running(activator) as group:

        async def ask(member: str) -> None:
            answers[member] = await activator.upstream(Route(member, member, "gpu-0"))

        group.start_soon(ask, "b")
        await until(lambda: holder(api) == "me")
        view.start_draining("a")  # the pool controller drains a for b
        activator.notifier.notify()
        group.start_soon(ask, "a")
        await anyio.sleep(0.3)
        targets = {
            read_activation(w).target for w in api.lease_writes() if read_activation(w).holder
        }
        assert targets == {"b"}, "the Lease was retargeted while b's swap ran"
        assert "b" not in answers
        await play_controller(view, api, activator)  # b comes up
        await until(lambda: "b" in answers)
        # then a's swap runs, on its own claim
        view.start_draining("b")
        activator.notifier.notify()
        await until(lambda: read_activation(lease(api)).target == "a")
        await play_controller(view, api, activator)
        await until(lambda: "a" in answers and not activator.swaps)
    assert [read_activation(c).target for c in claims_by(api, "me")] == ["b", "a"]


async def test_a_swap_for_another_target_waits_for_the_pools_turn_even_when_the_lease_is_free() -> (
    None
):
    """The Lease alone does not keep a replica's second swap out: when b's claim is cleared
    under it (here by an admin), c's swap on the same replica must still wait for b's turn to
    end, and b's swap claims again."""
    view, api = cluster()
    activator = new_activator(view, api, duration=1)
    answers: dict[str, str] = {}
    async with running(activator) as group:

        async def ask(member: str) -> None:
            answers[member] = await activator.upstream(Route(member, member, "gpu-0"))

        group.start_soon(ask, "b")
        await until(lambda: holder(api) == "me")
        group.start_soon(ask, "c")
        await anyio.sleep(0.1)
        await api.update(LEASES, released(lease(api)))  # b's claim is gone; the Lease is free
        await until(lambda: len(claims_by(api, "me")) >= 2)
        await anyio.sleep(0.5)
        assert [read_activation(c).target for c in claims_by(api, "me")] == ["b", "b"]
        await play_controller(view, api, activator)
        await until(lambda: "b" in answers)
        await until(lambda: read_activation(lease(api)).target == "c")
        await play_controller(view, api, activator)
        await until(lambda: "c" in answers and not activator.swaps)


async def test_claim_renew_and_release_check_the_target_as_well_as_the_holder() -> None:
    _, api = cluster()
    mine = LeaseCoordinator(api, "ns", "me")
    assert (await mine.claim("gpu-0", "b")).held
    other_target = await mine.claim("gpu-0", "c")
    assert (other_target.held, other_target.holder, other_target.target) == (False, "me", "b")
    assert await mine.renew("gpu-0", "c") is Renewal.LOST
    assert await mine.release("gpu-0", "c") is False
    assert read_activation(lease(api)).is_claim_of("me", "b"), "another swap's claim was cleared"
    assert await mine.renew("gpu-0", "b") is Renewal.RENEWED
    assert await mine.release("gpu-0", "b") is True
    assert holder(api) == ""


async def test_lease_held_by_another_replica_for_another_target_waits_then_claims() -> None:
    view, api = cluster()
    other = LeaseCoordinator(api, "ns", "other")
    assert (await other.claim("gpu-0", "c")).held
    activator = new_activator(view, api)
    result: list[str] = []
    async with running(activator) as group:

        async def ask() -> None:
            result.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        group.start_soon(ask)
        await anyio.sleep(0.3)
        assert holder(api) == "other"
        await other.release("gpu-0", "c")
        await play_controller(view, api, activator)
        await until(lambda: bool(result))
    assert result == [view.urls["b"][0]]


# -- the Lease: claims, expiry, renewal (defects 6, 7) -------------------------------------------


async def test_lease_api_errors_hold_the_request_then_503_lease_unavailable() -> None:
    view, api = cluster(budget="500ms")
    api.broken = True
    activator = new_activator(view, api)
    async with running(activator):
        with pytest.raises(LeaseUnavailable) as caught:
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        # The swap's driver keeps retrying its release for a Lease duration; once the API is back
        # the swap ends, holding nothing (without this, the test waited out those 45 s).
        api.broken = False
        await until(lambda: not activator.swaps, timeout=15)
    assert holder(api) == ""
    assert int(caught.value.headers()["Retry-After"]) >= 1
    assert caught.value.code == "pool_lease_unavailable"


async def test_a_claim_whose_answer_was_lost_is_released_when_its_swap_ends() -> None:
    """The create lands but its reply is an error: the intent must not outlive the swap."""
    view, api = cluster(budget="300ms")
    api.lost_answers["leases"] = 1
    activator = new_activator(view, api)
    async with running(activator):
        with pytest.raises((ActivationTimeout, LeaseUnavailable)):
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        await until(lambda: not activator.swaps, timeout=15)
    assert holder(api) == "", "the lost claim still holds the pool's Lease"
    assert member_writes(api) == []


async def test_a_claim_whose_answer_was_lost_is_found_ours_and_the_swap_goes_on() -> None:
    view, api = cluster()
    api.lost_answers["leases"] = 1
    activator = new_activator(view, api)
    result: list[str] = []
    async with running(activator) as group:

        async def ask() -> None:
            result.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        group.start_soon(ask)
        await play_controller(view, api, activator)
        await until(lambda: bool(result) and not activator.swaps)
    assert holder(api) == ""
    assert len(claims_by(api, "me")) == 1


async def test_a_live_holder_is_respected_and_an_expired_one_taken_over_by_observation() -> None:
    _, api = cluster()
    clock = Clock()
    assert (await LeaseCoordinator(api, "ns", "other", duration=45).claim("gpu-0", "a")).held
    mine = LeaseCoordinator(api, "ns", "me", clock=clock)
    claim = await mine.claim("gpu-0", "b")
    assert (claim.held, claim.holder, claim.target) == (False, "other", "a")
    clock.now += 44  # our own observation: not yet expired
    assert not (await mine.claim("gpu-0", "b")).held
    clock.now += 2
    assert (await mine.claim("gpu-0", "b")).held
    assert lease(api)["metadata"]["annotations"][TARGET_ANNOTATION] == "b"
    assert lease(api)["spec"]["leaseTransitions"] == 1


async def test_claim_rereads_after_a_409_and_wins() -> None:
    _, api = cluster()
    first = LeaseCoordinator(api, "ns", "x")
    assert (await first.claim("gpu-0", "a")).held
    await first.release("gpu-0", "a")
    api.conflicts["leases"] = 1
    claim = await LeaseCoordinator(api, "ns", "me").claim("gpu-0", "b")
    assert claim.held
    assert holder(api) == "me"


async def test_a_lease_of_our_name_that_is_not_a_pools_is_never_written_over() -> None:
    _, api = cluster()
    api.put(LEASES, {"metadata": {"name": LEASE_NAME}, "spec": {"holderIdentity": ""}})
    with pytest.raises(LeaseUnavailable, match=POOL_LABEL):
        await LeaseCoordinator(api, "ns", "me").claim("gpu-0", "b")
    assert api.lease_writes() == []


async def test_release_is_idempotent_and_never_touches_another_holder() -> None:
    _, api = cluster()
    mine = LeaseCoordinator(api, "ns", "me")
    assert await mine.release("gpu-0", "b") is False  # no Lease at all
    assert (await mine.claim("gpu-0", "b")).held
    assert await mine.release("gpu-0", "b") is True
    writes = len(api.lease_writes())
    assert await mine.release("gpu-0", "b") is False
    assert len(api.lease_writes()) == writes
    assert (await LeaseCoordinator(api, "ns", "other").claim("gpu-0", "a")).held
    await mine.release("gpu-0", "a")
    assert holder(api) == "other"


async def test_renew_reports_a_lost_lease() -> None:
    _, api = cluster()
    clock = Clock()
    mine = LeaseCoordinator(api, "ns", "me")
    assert (await mine.claim("gpu-0", "b")).held
    assert await mine.renew("gpu-0", "b") is Renewal.RENEWED
    thief = LeaseCoordinator(api, "ns", "thief", clock=clock)
    await thief.claim("gpu-0", "a")
    clock.now += 100
    assert (await thief.claim("gpu-0", "a")).held
    assert await mine.renew("gpu-0", "b") is Renewal.LOST


async def test_the_renew_interval_and_call_limit_follow_the_lease_duration() -> None:
    coordinator = LeaseCoordinator(FakeApi(), "ns", "me", duration=12)
    assert coordinator.renew_interval == 4
    assert 0 < coordinator.call_timeout < coordinator.renew_interval


async def test_the_intent_never_lapses_for_the_controller_while_a_slow_swap_runs() -> None:
    """The pool controller judges expiry on its own clock from when it saw the record change;
    a holder that renews too late (or never) lets the intent lapse mid-swap."""
    view, api = cluster()
    activator = new_activator(view, api, duration=1)  # renews every 1/3 s
    observer = LeaseObserver()
    lapses: list[float] = []
    async with running(activator) as group:

        async def ask() -> None:
            await activator.upstream(Route("qwen", "b", "gpu-0"))

        group.start_soon(ask)
        await until(lambda: holder(api) == "me")
        with anyio.move_on_after(2.6):  # more than two Lease durations
            while True:
                current = lease(api)
                observer.on_update(current, current)
                if observer.intent(current) is None:
                    lapses.append(anyio.current_time())
                await anyio.sleep(0.02)
        await play_controller(view, api, activator)
        await until(lambda: not activator.swaps)
    assert lapses == [], "the controller saw the intent expire while the swap was running"


async def test_a_hung_renew_is_cut_short_and_a_holder_that_cannot_renew_counts_it_lost() -> None:
    view, api = cluster()
    activator = new_activator(view, api, duration=1)
    async with running(activator) as group:

        async def ask() -> None:
            with pytest.raises((ActivationTimeout, LeaseUnavailable, ProxyStopping)):
                await activator.upstream(Route("qwen", "b", "gpu-0"))

        group.start_soon(ask)
        await until(lambda: holder(api) == "me")
        calls = api.calls
        api.hang = True  # every call from now on hangs
        swap = activator.swaps[("gpu-0", "b")]
        await until(lambda: not swap.holding, timeout=1.5)  # within the duration plus one renew
        assert api.calls - calls >= 2, "one hung renew call blocked the holder"
        api.hang = False


# -- validation and stopping (defects 3, 5) ------------------------------------------------------


async def test_a_stopping_replica_answers_held_requests_503_and_claims_nothing_more() -> None:
    view, api = cluster()
    activator = new_activator(view, api)
    errors: list[ProxyStopping] = []
    async with anyio.create_task_group() as outer:
        async with anyio.create_task_group() as group:
            group.start_soon(activator.start)
            await until(lambda: activator._group is not None)

            async def ask(member: str) -> None:
                try:
                    await activator.upstream(Route(member, member, "gpu-0"))
                except ProxyStopping as err:
                    errors.append(err)

            for member in ("b", "b", "c"):
                outer.start_soon(ask, member)
            await until(lambda: holder(api) == "me")
            writes = len(claims_by(api, "me"))
            group.cancel_scope.cancel()  # SIGTERM: the manager cancels its runnables
        await until(lambda: len(errors) == 3)
    assert all(e.status == 503 and int(e.headers()["Retry-After"]) >= 1 for e in errors)
    assert len(claims_by(api, "me")) == writes, "a stopping replica claimed again"
    assert holder(api) == ""
    with pytest.raises(ProxyStopping):
        await activator.upstream(Route("c", "c", "gpu-0"))


# -- Retry-After and slow loaders (defect 10) ----------------------------------------------------


def test_retry_after_comes_from_measured_swap_times() -> None:
    history = SwapHistory()
    assert history.retry_after("p", "b", elapsed=3.0, cap=300) == 3  # nothing seen: as long again
    assert history.retry_after("p", "b", elapsed=0.2, cap=300) == 1  # at least 1 s
    assert history.retry_after("p", "b", elapsed=900.0, cap=300) == 300  # at most the budget
    for seconds in [10.0] * 9 + [40.0]:
        history.record("p", "b", seconds)
    assert history.retry_after("p", "b", elapsed=4.0, cap=300) == 6  # p90 10 s, 4 s gone
    history.record("p", "b", 40.0)
    assert history.retry_after("p", "b", elapsed=4.0, cap=300) == 36  # p90 is now 40 s
    assert history.retry_after("p", "c", elapsed=4.0, cap=300) == 4  # per target


async def test_a_member_slower_than_the_budget_still_becomes_resident_for_a_retrying_client() -> (
    None
):
    """Budget 0.4 s, the member takes ~1.2 s: the first request is 503 with Retry-After, the
    swap lingers for the retry, the retry is answered, and the intent was held throughout."""
    view, api = cluster(budget="400ms")
    activator = new_activator(view, api)
    async with running(activator) as group:

        async def load_slowly() -> None:
            await until(lambda: holder(api) == "me")
            await anyio.sleep(1.2)
            await play_controller(view, api, activator)

        group.start_soon(load_slowly)
        with pytest.raises(ActivationTimeout) as first:
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        await anyio.sleep(int(first.value.headers()["Retry-After"]) - 0.4)
        assert await activator.upstream(Route("qwen", "b", "gpu-0")) == view.urls["b"][0]
        await until(lambda: not activator.swaps)
    assert len(claims_by(api, "me")) == 1, "the intent was given up between the two requests"
    assert member_writes(api) == []
    assert activator.history.expected("gpu-0", "b") is not None


def pool_samples(name: str) -> float:
    """The sum of a router metric's samples for pool gpu-0, whatever its other labels."""
    total = 0.0
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name == name and sample.labels.get("pool") == "gpu-0":
                total += sample.value
    return total


async def test_swaps_are_counted_only_by_the_replica_that_drove_them() -> None:
    view, api = cluster()
    before = pool_samples("modelpool_swaps_total")
    durations = pool_samples("modelpool_swap_duration_seconds_count")
    driver, follower = new_activator(view, api, "driver"), new_activator(view, api, "follower")
    async with running(driver) as group, running(follower):
        answered: list[str] = []

        async def ask(activator: Activator) -> None:
            answered.append(await activator.upstream(Route("qwen", "b", "gpu-0")))

        group.start_soon(ask, driver)
        await until(lambda: holder(api) == "driver")
        group.start_soon(ask, follower)
        await anyio.sleep(0.1)
        await play_controller(view, api, driver)
        follower.notifier.notify()
        await until(lambda: len(answered) == 2 and not driver.swaps and not follower.swaps)
    assert pool_samples("modelpool_swaps_total") == before + 1
    assert pool_samples("modelpool_swap_duration_seconds_count") == durations + 1


def swaps_counted(source: str, target: str) -> float:
    """``modelpool_swaps_total`` for pool gpu-0 from ``source`` to ``target``."""
    value = REGISTRY.get_sample_value(
        "modelpool_swaps_total", {"pool": "gpu-0", "from": source, "to": target}
    )
    return value or 0.0


async def test_a_swap_counts_the_resident_it_replaced_not_the_one_seen_at_its_claim() -> None:
    """The driver claims for c while a is resident; before the pool drains for c, an unfinished
    swap of a dead driver makes b resident. The swap that follows replaces b: it is counted
    b -> c, never a -> c."""
    view, api = cluster()
    before = {pair: swaps_counted(*pair) for pair in (("a", "c"), ("b", "c"))}
    driver = new_activator(view, api, "driver")
    async with running(driver) as group:
        answered: list[str] = []
        ask_many(group, driver, Route("qwen", "c", "gpu-0"), 1, answered)
        await until(lambda: holder(api) == "driver")
        view.make_resident("gpu-0", "b")
        driver.notifier.notify()
        await until(lambda: driver.swaps[("gpu-0", "c")].origin == "b")
        await play_controller(view, api, driver)
        await until(lambda: len(answered) == 1 and not driver.swaps)
    assert swaps_counted("b", "c") == before[("b", "c")] + 1
    assert swaps_counted("a", "c") == before[("a", "c")]


async def test_a_claim_for_a_member_another_replica_already_made_resident_counts_no_swap() -> None:
    """Another replica's swap made b resident and released the Lease; our cache still says a.
    We claim for b: the API server's pool names b resident, so when our cache catches up, the
    swap ends without being counted a second time (a -> b was the other replica's)."""
    view, api = cluster()
    api.put(ModelPool.resource(), {"metadata": {"name": "gpu-0"},
                                   "status": {"residentMember": "b"}})  # fmt: skip
    before = swaps_counted("a", "b")
    driver = new_activator(view, api, "driver")
    async with running(driver) as group:
        answered: list[str] = []
        ask_many(group, driver, Route("qwen", "b", "gpu-0"), 1, answered)
        await until(lambda: holder(api) == "driver")
        await until(lambda: driver.swaps[("gpu-0", "b")].arrived)
        view.make_resident("gpu-0", "b")  # our cache catches up
        driver.notifier.notify()
        await until(lambda: len(answered) == 1 and not driver.swaps)
    assert swaps_counted("a", "b") == before


# -- spans ---------------------------------------------------------------------------------------


async def test_the_swap_is_a_child_of_the_first_hold_joiners_link_and_the_claim_carries_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hold → swap → lease.claim for the request that started it; another request's hold links
    to the swap; the Lease carries the swap span's traceparent for the pool controller."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from controlplane.api.v1alpha1.activation import TRACEPARENT_ANNOTATION
    from controlplane.router import activator as activator_module
    from controlplane.router import lease as lease_module

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(activator_module, "tracer", provider.get_tracer("a"))
    monkeypatch.setattr(lease_module, "tracer", provider.get_tracer("l"))
    view, api = cluster()
    activator = new_activator(view, api)
    async with running(activator) as group:

        async def ask() -> None:
            await activator.upstream(Route("qwen", "b", "gpu-0"))

        group.start_soon(ask)
        await until(lambda: bool(claims_by(api, "me")))
        group.start_soon(ask)  # joins the running swap
        await until(lambda: activator.swaps[("gpu-0", "b")].waiters == 2)
        await play_controller(view, api, activator)
        await until(lambda: not activator.swaps)
    spans = exporter.get_finished_spans()
    holds = [s for s in spans if s.name == "hold"]
    (swap,) = [s for s in spans if s.name == "swap"]
    claims = [s for s in spans if s.name == "lease.claim"]
    first = next(h for h in holds if h.context.span_id == swap.parent.span_id)  # type: ignore[union-attr]
    (joiner,) = [h for h in holds if h is not first]
    assert not first.links
    assert [link.context.span_id for link in joiner.links] == [swap.context.span_id]
    assert all(c.parent.span_id == swap.context.span_id for c in claims)  # type: ignore[union-attr]
    assert {dict(h.attributes or {})["modelpool.outcome"] for h in holds} == {"ready"}
    assert dict(swap.attributes or {})["modelpool.outcome"] == "ready"
    written = claims_by(api, "me")[0]["metadata"]["annotations"][TRACEPARENT_ANNOTATION]
    assert written.split("-")[1:3] == [
        format(swap.context.trace_id, "032x"),
        format(swap.context.span_id, "016x"),
    ]


async def test_beyond_its_held_limit_a_replica_answers_503_at_once_and_holds_again_after() -> None:
    """Never an unbounded queue: with ``--max-held-requests 2``, a third request for a member
    not ready is refused at once (with Retry-After), not held; once the two end, one is held."""
    view, api = cluster(budget="400ms")
    activator = new_activator(view, api, max_held=2)
    outcomes: list[str] = []
    async with running(activator) as group:

        async def ask() -> None:
            try:
                await activator.upstream(Route("qwen", "b", "gpu-0"))
            except (ActivationTimeout, PoolBusy) as err:
                outcomes.append(err.code)

        group.start_soon(ask)
        group.start_soon(ask)
        await until(lambda: activator.held == 2)
        started = anyio.current_time()
        with pytest.raises(HoldFull) as caught:
            await activator.upstream(Route("qwen", "b", "gpu-0"))
        assert anyio.current_time() - started < 0.1, "the third was held before its refusal"
        await until(lambda: len(outcomes) == 2, timeout=10)
        assert activator.held == 0
        group.start_soon(ask)
        await until(lambda: activator.held == 1)
        await until(lambda: len(outcomes) == 3, timeout=10)
    assert caught.value.status == 503
    assert caught.value.code == "proxy_hold_full"
    assert int(caught.value.headers()["Retry-After"]) >= 1


async def test_a_resident_changing_its_pod_is_held_and_answered_by_the_new_pod() -> None:
    """Admission to a resident closes while its InferenceService says a change to its pod waits
    for the pool (docs/inferenceservice.md, "Changing a serving member"): its requests are held
    and answered by the pod the change brings, never forwarded to the one being drained."""
    view, api = cluster()
    pending = {"type": "UpdatePending", "status": "True", "reason": "WaitingForPool"}
    view.isvcs["a"]["status"]["conditions"] = [pending]
    old = view.urls["a"][0]
    activator = new_activator(view, api)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, Route("llama", "a", "gpu-0"), 3, answers)
        await until(lambda: activator.held == 3)
        assert answers == [], "nothing is forwarded to the pod being drained"
        # The pool drained it, the change went in, the new pod is Ready at a new address.
        view.start_draining("a")
        view.make_resident("gpu-0", "a")
        view.urls["a"] = ["http://127.0.0.1:9111"]
        activator.notifier.notify()
        await until(lambda: len(answers) == 3)
    assert answers == ["http://127.0.0.1:9111"] * 3
    assert old not in answers


async def test_a_resident_the_pool_gives_back_is_held_and_its_demand_keeps_it() -> None:
    """Admission to a resident closes while the pool is giving it back for idleness
    (``status.reclaiming``, docs/modelpool.md "Giving an idle slot back"): its requests are held,
    never forwarded to the pod about to drain, and claimed for it as demand; once the pool ends
    the reclaim for that demand, they are answered by the same resident."""
    view, api = cluster()
    view.pools["gpu-0"]["status"]["reclaiming"] = ["a"]
    url = view.urls["a"][0]
    activator = new_activator(view, api)
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, Route("llama", "a", "gpu-0"), 2, answers)
        await until(lambda: activator.held == 2)
        await until(lambda: read_activation(lease(api)).target == "a")
        assert answers == [], "nothing is forwarded to a resident being given back"
        # The pool saw the demand (the claim, the reports): it ends the reclaim.
        view.pools["gpu-0"]["status"]["reclaiming"] = []
        activator.notifier.notify()
        await until(lambda: len(answers) == 2)
    assert answers == [url, url]
