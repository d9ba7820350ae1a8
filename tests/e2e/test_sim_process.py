"""``controlplane sim`` as a real process over real HTTP: what the node stand-in will run.

No Kubernetes here: each test starts a simulator on a free port (``--port 0``), reads the port
from its ``listening on`` line, and talks to it with httpx. Assertions are about states and their
order; the only time comparison is a lower bound (ready no earlier than the load time), which a
slow machine cannot break.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
from anyio.abc import Process

from controlplane.sim.text import reply_tokens
from tests.e2e.httpclients import http_client
from tests.e2e.waiting import eventually

LISTENING = b"listening on "
START_TIMEOUT = 60.0
PROMPT = "alpha beta gamma"


class Simulator:
    def __init__(self, process: Process, url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log

    def log_text(self) -> str:
        return _text(self.log)

    async def get(self, path: str) -> httpx.Response:
        """A request on a fresh connection, so it proves the server still accepts new ones."""
        async with http_client(base_url=self.url, timeout=10.0) as client:
            return await client.get(path)

    async def slots_processing(self) -> list[bool]:
        response = await self.get("/slots")
        assert response.status_code == 200, response.text
        return [slot["is_processing"] for slot in response.json()]

    async def wait_ready(self) -> None:
        async def healthy() -> bool:
            return (await self.get("/health")).status_code == 200

        await eventually(healthy, timeout=START_TIMEOUT, what="the simulator's /health 200")


def _text(path: Path) -> str:
    return path.read_text(errors="replace")


@asynccontextmanager
async def simulator(tmp_path: Path, *args: str) -> AsyncIterator[Simulator]:
    """A running ``controlplane sim --port 0 ARGS``; stopped with SIGTERM, and it must exit 0."""
    log = tmp_path / "sim.log"
    with log.open("wb") as stderr:
        process = await anyio.open_process(
            [sys.executable, "-m", "controlplane.cli", "sim", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        url = await _read_url(process, log)
        yield Simulator(process, url, log)
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        with anyio.fail_after(START_TIMEOUT):
            code = await process.wait()
        assert code == 0, _text(log)
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()


async def _read_url(process: Process, log: Path) -> str:
    assert process.stdout is not None
    seen = b""
    with anyio.fail_after(START_TIMEOUT):
        while b"\n" not in seen:
            try:
                seen += await process.stdout.receive()
            except anyio.EndOfStream:
                raise AssertionError(f"simulator exited early:\n{_text(log)}") from None
    line = seen.split(b"\n", 1)[0].strip()
    assert line.startswith(LISTENING), line
    return line.removeprefix(LISTENING).decode()


def chat(max_tokens: int) -> dict[str, Any]:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


async def test_health_is_503_while_loading_then_200_no_earlier_than_the_load_time(
    tmp_path: Path,
) -> None:
    load_seconds = 3.0
    started = time.monotonic()
    async with simulator(tmp_path, "--load-seconds", str(load_seconds)) as sim:
        loading = await sim.get("/health")
        assert loading.status_code == 503
        assert loading.json() == {
            "error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}
        }
        assert (await sim.get("/slots")).status_code == 503
        await sim.wait_ready()
        assert time.monotonic() - started >= load_seconds
        assert (await sim.get("/health")).json() == {"status": "ok"}
        assert await sim.slots_processing() == [False]
    assert "ready: model" in sim.log_text()


async def test_a_streamed_completion_shows_its_slot_processing_until_it_ends(
    tmp_path: Path,
) -> None:
    tokens = 30
    async with simulator(tmp_path, "--slots", "2", "--token-seconds", "0.2") as sim:
        await sim.wait_ready()
        assert await sim.slots_processing() == [False, False]
        deltas: list[str] = []
        payloads: list[str] = []
        busy_seen: list[bool] | None = None
        async with (
            http_client(base_url=sim.url, timeout=60.0) as client,
            client.stream("POST", "/v1/chat/completions", json=chat(tokens)) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if not line:
                    continue
                payload = line.removeprefix("data: ")
                payloads.append(payload)
                if payload == "[DONE]":
                    continue
                delta = msgspec.json.decode(payload)["choices"][0]["delta"]
                if delta.get("content") and busy_seen is None:
                    busy_seen = await sim.slots_processing()  # mid-stream
                if delta.get("content"):
                    deltas.append(delta["content"])
        assert busy_seen == [True, False]
        assert payloads[-1] == "[DONE]"
        assert msgspec.json.decode(payloads[-2])["choices"][0]["finish_reason"] == "length"
        assert "".join(deltas) == "".join(reply_tokens(PROMPT, tokens))
        assert await sim.slots_processing() == [False, False]


async def test_sigterm_during_a_stream_refuses_new_connections_lets_it_finish_and_exits_0(
    tmp_path: Path,
) -> None:
    tokens = 20  # 2 s of generation: well inside the server's graceful-shutdown bound
    async with simulator(tmp_path, "--token-seconds", "0.1") as sim:
        await sim.wait_ready()
        deltas: list[str] = []
        payloads: list[str] = []
        first_token = anyio.Event()

        async def stream() -> None:
            async with (
                http_client(base_url=sim.url, timeout=60.0) as client,
                client.stream("POST", "/v1/chat/completions", json=chat(tokens)) as response,
            ):
                async for line in response.aiter_lines():
                    if not line:
                        continue
                    payload = line.removeprefix("data: ")
                    payloads.append(payload)
                    if payload != "[DONE]":
                        content = msgspec.json.decode(payload)["choices"][0]["delta"].get("content")
                        if content:
                            deltas.append(content)
                            first_token.set()

        async def refused() -> bool:
            try:
                await sim.get("/health")
            except httpx.ConnectError:
                return True
            return False

        async with anyio.create_task_group() as group:
            group.start_soon(stream)
            with anyio.fail_after(START_TIMEOUT):
                await first_token.wait()
            sim.process.send_signal(signal.SIGTERM)
            await eventually(refused, timeout=START_TIMEOUT, interval=0.02, what="refusal")
            refused_while_draining = sim.process.returncode is None
        assert refused_while_draining, "new connections were still accepted until exit"
        assert payloads[-1] == "[DONE]"
        assert "".join(deltas) == "".join(reply_tokens(PROMPT, tokens))
        with anyio.fail_after(START_TIMEOUT):
            assert await sim.process.wait() == 0
    assert "SIGTERM" in sim.log_text()
