"""The KV cache across a restart, on the real llama-server: what a save and a restore cost, and
what the first request after a restart processes with and without the restore.

Each round: start llama-server (``--slot-save-path``, ``--parallel 2``, ``--threads 1``), ask one
long prompt (cold), save the used slots with the operator's own client
(:class:`controlplane.probes.slotcache.SlotCacheClient`, the one the InferenceService controller
uses), stop it; start it again and ask the same prompt (the control: a swap back without the
cache); stop; start it again, restore the saved slots with the same client, ask the same prompt.
Reported per round and as medians: the tokens and milliseconds of prompt processing
(``timings.prompt_n``, ``cache_n``, ``prompt_ms``) in the three cases, the save and the restore as
the client saw them (all slots, HTTP included), the bytes written, and the server's start to
``/health`` 200 (what a swap costs anyway, for scale).

    .venv/bin/python -m bench.kv_cache_real --server $(hack/build-llama-server.sh | tail -1) \\
        --model MODEL.gguf [--rounds 5] [--words 150]

Any GGUF model works; the tiny generated ones (``controlplane tiny-model``) load in a fraction of
a second. Everything runs on 127.0.0.1; the save folder is a fresh temporary one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx

from controlplane.envtest.ports import free_port
from controlplane.probes.slotcache import CacheOutcome, SlotCacheClient

START_TIMEOUT_SECONDS = 60.0
#: Each operation's bound, as spec.kvCache.timeoutSeconds gives it.
OPERATION_TIMEOUT_SECONDS = 10.0


@contextmanager
def server(binary: Path, model: Path, save_path: Path) -> Iterator[tuple[str, float]]:
    """A running llama-server and how long it took to answer ``/health`` 200 (ms)."""
    port = free_port()
    argv = [str(binary), "-m", str(model), "--alias", "bench", "--host", "127.0.0.1",
            "--port", str(port), "--threads", "1", "--parallel", "2",
            "--slot-save-path", str(save_path)]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"llama-server exited with {process.returncode}: {argv}")
            if time.perf_counter() - started > START_TIMEOUT_SECONDS:
                raise SystemExit(f"llama-server not healthy in {START_TIMEOUT_SECONDS:g} s")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.01)
        yield url, (time.perf_counter() - started) * 1000
    finally:
        process.terminate()
        process.wait(timeout=30)


def ask(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "bench", "max_tokens": 8, "messages": [{"role": "user", "content": prompt}]}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    timings: dict[str, Any] = response.json()["timings"]
    return timings


def one_round(binary: Path, model: Path, prompt: str) -> dict[str, float]:
    row: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kv-bench-") as folder:
        save_path = Path(folder)
        with server(binary, model, save_path) as (url, start_ms):
            cold = ask(url, prompt)
            saved = anyio.run(_save, url)
        with server(binary, model, save_path) as (url, _):
            control = ask(url, prompt)
        with server(binary, model, save_path) as (url, _):
            restored = anyio.run(_restore, url, saved.slots)
            warm = ask(url, prompt)
    for name, report in (("save", saved), ("restore", restored)):
        if report.outcome is not CacheOutcome.SUCCEEDED:
            raise SystemExit(f"{name}: {report.outcome.value}: {report.detail}")
    row.update(
        start_ms=start_ms,
        cold_prompt_n=cold["prompt_n"], cold_prompt_ms=cold["prompt_ms"],
        control_prompt_n=control["prompt_n"], control_prompt_ms=control["prompt_ms"],
        warm_prompt_n=warm["prompt_n"], warm_cache_n=warm["cache_n"],
        warm_prompt_ms=warm["prompt_ms"],
        saved_tokens=saved.tokens, saved_bytes=saved.bytes_written,
        save_ms=saved.seconds * 1000, restore_ms=restored.seconds * 1000,
    )  # fmt: skip
    return row


async def _save(url: str) -> Any:
    """A save on a fresh client (a new pod is a new connection for the operator too)."""
    client = SlotCacheClient()
    try:
        return await client.save(url, timeout=OPERATION_TIMEOUT_SECONDS)
    finally:
        await client.aclose()


async def _restore(url: str, slots: tuple[int, ...]) -> Any:
    client = SlotCacheClient()
    try:
        return await client.restore(url, slots, timeout=OPERATION_TIMEOUT_SECONDS)
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, required=True, help="the llama-server binary")
    parser.add_argument("--model", type=Path, required=True, help="a GGUF model")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--words", type=int, default=150, help="prompt length in words")
    args = parser.parse_args()
    prompt = " ".join(f"word{i} alpha" for i in range(args.words))
    rows = [one_round(args.server, args.model, prompt) for _ in range(args.rounds)]
    keys = list(rows[0])
    print("| measure | " + " | ".join(f"round {i + 1}" for i in range(len(rows))) + " | median |")
    print("|---" * (len(rows) + 2) + "|")
    for key in keys:
        values = [row[key] for row in rows]
        cells = " | ".join(f"{v:.1f}" if v % 1 else f"{v:.0f}" for v in values)
        print(f"| {key} | {cells} | {statistics.median(values):.1f} |")


if __name__ == "__main__":
    main()
