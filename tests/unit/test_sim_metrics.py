"""The simulator's ``/metrics``: llama-server's families, served only with ``--metrics``.

Members run with ``--metrics`` and a PodMonitor scrapes them, so the simulator playing one answers
``/metrics`` as llama-server does: 503 while loading, 501 without the flag, else Prometheus text
whose counters count what the server did. The same families and types as the real server's are
checked against it in ``tests/e2e/test_llamacpp_contract.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from controlplane.sim.app import build_app
from controlplane.sim.metrics import COUNTERS, GAUGES, ServerMetrics, number, parse_text
from controlplane.sim.model import SimulatedModel
from controlplane.sim.settings import SimSettings
from controlplane.sim.testing import GatedClock, ManualClock, wait_until

pytestmark = pytest.mark.anyio

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


@asynccontextmanager
async def serving(model: SimulatedModel) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(model))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        yield client


def loaded(clock: ManualClock | None = None, **settings: Any) -> SimulatedModel:
    model = SimulatedModel(SimSettings(metrics_endpoint=True, **settings), clock or ManualClock())
    model.mark_loaded()
    return model


async def post_chat(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    return {name: value for name, (_, value) in parse_text(response.text).items()}


async def test_metrics_is_503_while_loading_and_501_without_the_flag() -> None:
    model = SimulatedModel(SimSettings(), ManualClock())
    async with serving(model) as client:
        loading = await client.get("/metrics")
        assert loading.status_code == 503
        model.mark_loaded()
        disabled = await client.get("/metrics")
    assert disabled.status_code == 501
    assert disabled.json() == {
        "error": {
            "code": 501,
            "message": "This server does not support metrics endpoint. Start it with `--metrics`",
            "type": "not_supported_error",
        }
    }


async def test_metrics_lists_llama_servers_families_in_its_order_as_prometheus_text() -> None:
    async with serving(loaded()) as client:
        response = await client.get("/metrics")
    assert response.headers["content-type"] == "text/plain; version=0.0.4"
    assert int(response.headers["process-start-time-unix"]) > 0
    families = parse_text(response.text)
    expected = [(f"llamacpp:{name}", "counter") for name, _ in COUNTERS] + [
        (f"llamacpp:{name}", "gauge") for name, _ in GAUGES
    ]
    assert [(name, kind) for name, (kind, _) in families.items()] == expected
    assert all(value == 0 for _, value in families.values())


async def test_completions_are_counted_as_llama_server_counts_them() -> None:
    async with serving(loaded(reply_tokens=8)) as client:
        for _ in range(2):
            assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        values = await scrape(client)
    assert values["llamacpp:tokens_predicted_total"] == 16
    # The second prompt starts with what the slot holds: those tokens count as cached only.
    prompt, cached = (
        values["llamacpp:prompt_tokens_total"],
        values["llamacpp:prompt_tokens_cached_total"],
    )
    assert cached > 0
    assert prompt + cached == 2 * 6  # "hello there": 2 words + 4 for the chat template
    assert values["llamacpp:n_decode_total"] == 2 * (1 + 8)
    assert values["llamacpp:n_tokens_max"] == 6 + 8
    assert values["llamacpp:tokens_predicted_seconds_total"] > 0


async def test_throughput_is_averaged_over_the_window_since_the_previous_scrape() -> None:
    async with serving(loaded(reply_tokens=4, token_seconds=0.5)) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        first = await scrape(client)
        second = await scrape(client)
    assert first["llamacpp:predicted_tokens_seconds"] == pytest.approx(2.0)
    assert second["llamacpp:predicted_tokens_seconds"] == 0
    assert second["llamacpp:tokens_predicted_total"] == 4


async def test_requests_processing_and_deferred_are_the_slots_now() -> None:
    clock = GatedClock()
    model = loaded(clock, slots=1, reply_tokens=1)
    async with serving(model) as client, anyio.create_task_group() as group:
        for _ in range(2):
            group.start_soon(post_chat, client)
        await wait_until(lambda: clock.blocked == 1 and model.waiting == 1)
        values = await scrape(client)
        clock.open()
    assert (values["llamacpp:requests_processing"], values["llamacpp:requests_deferred"]) == (1, 1)


@pytest.mark.parametrize(
    ("value", "text"), [(0, "0"), (12, "12"), (2.3715123, "2.37151"), (1e6, "1e+06")]
)
def test_numbers_are_written_as_cpp_writes_a_double(value: float, text: str) -> None:
    assert number(value) == text


def test_render_starts_a_new_window_and_keeps_the_counters() -> None:
    metrics = ServerMetrics()
    metrics.record(prompt=10, cached=4, predicted=3, seconds=1.5, busy=2)
    first = metrics.render(processing=0, deferred=0)
    assert "llamacpp:prompt_tokens_total 6\n" in first
    assert "llamacpp:predicted_tokens_seconds 2\n" in first
    assert "llamacpp:n_busy_slots_per_decode 2\n" in first
    second = metrics.render(processing=0, deferred=0)
    assert "llamacpp:predicted_tokens_seconds 0\n" in second
    assert "llamacpp:tokens_predicted_total 3\n" in second
