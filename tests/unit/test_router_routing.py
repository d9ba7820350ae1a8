"""Routing (model -> backend/member), request validation and error bodies of the router-proxy."""

from __future__ import annotations

import copy
import gzip
import re
import zlib
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from controlplane.router.activator import Activator
from controlplane.router.app import ProxyContext, build_app
from controlplane.router.errors import (
    MEMBER_ERROR_CODE,
    ActivationTimeout,
    InvalidRequest,
    LeaseUnavailable,
    ModelNotFound,
    PoolBusy,
    ProxyNotReady,
    member_error_body,
)
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.routing import (
    Route,
    RoutingTable,
    parse_duration,
    resolve,
    routed_pools,
    routing_table,
    validate_body,
)
from controlplane.router.upstream_httpx import HttpxUpstream
from controlplane.runtime.metrics import REGISTRY
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


def test_the_kept_table_serves_until_invalidated_and_the_default_follows_the_resident() -> None:
    isvcs = dict(ISVCS)
    pools = {"gpu-0": POOLS["gpu-0"]}
    table = RoutingTable(lambda: ROUTER, pools.get, isvcs.get)
    assert table.resolve("qwen-2-7b") == Route("qwen-2-7b", "b", "gpu-0")
    isvcs["b"] = {"spec": {"model": {"name": "qwen-3"}}}
    assert table.resolve("qwen-2-7b") == Route("qwen-2-7b", "b", "gpu-0")  # kept
    table.invalidate()  # what the proxy does on an InferenceService event
    assert table.resolve("qwen-3") == Route("qwen-3", "b", "gpu-0")
    with pytest.raises(ModelNotFound):
        table.resolve("qwen-2-7b")
    pools["gpu-0"] = {**POOLS["gpu-0"], "status": {"residentMember": "a"}}
    assert table.resolve(None) == Route("llama-3-8b", "a", "gpu-0")  # never kept


def test_no_router_in_the_cache_is_not_ready() -> None:
    with pytest.raises(ProxyNotReady):
        RoutingTable(lambda: None, POOLS.get, ISVCS.get).resolve("qwen-2-7b")


def test_no_model_and_no_default_is_400() -> None:
    router = {"spec": {"backends": ROUTER["spec"]["backends"]}}
    with pytest.raises(InvalidRequest):
        resolve(None, router, POOLS.get, ISVCS.get)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b"{not json", "parse"),
        (b"[1, 2]", "JSON object"),
        (b'"text"', "JSON object"),
        (b'{"messages": "hi"}', "`messages`"),
        (b'{"model": 3, "messages": [{"role": "user"}]}', "`model`"),
        (b'{"model": "m"}', "`messages`"),  # a cross-model request with nothing to answer
        (b'{"model": "m", "messages": []}', "`messages`"),
        (b'{"model": "m", "messages": ["hi"]}', "`messages[0]`"),
        (b'{"model": "m", "messages": [{"role": "user"}], "stream": "yes"}', "`stream`"),
    ],
)
def test_malformed_bodies_are_invalid_and_the_error_names_what_is_wrong(
    raw: bytes, named: str
) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(named)):
        validate_body(raw)


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/v1/completions", b'{"model": "m"}', "`prompt`"),
        ("/v1/completions", b'{"model": "m", "prompt": 3}', "`prompt`"),
        ("/v1/embeddings", b'{"model": "m"}', "`input`"),
    ],
)
def test_each_path_requires_its_own_field(path: str, body: bytes, named: str) -> None:
    with pytest.raises(InvalidRequest, match=named):
        validate_body(body, path)


CHAT_HEAD = b'{"model": "qwen-2-7b", "messages": [{"role": "user", "content": "hi"}], "x": '


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (CHAT_HEAD + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than 64"),
        (CHAT_HEAD + b"[" * 65 + b"]" * 65 + b"}", "nested deeper than 64"),
        (b'{"model": "qwen-2-7b", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "UTF-8"),
    ],
    ids=["100000-deep", "65-deep", "not-utf8"],
)
async def test_client_bytes_no_parser_takes_are_400_naming_why_never_500(
    raw: bytes, named: str
) -> None:
    """A body nested past the interpreter's recursion limit, one past ``--max-json-depth`` and
    one that is not UTF-8 were 500s (the decoder's RecursionError and UnicodeDecodeError)."""
    async with _client(max_body_bytes=len(raw)) as client:
        response = await client.post("/v1/chat/completions", content=raw)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert named in error["message"]
    assert set(error) == {"message", "type", "code"}


def test_a_body_as_deep_as_the_limit_passes() -> None:
    deep = CHAT_HEAD + b"[" * 63 + b"]" * 63 + b"}"  # 64 levels with the outer object
    assert validate_body(deep, max_depth=64)["model"] == "qwen-2-7b"
    with pytest.raises(InvalidRequest, match="deeper than 63"):
        validate_body(deep, max_depth=63)


def test_good_bodies_pass() -> None:
    chat = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
    assert validate_body(chat)["stream"] is True
    assert validate_body(b'{"prompt": "hi"}', "/v1/completions") == {"prompt": "hi"}
    assert validate_body(b'{"input": ["a"]}', "/v1/embeddings") == {"input": ["a"]}


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


def _client(
    ready: bool = True,
    api: FakeApi | None = None,
    member: httpx.MockTransport | None = None,
    tracing: bool = True,
    max_body_bytes: int = 1024,
) -> httpx.AsyncClient:
    """The proxy app in-process (no socket), as the simulator's unit tests drive theirs. Its
    activator is not running: a request that got as far as being held would fail loudly. The
    backend ``solo`` is served by ``member`` (a fake upstream), when given."""
    view = FakeView()
    view.urls["solo-isvc"] = ["http://member"]
    api = api or FakeApi()
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), "ns")
    context = ProxyContext(
        lambda: ROUTER,
        POOLS.get,
        ISVCS.get,
        lambda: [] if ready else ["caches not synced"],
        max_body_bytes=max_body_bytes,
        tracing=tracing,
    )
    app = build_app(context, activator, HttpxUpstream(member or httpx.AsyncHTTPTransport()))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")


def _answered(code: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "modelpool_proxy_requests_total", {"model": "-", "code": code, "reason": reason}
    )
    return value or 0.0


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
async def test_an_invalid_body_for_a_parked_member_is_400_and_never_moves_the_slot() -> None:
    """``llama-3-8b`` (member a) is parked; a body without ``messages`` used to be held, force
    the swap, and only then get the member's 400."""
    api = FakeApi()
    before = _answered("400", "invalid_request")
    async with _client(api=api) as client:
        response = await client.post("/v1/chat/completions", json={"model": "llama-3-8b"})
    assert response.status_code == 400
    assert "`messages`" in response.json()["error"]["message"]
    assert api.calls == 0, "the slot was moved for a bad request"
    assert _answered("400", "invalid_request") == before + 1


@pytest.mark.anyio
@pytest.mark.parametrize("chunked", [False, True])
async def test_an_oversized_body_is_413_before_it_is_read_whole(chunked: bool) -> None:
    api = FakeApi()
    body = b'{"model": "llama-3-8b", "messages": [{"role": "user", "content": "' + b"x" * 4096
    body += b'"}]}'

    async def stream() -> Any:
        for i in range(0, len(body), 512):
            yield body[i : i + 512]

    async with _client(api=api) as client:
        content: Any = stream() if chunked else body
        response = await client.post("/v1/chat/completions", content=content)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert "1024 bytes" in response.json()["error"]["message"]
    assert api.calls == 0


@pytest.mark.anyio
async def test_http_unknown_model_is_404() -> None:
    async with _client() as client:
        body = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
        response = await client.post("/v1/chat/completions", json=body)
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


def _shape(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    assert {"message", "type", "code"} <= set(error)
    assert all(isinstance(error[key], str) for key in ("message", "type", "code"))
    return error


@pytest.mark.anyio
async def test_an_unknown_path_is_a_json_404() -> None:
    async with _client() as client:
        response = await client.get("/v2/nothing")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    error = _shape(response)
    assert (error["type"], error["code"]) == ("invalid_request_error", "not_found")
    assert "/v2/nothing" in error["message"]


@pytest.mark.anyio
async def test_a_wrong_method_is_a_json_405_with_allow() -> None:
    async with _client() as client:
        response = await client.get("/v1/chat/completions")
        models = await client.post("/v1/models")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert _shape(response)["code"] == "method_not_allowed"
    assert models.status_code == 405
    assert "GET" in models.headers["allow"]


class _Body(httpx.AsyncByteStream):
    """A body that arrives as a stream, as a real member's does (bytes would be pre-read)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> Any:
        yield self.body


def _member(status: int, body: bytes, content_type: str) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, stream=_Body(body), headers={"content-type": content_type})

    return httpx.MockTransport(answer)


CHAT = {"model": "solo", "messages": [{"role": "user", "content": "hi"}]}
LLAMA_CPP_400 = (
    b'{"error": {"code": 400, "message": "the request exceeds the available context size",'
    b' "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}'
)


@pytest.mark.anyio
async def test_a_member_s_json_error_gets_a_string_code_and_keeps_the_rest() -> None:
    async with _client(member=_member(400, LLAMA_CPP_400, "application/json")) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 400
    error = _shape(response)
    assert error == {
        "code": MEMBER_ERROR_CODE,
        "message": "the request exceeds the available context size",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 5000,
        "n_ctx": 4096,
    }


@pytest.mark.anyio
async def test_a_member_s_plain_text_error_becomes_the_message() -> None:
    async with _client(member=_member(500, b"Internal Server Error", "text/plain")) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 500
    error = _shape(response)
    assert (error["message"], error["type"]) == ("Internal Server Error", "server_error")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),  # zlib-wrapped, as the coding is defined
        ("deflate", lambda raw: zlib.compress(raw)[2:-4]),  # raw deflate, as some servers send
    ],
)
async def test_a_member_s_compressed_error_is_decoded_before_it_is_rewritten(
    encoding: str, encode: Callable[[bytes], bytes]
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/json", "content-encoding": encoding}
        return httpx.Response(400, stream=_Body(encode(LLAMA_CPP_400)), headers=headers)

    async with _client(member=httpx.MockTransport(answer)) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 400
    assert "content-encoding" not in response.headers
    assert _shape(response)["message"] == "the request exceeds the available context size"


@pytest.mark.anyio
async def test_a_member_s_error_in_an_unknown_coding_is_passed_as_text() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/plain", "content-encoding": "br"}
        return httpx.Response(502, stream=_Body(b"\x8b\x00not brotli"), headers=headers)

    async with _client(member=httpx.MockTransport(answer)) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 502
    assert _shape(response)["type"] == "server_error"


@pytest.mark.anyio
async def test_success_bodies_and_event_streams_pass_untouched() -> None:
    ok = b'{"choices": [], "code": 7}'
    stream = b'data: {"error": {"code": 500, "message": "x"}}\n\n'
    async with _client(member=_member(200, ok, "application/json")) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).content == ok
    async with _client(member=_member(500, stream, "text/event-stream")) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).content == stream


@pytest.mark.anyio
@pytest.mark.parametrize("tracing", [True, False])
async def test_a_small_sized_answer_is_sent_whole_with_its_headers(tracing: bool) -> None:
    ok = b'{"choices": []}'
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        headers = {"content-type": "application/json", "content-length": str(len(ok))}
        return httpx.Response(200, stream=_Body(ok), headers={**headers, "x-private": "1"})

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with _client(member=httpx.MockTransport(answer), tracing=tracing) as client:
        response = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"traceparent": parent, "x-other": "no"}
        )
    assert response.content == ok
    assert response.headers["content-length"] == str(len(ok))
    assert response.headers["content-type"] == "application/json"
    assert "x-private" not in response.headers
    assert "x-other" not in seen[0].headers
    # The member's request carries the client's trace (untraced: the very same parent span).
    sent = seen[0].headers["traceparent"]
    assert sent.split("-")[1] == parent.split("-")[1]
    if not tracing:
        assert sent == parent


def _pooled_proxy(
    member: httpx.MockTransport,
) -> tuple[httpx.AsyncClient, Activator, FakeView]:
    """The proxy with ``qwen-2-7b`` (member b of gpu-0) resident and Ready."""
    view = FakeView()
    view.pools["gpu-0"] = copy.deepcopy(POOLS["gpu-0"])
    view.isvcs.update(copy.deepcopy(ISVCS))
    view.make_resident("gpu-0", "b")
    api = FakeApi()
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), "ns")
    context = ProxyContext(lambda: ROUTER, view.pool, view.isvc, lambda: [], tracing=False)
    app = build_app(context, activator, HttpxUpstream(member))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")
    return client, activator, view


@pytest.mark.anyio
async def test_a_request_a_stopping_member_never_took_is_dispatched_again_after_a_change() -> None:
    calls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        if len(calls) == 1:
            view.urls["b"] = ["http://127.0.0.1:9201"]  # its endpoint changed meanwhile
            raise httpx.ConnectError("Can not write request body", request=request)
        return httpx.Response(200, stream=_Body(b"{}"), headers={"content-length": "2"})

    client, activator, view = _pooled_proxy(httpx.MockTransport(answer))
    chat = {"model": "qwen-2-7b", "messages": [{"role": "user", "content": "hi"}]}
    async with client:
        response = await client.post("/v1/chat/completions", json=chat)
    assert response.status_code == 200
    assert calls == [
        "http://127.0.0.1:9100/v1/chat/completions",
        "http://127.0.0.1:9201/v1/chat/completions",
    ]
    assert activator.inflight.count("b") == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "calls_expected", "code"),
    [
        # it may have taken the request: not sent again
        (httpx.RemoteProtocolError("Server disconnected"), 1, "upstream_disconnected"),
        # the first send and two more, then 502
        (httpx.ConnectError("Connection refused"), 3, "upstream_error"),
        # nothing written either: sent again the same way
        (httpx.ConnectTimeout("Connection timeout"), 3, "upstream_error"),
    ],
)
async def test_a_member_that_took_the_request_or_stays_unreachable_is_a_502(
    error: httpx.HTTPError, calls_expected: int, code: str
) -> None:
    calls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        view.urls["b"] = [f"http://127.0.0.1:{9300 + len(calls)}"]  # a new endpoint each time
        raise error

    client, activator, view = _pooled_proxy(httpx.MockTransport(answer))
    chat = {"model": "qwen-2-7b", "messages": [{"role": "user", "content": "hi"}]}
    async with client:
        response = await client.post("/v1/chat/completions", json=chat)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == code
    assert len(calls) == calls_expected
    assert activator.inflight.count("b") == 0


@pytest.mark.parametrize(
    ("raw", "status", "expected"),
    [
        (b'{"error": {"code": "busy", "message": "m", "type": "t"}}', 503, ("m", "t", "busy")),
        (
            b'{"error": "slot unavailable"}',
            503,
            ("slot unavailable", "server_error", "member_error"),
        ),
        (b"", 404, ("the member answered 404", "invalid_request_error", "member_error")),
        (b"[1, 2]", 502, ("[1, 2]", "server_error", "member_error")),
        (
            b'{"error": {"message": 3, "type": null}}',
            500,
            ("the member answered 500", "server_error", "member_error"),
        ),
    ],
)
def test_member_error_bodies(raw: bytes, status: int, expected: tuple[str, str, str]) -> None:
    error = member_error_body(raw, status)["error"]
    assert (error["message"], error["type"], error["code"]) == expected


# -- never a second path to a pool member (issue 46) -----------------------------------------

#: A router whose ``inferenceServiceRef`` backends name member ``a`` of pool ``gpu-0`` and an
#: InferenceService no pool lists.
AROUND: Object = {
    "spec": {
        "backends": [
            {"name": "direct-a", "inferenceServiceRef": {"name": "a"}},
            {"name": "solo", "inferenceServiceRef": {"name": "solo-isvc"}},
        ],
        "defaultBackend": "direct-a",
    }
}


def holder(member: str) -> str | None:
    """The namespace's claims: ``a`` and ``b`` held by ``gpu-0``."""
    return "gpu-0" if member in ("a", "b") else None


def test_an_isvc_backend_naming_a_pool_member_is_routed_through_its_pool() -> None:
    table = routing_table(AROUND, POOLS.get, ISVCS.get, holder)
    assert table["direct-a"] == Route("direct-a", "a", "gpu-0")
    assert table["solo"] == Route("solo", "solo-isvc")  # no pool lists it: alone, as before
    assert resolve("direct-a", AROUND, POOLS.get, ISVCS.get, holder).pool == "gpu-0"


def test_the_default_backend_naming_a_pool_member_goes_through_its_pool_too() -> None:
    assert resolve(None, AROUND, POOLS.get, ISVCS.get, holder) == Route("direct-a", "a", "gpu-0")
    table = RoutingTable(lambda: AROUND, POOLS.get, ISVCS.get, holder)
    assert table.resolve(None) == Route("direct-a", "a", "gpu-0")
    assert table.resolve("direct-a") == Route("direct-a", "a", "gpu-0")


def test_the_pool_of_such_a_backend_is_reported_to() -> None:
    # The pool's fenced drain waits for every replica that may forward to its members: one that
    # reaches member a by an inferenceServiceRef must report to gpu-0 as well.
    assert routed_pools(AROUND, holder) == {"gpu-0"}
    assert routed_pools(ROUTER, holder) == {"gpu-0"}
    assert routed_pools(AROUND, lambda _: None) == set()


@pytest.mark.anyio
async def test_a_request_for_such_a_backend_is_not_sent_to_the_member_its_pool_drains() -> None:
    # Through the app: the pool has closed admission to a (it drains it), so the request for
    # "direct-a" is not sent to a's endpoint; forwarded around the pool, it was.
    view = FakeView()
    view.pools["gpu-0"] = {
        "metadata": {"name": "gpu-0"},
        "spec": {"members": [{"inferenceServiceRef": {"name": "a"}}], "swapBudget": "1s"},
        "status": {"residentMember": "a", "admissionClosed": ["a"], "admissionGeneration": 1},
    }
    view.isvcs["a"] = {"spec": {}, "status": {"phase": "Ready"}}
    view.urls["a"] = ["http://a.invalid"]
    activator = Activator(view, LeaseCoordinator(FakeApi(), "ns", "me"), "ns")
    context = ProxyContext(
        lambda: AROUND, view.pool, view.isvc, lambda: [], tracing=False, member_pool=holder
    )
    sent: list[httpx.Request] = []

    def member(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"choices": []})

    app = build_app(context, activator, HttpxUpstream(httpx.MockTransport(member)))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy"
    ) as client:
        answer = await client.post(
            "/v1/chat/completions",
            json={"model": "direct-a", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert sent == []
    assert answer.status_code == 503, answer.text
