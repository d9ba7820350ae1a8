"""The swap driver's own readiness probes: ``/health`` of a pod, ``/models`` of a slot server."""

from __future__ import annotations

import httpx
import msgspec
import pytest

from controlplane.probes.health import HealthProbe

pytestmark = pytest.mark.anyio


def serving(status: int, body: bytes) -> HealthProbe:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    return HealthProbe(httpx.AsyncClient(transport=httpx.MockTransport(answer)))


def models(**statuses: str) -> bytes:
    data = [{"id": name, "status": {"value": value}} for name, value in statuses.items()]
    return msgspec.json.encode({"data": data, "object": "list"})


@pytest.mark.parametrize(
    ("status", "body", "loaded"),
    [
        (200, models(qwen="loaded", llama="unloaded"), True),
        (200, models(qwen="loading"), False),
        (200, models(llama="loaded"), False),  # another model: not ours
        (500, models(qwen="loaded"), False),  # an answer that proves nothing
        (200, b"not json", False),
    ],
)
async def test_a_slot_servers_model_is_loaded_only_when_models_says_so(
    status: int, body: bytes, loaded: bool
) -> None:
    probe = serving(status, body)
    try:
        assert await probe.model_loaded("http://10.0.0.9:8080", "qwen") is loaded
    finally:
        await probe.aclose()
