"""A request for an InferenceService no pool lists that scales to zero (docs/router.md, "Scale
from zero"): forwarded while it is up, held while it is down or going down, reported as demand
(what brings it back), answered once it is up, and 503 with Retry-After past the budget. The test
plays the operator by editing the fake caches."""

from __future__ import annotations

import anyio
import pytest

from controlplane.api.v1alpha1.demand import STANDALONE_REPORTS
from controlplane.router.activator import Activator
from controlplane.router.demand import DEFAULT_ACTIVITY_WINDOW_SECONDS, own_report
from controlplane.router.errors import ActivationTimeout, BackendUnavailable
from controlplane.router.routing import Route
from tests.unit.activator_helpers import ask_many, new_activator, running, until
from tests.unit.router_fakes import FakeApi, FakeView

pytestmark = pytest.mark.anyio
SOLO = Route("solo", "solo", None)
URL = "http://127.0.0.1:9400"


def standalone(idle_after: str | None = "5m", scaled_to_zero: bool = False) -> FakeView:
    view = FakeView(FakeApi())
    spec = {"idleAfter": idle_after} if idle_after else {}
    status: dict[str, object] = {"phase": "Stopped" if scaled_to_zero else "Ready"}
    if scaled_to_zero:
        status["scaledToZero"] = True
    view.isvcs["solo"] = {"spec": spec, "status": status}
    view.urls["solo"] = [] if scaled_to_zero else [URL]
    return view


def reported(activator: Activator) -> dict[str, tuple[int, bool]]:
    """What this replica's standalone demand report would say now: (held, active) per service."""
    report = own_report(
        STANDALONE_REPORTS,
        activator.local,
        activator.inflight,
        DEFAULT_ACTIVITY_WINDOW_SECONDS,
        activator.clock(),
    )
    return {member: (d.held, d.active) for member, d in report.items()}


async def test_a_service_that_does_not_scale_to_zero_keeps_the_old_rule() -> None:
    view = standalone(idle_after=None)
    activator = new_activator(view, api(view))
    assert await activator.upstream(SOLO) == URL
    view.urls["solo"] = []
    with pytest.raises(BackendUnavailable):
        await activator.upstream(SOLO)
    assert reported(activator) == {}, "no demand is reported for a service that never sleeps"


async def test_a_service_scaled_to_zero_holds_the_request_reports_it_and_answers_once_up() -> None:
    view = standalone(scaled_to_zero=True)
    activator = new_activator(view, api(view))
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, SOLO, 1, answers)
        await until(lambda: activator.held == 1)
        assert reported(activator) == {"solo": (1, False)}, "the held request is its demand"
        # The operator saw the demand: the service is scaled up and its pod is ready.
        view.isvcs["solo"]["status"] = {"phase": "Ready"}
        view.urls["solo"] = [URL]
        activator.notifier.notify()
        await until(lambda: len(answers) == 1)
    assert answers == [URL]
    assert activator.held == 0
    assert activator.history.expected(STANDALONE_REPORTS, "solo") is not None, "its wake learnt"


async def test_a_service_being_scaled_to_zero_gets_no_new_request() -> None:
    """``status.scaledToZero`` with its pod still ready: the pod is about to stop, so a request
    is held (and reported: demand, which ends the scale to zero), never forwarded to it."""
    view = standalone()
    view.isvcs["solo"]["status"]["scaledToZero"] = True
    activator = new_activator(view, api(view))
    answers: list[str] = []
    async with running(activator) as group:
        ask_many(group, activator, SOLO, 1, answers)
        await until(lambda: activator.held == 1)
        await anyio.sleep(0.1)
        assert answers == [], "forwarded to a pod about to stop"
        view.isvcs["solo"]["status"].pop("scaledToZero")  # the demand ended it
        activator.notifier.notify()
        await until(lambda: len(answers) == 1)
    assert answers == [URL]


async def test_a_request_in_flight_is_reported_as_activity() -> None:
    view = standalone()
    activator = new_activator(view, api(view))
    assert await activator.upstream(SOLO) == URL
    release = activator.inflight.track("solo")
    assert reported(activator) == {"solo": (0, True)}
    release()


async def test_past_the_budget_a_held_request_is_503_with_retry_after() -> None:
    view = standalone(scaled_to_zero=True)
    activator = new_activator(view, api(view), scale_from_zero_budget=0.2)
    async with running(activator):
        with pytest.raises(ActivationTimeout) as refused:
            await activator.upstream(SOLO)
    assert refused.value.status == 503
    assert int(refused.value.headers()["Retry-After"]) >= 1
    assert "spec.idleAfter" in refused.value.message
    assert activator.held == 0
    assert reported(activator) == {}, "a request answered leaves the report"


def api(view: FakeView) -> FakeApi:
    assert view.api is not None
    return view.api
