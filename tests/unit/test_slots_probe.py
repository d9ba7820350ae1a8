"""llama.cpp's idle probe: every shape ``/slots`` can answer, and the probe's own failures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from controlplane.probes import llamacpp
from controlplane.probes.idle import IdleOutcome, IdleReport
from controlplane.probes.llamacpp import SlotsProbe, read_slots
from controlplane.sim.app import build_app
from controlplane.sim.model import SimulatedModel
from controlplane.sim.settings import SimSettings, SlotsMode
from controlplane.sim.testing import GatedClock, ManualClock, wait_until

IDLE, BUSY, FAILED = IdleOutcome.IDLE, IdleOutcome.BUSY, IdleOutcome.FAILED


def body(value: Any) -> bytes:
    return msgspec.json.encode(value)


def slot(**fields: Any) -> dict[str, Any]:
    return {"id": 0, "n_ctx": 4096, **fields}


@pytest.mark.parametrize(
    ("status", "payload", "outcome", "detail"),
    [
        (200, body([slot(is_processing=False), slot(is_processing=False)]), IDLE, "2 slot(s) idle"),
        (
            200,
            body([slot(is_processing=True), slot(is_processing=False)]),
            BUSY,
            "1 of 2 slot(s) processing",
        ),
        # an older server: state 0 idle, 1 processing
        (200, body([slot(state=0), slot(state=0)]), IDLE, "2 slot(s) idle"),
        (200, body([slot(state=0), slot(state=1)]), BUSY, "1 of 2 slot(s) processing"),
        # is_processing is read first when both are there
        (200, body([slot(is_processing=False, state=1)]), IDLE, "1 slot(s) idle"),
        # not such an array
        (200, body({"slots": []}), FAILED, "JSON an object, not an array"),
        (200, body("idle"), FAILED, "JSON a string, not an array"),
        (200, body(None), FAILED, "JSON null, not an array"),
        (200, body([]), FAILED, "an empty array"),
        (200, b"<html>ok</html>", FAILED, "not JSON"),
        (200, body([slot(is_processing=False), "busy"]), FAILED, "slot 1 is not an object"),
        (200, body([slot(id_task=-1)]), FAILED, "slot 0 has neither is_processing nor state"),
        (200, body([slot(is_processing="false")]), FAILED, "is_processing is 'false'"),
        (200, body([slot(state="0")]), FAILED, "state is '0'"),
        (200, body([slot(state=False)]), FAILED, "state is False"),
        # any other status, including llama-server's --no-slots 501 and its loading 503
        (500, body({"error": {"code": 500}}), FAILED, "/slots answered 500"),
        (
            501,
            body({"error": {"code": 501, "type": "not_supported_error"}}),
            FAILED,
            "/slots answered 501",
        ),
        (503, body({"error": {"code": 503}}), FAILED, "/slots answered 503"),
        (404, b"", FAILED, "/slots answered 404"),
    ],
)
def test_read_slots(status: int, payload: bytes, outcome: IdleOutcome, detail: str) -> None:
    report = read_slots(status, payload)
    assert report.outcome is outcome
    assert detail in report.detail
    # a 200 says the server is up, whatever its body proves (a starting member is judged on it)
    assert report.answered is (status == 200)


def test_busy_and_idle_reports_count_the_slots() -> None:
    busy = read_slots(200, body([slot(is_processing=True), slot(is_processing=True)]))
    assert (busy.slots, busy.processing) == (2, 2)
    idle = read_slots(200, body([slot(state=0)]))
    assert (idle.slots, idle.processing) == (1, 0)


# -- the probe over HTTP ---------------------------------------------------------------------------

Handler = Callable[[httpx.Request], Any]


@asynccontextmanager
async def probe_with(handler: Handler, timeout: float = 2.0) -> AsyncIterator[SlotsProbe]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    probe = SlotsProbe(client, timeout=timeout)
    try:
        yield probe
    finally:
        await probe.aclose()


@pytest.mark.anyio
async def test_the_probe_gets_slots_of_the_base_url() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json=[slot(is_processing=False)])

    async with probe_with(handler) as probe:
        report = await probe.probe("http://10.0.0.7:8080/", member="a")
    assert report == IdleReport(IDLE, "1 slot(s) idle", slots=1, answered=True)
    assert seen == ["http://10.0.0.7:8080/slots"]


@pytest.mark.anyio
async def test_a_server_that_does_not_answer_in_time_is_failed_not_idle() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(10)
        return httpx.Response(200, json=[slot(is_processing=False)])

    async with probe_with(handler, timeout=0.05) as probe:
        with anyio.fail_after(5):
            report = await probe.probe("http://a:1")
    assert report.outcome is FAILED
    assert report.detail == "/slots did not answer within 0.05 s"


@pytest.mark.anyio
async def test_a_refused_connection_is_failed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with probe_with(handler) as probe:
        report = await probe.probe("http://a:1")
    assert report.outcome is FAILED
    assert "ConnectError" in report.detail


@pytest.mark.anyio
async def test_an_oversized_body_is_failed() -> None:
    huge = b"[" + b",".join([b'{"is_processing": false}'] * 60_000) + b"]"
    assert len(huge) > llamacpp.MAX_SLOTS_BODY_BYTES

    async with probe_with(lambda request: httpx.Response(200, content=huge)) as probe:
        report = await probe.probe("http://a:1")
    assert report.outcome is FAILED
    assert "more than" in report.detail


@pytest.mark.anyio
async def test_each_probe_is_a_span_with_member_and_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(llamacpp, "tracer", provider.get_tracer("test"))
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(500)

    async with probe_with(answer) as probe:
        await probe.probe("http://a:1", member="llama")
    (span,) = exporter.get_finished_spans()
    assert span.name == "slots probe"
    attributes = dict(span.attributes or {})
    assert (
        attributes["modelpool.member"],
        attributes["modelpool.outcome"],
        attributes["url.full"],
        attributes["http.request.method"],
        attributes["http.response.status_code"],
    ) == ("llama", "failed", "http://a:1/slots", "GET", 500)
    # The member's request carries the probe span's context.
    traceparent = seen[0].headers["traceparent"]
    assert traceparent.split("-")[2] == format(span.context.span_id, "016x")


# -- the probe against the simulator, in-process ---------------------------------------------------


@asynccontextmanager
async def simulator(model: SimulatedModel) -> AsyncIterator[SlotsProbe]:
    transport = httpx.ASGITransport(app=build_app(model))
    probe = SlotsProbe(httpx.AsyncClient(transport=transport), timeout=2.0)
    try:
        yield probe
    finally:
        await probe.aclose()


def loaded(clock: ManualClock | None = None, **settings: Any) -> SimulatedModel:
    model = SimulatedModel(SimSettings(**settings), clock or ManualClock())
    model.mark_loaded()
    return model


async def chat(probe: SlotsProbe) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    response = await probe._client.post("http://sim/v1/chat/completions", json=request)
    assert response.status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("legacy", [False, True])
async def test_the_simulator_is_busy_while_a_completion_holds_a_slot_then_idle(
    legacy: bool,
) -> None:
    clock = GatedClock()
    model = loaded(clock, slots=2, legacy_slots=legacy)
    async with simulator(model) as probe, anyio.create_task_group() as group:
        group.start_soon(chat, probe)
        await wait_until(lambda: clock.blocked == 1)  # generating its first token
        busy = await probe.probe("http://sim")
        clock.open()
    async with simulator(model) as probe:
        idle = await probe.probe("http://sim")
    assert (busy.outcome, busy.detail) == (BUSY, "1 of 2 slot(s) processing")
    assert (idle.outcome, idle.detail) == (IDLE, "2 slot(s) idle")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("settings", "detail"),
    [
        ({"slots_mode": SlotsMode.ERROR500}, "/slots answered 500"),
        ({"slots_mode": SlotsMode.MALFORMED}, "not an array"),
        ({"slots_endpoint": False}, "/slots answered 501"),
    ],
)
async def test_the_simulators_failure_modes_are_failed(
    settings: dict[str, Any], detail: str
) -> None:
    async with simulator(loaded(**settings)) as probe:
        report = await probe.probe("http://sim")
    assert report.outcome is FAILED
    assert detail in report.detail


@pytest.mark.anyio
async def test_a_simulator_still_loading_is_failed() -> None:
    model = SimulatedModel(SimSettings(load_seconds=3), ManualClock())
    async with simulator(model) as probe:
        report = await probe.probe("http://sim")
    assert (report.outcome, report.detail) == (FAILED, "/slots answered 503")
