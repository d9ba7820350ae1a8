"""The router-proxy's API keys: the pure check, the keys' folder, and the app's 401s."""

from __future__ import annotations

import argparse
import hmac
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane.router.activator import Activator
from controlplane.router.apikeyfiles import ApiKeyDirError, ApiKeyFiles, read_key_dir
from controlplane.router.apikeys import ApiKeys, Verdict, check, parse_keys, refusal
from controlplane.router.app import ProxyContext, build_app
from controlplane.router.command import add_arguments, settings_from
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.upstream_httpx import HttpxUpstream
from controlplane.runtime.metrics import REGISTRY
from controlplane.standin.secretvolumes import write_atomically
from tests.unit.router_fakes import FakeApi, FakeView
from tests.unit.test_router_routing import ISVCS, POOLS, ROUTER, _Body

KEY = "sk-modelpool-7f3c9a1e5b2d4f60"
OTHER = "sk-modelpool-rotated-0a1b2c3d"
CHAT = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}


def keys(*values: str) -> ApiKeys:
    return parse_keys({f"k{i}": v.encode() for i, v in enumerate(values)})[0]


def bearer(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", value.encode())]


# -- the pure check ---------------------------------------------------------------------------


def test_a_file_s_trailing_newline_is_not_part_of_the_key_and_bad_values_are_left_out() -> None:
    parsed, skipped = parse_keys(
        {"b": f"{KEY}\n".encode(), "a": b"", "c": b"two words", "d": "ключ".encode()}
    )
    assert parsed.names == ("b",)
    assert skipped == ["a", "c", "d"]
    assert check(parsed, bearer(f"Bearer {KEY}")) is Verdict.ACCEPTED
    assert KEY.encode() not in repr(parsed).encode()  # digests only, never the key


@pytest.mark.parametrize(
    ("headers", "verdict"),
    [
        ([], Verdict.MISSING),
        ([(b"x-api-key", KEY.encode())], Verdict.MISSING),  # only Authorization is read
        (bearer(f"Bearer {KEY}"), Verdict.ACCEPTED),
        (bearer(f"bearer   {KEY} "), Verdict.ACCEPTED),  # the scheme is case-insensitive
        (bearer(f"Bearer {OTHER}"), Verdict.WRONG),
        (bearer(f"Bearer {KEY}x"), Verdict.WRONG),
        (bearer(f"Basic {KEY}"), Verdict.MALFORMED),
        (bearer(KEY), Verdict.MALFORMED),
        (bearer("Bearer "), Verdict.MALFORMED),
        (bearer(f"Bearer {KEY}") + bearer(f"Bearer {KEY}"), Verdict.MALFORMED),
    ],
)
def test_verdicts(headers: list[tuple[bytes, bytes]], verdict: Verdict) -> None:
    assert check(keys(OTHER[:5] + "zz", KEY), headers) is verdict


def test_no_keys_accepts_nothing() -> None:
    assert check(ApiKeys(), bearer(f"Bearer {KEY}")) is Verdict.WRONG


def test_every_key_is_compared_even_after_a_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit: a match on the first key costs what a miss costs."""
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    three = keys(KEY, OTHER, "sk-third")
    assert three.accepts(KEY.encode())
    assert len(compared) == 3
    assert three.accepts(b"nope") is False
    assert len(compared) == 6
    assert {len(a) for pair in compared for a in pair} == {32}  # digests: equal lengths


@pytest.mark.parametrize("verdict", [Verdict.MISSING, Verdict.MALFORMED, Verdict.WRONG])
def test_refusals_are_openai_401s_that_say_what_was_wrong(verdict: Verdict) -> None:
    err = refusal(verdict)
    assert err.status == 401
    assert err.body() == {
        "error": {
            "message": err.message,
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    assert err.headers()["WWW-Authenticate"].startswith("Bearer")
    messages = {refusal(v).message for v in (Verdict.MISSING, Verdict.MALFORMED, Verdict.WRONG)}
    assert len(messages) == 3  # missing, malformed and wrong are told apart


# -- the keys' folder -------------------------------------------------------------------------


def test_the_kubelet_s_layout_is_read_and_its_own_entries_skipped(tmp_path: Path) -> None:
    write_atomically(tmp_path, {"client-a": KEY.encode(), "client-b": OTHER.encode()})
    assert {p.name for p in tmp_path.iterdir() if p.name.startswith("..")} >= {"..data"}
    assert read_key_dir(tmp_path) == {"client-a": KEY.encode(), "client-b": OTHER.encode()}


def test_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ApiKeyDirError, match="nowhere"):
        ApiKeyFiles(tmp_path / "nowhere")


@pytest.mark.anyio
async def test_a_reload_follows_the_secret_and_keeps_the_keys_when_the_folder_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    folder = tmp_path / "keys"
    write_atomically(folder, {"old": KEY.encode()})
    files = ApiKeyFiles(folder)
    assert check(files.current(), bearer(f"Bearer {OTHER}")) is Verdict.WRONG
    assert await files.reload() is False  # nothing changed
    write_atomically(folder, {"old": KEY.encode(), "new": OTHER.encode()})
    assert await files.reload() is True
    assert check(files.current(), bearer(f"Bearer {OTHER}")) is Verdict.ACCEPTED
    write_atomically(folder, {"new": OTHER.encode()})
    assert await files.reload() is True
    assert check(files.current(), bearer(f"Bearer {KEY}")) is Verdict.WRONG
    before = files.current()
    folder.rename(tmp_path / "gone")
    assert await files.reload() is False
    assert files.current() is before
    assert "API keys reloaded: 2 from" in caplog.text
    assert "(new, old)" in caplog.text
    assert KEY not in caplog.text
    assert OTHER not in caplog.text


def test_the_flags_have_defaults_and_a_missing_folder_is_refused(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from(parser.parse_args(["--router", "r"]))
    assert settings.api_keys_dir is None
    assert settings.api_keys_reload_seconds == 5.0
    given = ["--router", "r", "--api-keys-dir", str(tmp_path), "--api-keys-reload-interval", "1"]
    settings = settings_from(parser.parse_args(given))
    assert (settings.api_keys_dir, settings.api_keys_reload_seconds) == (tmp_path, 1.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--router", "r", "--api-keys-dir", str(tmp_path / "nowhere")])


# -- the app ----------------------------------------------------------------------------------


def _client(
    accepted: ApiKeys | None, api: FakeApi, member: httpx.MockTransport | None = None
) -> httpx.AsyncClient:
    """The proxy app in-process; ``llama-3-8b`` is member a of gpu-0, parked (a request for it
    that got past the check would claim the pool's Lease through ``api``); ``solo`` is
    ``member``."""
    view = FakeView()
    view.urls["solo-isvc"] = ["http://member"]
    activator = Activator(view, LeaseCoordinator(api, "ns", "me"), "ns")
    context = ProxyContext(
        lambda: ROUTER,
        POOLS.get,
        ISVCS.get,
        lambda: [],
        max_body_bytes=1024,
        api_keys=(lambda: accepted) if accepted is not None else None,
    )
    app = build_app(context, activator, HttpxUpstream(member or httpx.AsyncHTTPTransport()))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")


def _refused() -> float:
    labels = {"model": "-", "code": "401", "reason": "invalid_api_key"}
    return REGISTRY.get_sample_value("modelpool_proxy_requests_total", labels) or 0.0


def _echo(seen: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = b'{"choices": []}'
        return httpx.Response(200, stream=_Body(body), headers={"content-length": str(len(body))})

    return httpx.MockTransport(answer)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("headers", "said"),
    [({}, "No API key"), ({"authorization": f"Bearer {OTHER}"}, "not accepted")],
)
async def test_without_the_key_a_request_is_401_before_its_body_and_never_moves_the_slot(
    headers: dict[str, str], said: str
) -> None:
    api = FakeApi()
    before = _refused()
    too_big = {**CHAT, "padding": "x" * 4096}  # past --max-body-bytes: 413 if it were read
    async with _client(keys(KEY), api) as client:
        for body in (CHAT, too_big):
            response = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert response.status_code == 401, response.text
            assert said in response.json()["error"]["message"]
            assert response.json()["error"]["code"] == "invalid_api_key"
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert OTHER not in response.text
        models = await client.get("/v1/models", headers=headers)
        assert models.status_code == 401
        wrong_method = await client.get("/v1/chat/completions", headers=headers)
        assert wrong_method.status_code == 401
    assert api.calls == 0, "a request without the key moved the slot"
    assert _refused() == before + 4


@pytest.mark.anyio
async def test_with_the_key_it_is_served_and_the_key_is_not_passed_to_the_member() -> None:
    seen: list[httpx.Request] = []
    async with _client(keys(OTHER, KEY), FakeApi(), _echo(seen)) as client:
        auth = {"authorization": f"Bearer {KEY}"}
        response = await client.post(
            "/v1/chat/completions", json={**CHAT, "model": "solo"}, headers=auth
        )
        assert response.status_code == 200, response.text
        assert (await client.get("/v1/models", headers=auth)).status_code == 200
    assert "authorization" not in seen[0].headers


@pytest.mark.anyio
async def test_probes_and_metrics_stay_open() -> None:
    async with _client(keys(KEY), FakeApi()) as client:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await client.get(path)).status_code == 200, path


@pytest.mark.anyio
async def test_without_keys_configured_the_client_s_authorization_reaches_the_member() -> None:
    seen: list[httpx.Request] = []
    async with _client(None, FakeApi(), _echo(seen)) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={**CHAT, "model": "solo"},
            headers={"authorization": "Bearer member-key"},
        )
    assert response.status_code == 200
    assert seen[0].headers["authorization"] == "Bearer member-key"


@pytest.mark.anyio
async def test_no_log_line_carries_a_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[httpx.Request] = []
    async with _client(keys(KEY), FakeApi(), _echo(seen)) as client:
        for value in (f"Bearer {KEY}", f"Bearer {OTHER}", OTHER, f"Basic {OTHER}"):
            body: dict[str, Any] = {**CHAT, "model": "solo"}
            await client.post("/v1/chat/completions", json=body, headers={"authorization": value})
    assert "request answered" in caplog.text  # the audit lines were captured
    assert KEY not in caplog.text
    assert OTHER not in caplog.text
