"""Routing (model -> backend/member), request validation and error bodies of the router-proxy."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from controlplane.router.activator import Activator
from controlplane.router.app import ProxyContext, build_app
from controlplane.router.errors import (
    ActivationTimeout,
    InvalidRequest,
    LeaseUnavailable,
    ModelNotFound,
    PoolBusy,
)
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.routing import Route, parse_duration, resolve, routing_table, validate_body
from tests.unit.router_fakes import FakeApi, FakeView

Object = dict[str, Any]

ROUTER: Object = {
    "spec": {
        "backends": [
            {"name": "solo", "inferenceServiceRef": {"name": "solo-isvc"}},
            {"name": "gpu", "poolRef": {"name": "gpu-0"}},
        ],
        "defaultBackend": "gpu",
    }
}
POOLS: dict[str, Object] = {
    "gpu-0": {
        "spec": {
            "members": [
                {"inferenceServiceRef": {"name": "a"}},
                {"inferenceServiceRef": {"name": "b"}},
            ],
            "default": "a",
        },
        "status": {"residentMember": "b"},
    }
}
ISVCS: dict[str, Object] = {
    "a": {"spec": {"model": {"name": "llama-3-8b"}}},
    "b": {"spec": {"model": {"name": "qwen-2-7b"}}},
}


def test_table_maps_backend_names_and_pool_member_models() -> None:
    table = routing_table(ROUTER, POOLS.get, ISVCS.get)
    assert table == {
        "solo": Route("solo", "solo-isvc"),
        "llama-3-8b": Route("llama-3-8b", "a", "gpu-0"),
        "qwen-2-7b": Route("qwen-2-7b", "b", "gpu-0"),
    }


def test_member_without_isvc_is_served_under_its_own_name() -> None:
    assert routing_table(ROUTER, POOLS.get, lambda _: None)["a"] == Route("a", "a", "gpu-0")


def test_unknown_model_is_404() -> None:
    with pytest.raises(ModelNotFound):
        resolve("gpt-4", ROUTER, POOLS.get, ISVCS.get)


def test_no_model_takes_the_default_backend_resident_member() -> None:
    assert resolve(None, ROUTER, POOLS.get, ISVCS.get) == Route("qwen-2-7b", "b", "gpu-0")


def test_no_model_and_no_default_is_400() -> None:
    router = {"spec": {"backends": ROUTER["spec"]["backends"]}}
    with pytest.raises(InvalidRequest):
        resolve(None, router, POOLS.get, ISVCS.get)


@pytest.mark.parametrize(
    "raw", [b"{not json", b"[1, 2]", b'"text"', b'{"messages": "hi"}', b'{"model": 3}']
)
def test_malformed_bodies_are_invalid(raw: bytes) -> None:
    with pytest.raises(InvalidRequest):
        validate_body(raw)


def test_a_good_body_passes() -> None:
    assert validate_body(b'{"model": "m", "messages": []}') == {"model": "m", "messages": []}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300s", 300),
        ("5m", 300),
        ("1h30m", 5400),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        (None, 7),
        ("x", 7),
    ],
)
def test_durations(text: str | None, seconds: float) -> None:
    assert parse_duration(text, 7) == seconds


def test_503_errors_carry_retry_after_and_their_reason() -> None:
    for error, code in (
        (ActivationTimeout("t"), "pool_activation_timeout"),
        (PoolBusy("b"), "pool_busy"),
        (LeaseUnavailable("l"), "pool_lease_unavailable"),
    ):
        assert error.status == 503
        assert "Retry-After" in error.headers()
        assert error.body()["error"]["code"] == code
        assert set(error.body()["error"]) == {"message", "type", "code"}


def _client(ready: bool = True) -> httpx.AsyncClient:
    """The proxy app in-process (no socket), as the simulator's unit tests drive theirs."""
    view = FakeView()
    api = FakeApi()
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), api, "ns")
    context = ProxyContext(
        lambda: ROUTER, POOLS.get, ISVCS.get, lambda: [] if ready else ["caches not synced"]
    )
    app = build_app(context, activator, httpx.AsyncClient())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")


@pytest.mark.anyio
@pytest.mark.parametrize("raw", [b"{oops", b"[]", b'{"model": "qwen-2-7b", "messages": {}}'])
async def test_http_400_is_an_openai_error(raw: bytes) -> None:
    async with _client() as client:
        response = await client.post("/v1/chat/completions", content=raw)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "code"}


@pytest.mark.anyio
async def test_http_unknown_model_is_404() -> None:
    async with _client() as client:
        response = await client.post("/v1/chat/completions", json={"model": "nope", "messages": []})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


@pytest.mark.anyio
async def test_http_not_ready_is_503_and_readyz_says_why() -> None:
    async with _client(ready=False) as client:
        response = await client.post("/v1/chat/completions", json={"model": "a"})
        assert response.status_code == 503
        assert (await client.get("/readyz")).status_code == 503
        assert (await client.get("/healthz")).status_code == 200


@pytest.mark.anyio
async def test_http_models_and_metrics() -> None:
    async with _client() as client:
        ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
        metrics = (await client.get("/metrics")).text
    assert ids == ["llama-3-8b", "qwen-2-7b", "solo"]
    assert "modelpool_proxy_requests_total" in metrics
