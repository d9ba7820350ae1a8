"""The simulator's router mode: the models of a folder, the limit's choices, and load/unload with
real child simulators (the app in process, each model's child a process).

What the real llama-server router answers is held by tests/e2e/test_llamacpp_contract.py; here,
what the simulator decides, fast.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from controlplane.cli import build_parser
from controlplane.sim.llamacommand import router_settings_from
from controlplane.sim.modelsdir import (
    DEFAULT_MODELS_MAX,
    ModelStatus,
    ModelUse,
    has_capacity,
    pick_victim,
    scan_models_dir,
)
from controlplane.sim.router import RouterModels, build_router_app
from controlplane.sim.routerchild import child_argv
from controlplane.sim.routersettings import RouterSettings

pytestmark = pytest.mark.anyio

LOADED = ModelStatus.LOADED


def test_the_folders_gguf_files_and_model_folders_are_its_models(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.gguf"
    target.write_bytes(b"GGUF")
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "b.gguf").symlink_to(target)  # followed
    (folder / "a.gguf").write_bytes(b"GGUF")
    (folder / "mmproj-a.gguf").write_bytes(b"GGUF")  # a companion
    (folder / "mtp-a.gguf").write_bytes(b"GGUF")  # a draft
    (folder / "notes.txt").write_text("not a model")
    (folder / "big").mkdir()
    (folder / "big" / "big-00002-of-00002.gguf").write_bytes(b"GGUF")
    (folder / "big" / "big-00001-of-00002.gguf").write_bytes(b"GGUF")
    (folder / "big" / "mmproj.gguf").write_bytes(b"GGUF")
    (folder / "empty").mkdir()
    (folder / "dangling.gguf").symlink_to(tmp_path / "missing.gguf")

    found = scan_models_dir(folder)

    assert list(found) == ["a", "b", "big"]  # sorted, as llama.cpp's map lists them
    assert found["b"] == folder / "b.gguf"
    assert found["big"] == folder / "big" / "big-00001-of-00002.gguf"


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist or is not a directory"):
        scan_models_dir(tmp_path / "nope")


def test_at_the_limit_the_least_recently_used_idle_loaded_model_gives_way() -> None:
    uses = {
        "a": ModelUse(LOADED, last_used=3.0),
        "b": ModelUse(LOADED, last_used=1.0, in_flight=1),  # busy
        "c": ModelUse(LOADED, last_used=2.0),
        "d": ModelUse(ModelStatus.LOADING, last_used=0.0),  # still coming up
        "e": ModelUse(LOADED, last_used=0.5, stopping=True),  # already going
    }
    assert not has_capacity(uses, 5)  # five running, stopping or not
    assert has_capacity(uses, 6)
    assert has_capacity(uses, 0)  # no limit
    assert pick_victim(uses) == "c"


def test_with_every_running_model_busy_or_loading_there_is_no_victim() -> None:
    uses = {"a": ModelUse(ModelStatus.LOADING), "b": ModelUse(LOADED, in_flight=2)}
    assert pick_victim(uses) is None


def test_the_router_command_line_passes_the_model_flags_on_to_every_child(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["llama-sim", "--models-dir", str(tmp_path), "--models-max", "1", "--no-models-autoload",
         "--host", "0.0.0.0", "--port", "8080", "--parallel", "2", "--ctx-size", "4096",
         "--threads", "1", "--metrics", "--sim-load-seconds", "0.5"]
    )  # fmt: skip
    settings = router_settings_from(args)
    assert (settings.models_max, settings.autoload, settings.port) == (1, False, 8080)
    assert settings.child_flags == (
        "--parallel", "2", "--ctx-size", "4096", "--metrics",
        "--sim-load-seconds", "0.5", "--sim-token-seconds", "0.01",
    )  # fmt: skip
    argv = child_argv("a", tmp_path / "a.gguf", settings.child_flags)
    assert argv[argv.index("--alias") + 1] == "a"
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "0"]


def test_the_router_defaults_are_llama_cpps(tmp_path: Path) -> None:
    settings = router_settings_from(
        build_parser().parse_args(["llama-sim", "--models-dir", str(tmp_path)])
    )
    assert (settings.models_max, settings.autoload) == (DEFAULT_MODELS_MAX, True)


# -- with child processes --------------------------------------------------------------------------


@asynccontextmanager
async def router(
    tmp_path: Path, child_flags: tuple[str, ...] = ()
) -> AsyncIterator[httpx.AsyncClient]:
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.gguf").write_bytes(b"GGUF")
    settings = RouterSettings(folder, models_max=1, autoload=False, child_flags=child_flags)
    async with anyio.create_task_group() as group:
        models = RouterModels(settings, group)
        transport = httpx.ASGITransport(app=build_router_app(models))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
                yield client
        finally:
            await models.stop_all()
            pids = [m.child.pid for m in models.models.values() if m.child is not None]
            group.cancel_scope.cancel()
    assert not _left_running(pids)


def _left_running(pids: list[int]) -> list[int]:
    """The ``pids`` still alive (a zombie, exited and not yet reaped, is not)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


async def statuses(client: httpx.AsyncClient) -> dict[str, str]:
    body = (await client.get("/models")).json()
    return {m["id"]: m["status"]["value"] for m in body["data"]}


async def until(client: httpx.AsyncClient, name: str, value: str) -> None:
    with anyio.fail_after(30):
        while (await statuses(client))[name] != value:  # noqa: ASYNC110 (polled, as a client)
            await anyio.sleep(0.02)


async def test_load_unload_and_the_limit_with_child_processes(tmp_path: Path) -> None:
    async with router(tmp_path, child_flags=("--sim-load-seconds", "0.3")) as client:
        assert await statuses(client) == {"a": "unloaded", "b": "unloaded"}
        assert (await client.post("/models/load", json={"model": "a"})).json() == {"success": True}
        assert (await statuses(client))["a"] == "loading"
        # A second load while the only place is taken by a model still loading: the limit.
        refused = await client.post("/models/load", json={"model": "b"})
        assert refused.status_code == 500
        assert refused.json()["error"]["message"] == "model limit reached, try again later"
        await until(client, "a", "loaded")

        slots = await client.get("/slots", params={"model": "a", "autoload": "false"})
        assert slots.status_code == 200
        assert isinstance(slots.json(), list)
        again = await client.post("/models/load", json={"model": "a"})
        assert (again.status_code, again.json()["error"]["message"]) == (
            400,
            "model is already running",
        )
        # Loaded and idle: it gives way, and is unloaded by the time the load answers.
        assert (await client.post("/models/load", json={"model": "b"})).status_code == 200
        assert await statuses(client) == {"a": "unloaded", "b": "loading"}
        await until(client, "b", "loaded")

        assert (await client.post("/models/unload", json={"model": "b"})).status_code == 200
        await until(client, "b", "unloaded")
        gone = await client.post("/models/unload", json={"model": "b"})
        assert (gone.status_code, gone.json()["error"]["message"]) == (400, "model is not running")


async def test_requests_for_a_model_not_loaded_are_refused_without_autoload(
    tmp_path: Path,
) -> None:
    async with router(tmp_path) as client:
        chat = {"model": "b", "messages": [{"role": "user", "content": "hi"}]}
        answer = await client.post("/v1/chat/completions", json=chat)
        assert answer.status_code == 400
        assert answer.json()["error"] == {
            "code": 400,
            "message": "model is not loaded",
            "type": "invalid_request_error",
        }
        missing = await client.get("/slots")
        assert missing.json()["error"]["message"] == "model name is missing from the request"
        unknown = await client.post("/models/load", json={"model": "zz"})
        assert (unknown.status_code, unknown.json()["error"]["type"]) == (404, "not_found_error")
        assert (await client.get("/health")).json() == {"status": "ok"}


async def test_autoload_loads_the_model_and_answers_from_its_child(tmp_path: Path) -> None:
    async with router(tmp_path) as client:
        answer = await client.get("/slots", params={"model": "a", "autoload": "true"})
        assert answer.status_code == 200, answer.text
        assert (await statuses(client))["a"] == "loaded"
