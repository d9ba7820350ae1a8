"""Load clients for the data-path benchmark (:mod:`bench.proxy_bench`), each run as its own process.

They speak HTTP/1.1 over raw asyncio streams, not through an HTTP library, so what they cost is
small and the same for every server measured (the member direct, our proxy, nginx):

* ``hold URL N``: open N connections at once, send one small chat completion on each, report when
  every request is written, then wait for every answer (held requests);
* ``stream URL N``: N streamed completions one after another: time to first ``data:`` event, and
  the arrival time of every event (streaming overhead);
* ``clients URL N``: the proxy's candidate upstream clients (httpx, aiohttp) sending N small
  completions to one server, one at a time and 16 at a time, in this process (choice of client);
* ``slow URL N``: N slow or idle connections at once (``--kinds``: sending nothing, a head that
  trickles a header line every ``--head-interval`` s, a body that stalls), each kept until the
  server closes it or ``--timeout`` passes: per kind, how many the server closed, when, and
  with what (the slow-client phase and tests/e2e/test_slow_clients.py).

Each prints one JSON object per line on stdout; the harness reads them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import resource
import statistics
import sys
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit


def chat_body(model: str, *, stream: bool = False, max_tokens: int = 4) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
        body["ignore_eos"] = True  # exactly max_tokens chunks
    return json.dumps(body, separators=(",", ":")).encode()


def request_bytes(url: str, path: str, body: bytes) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return host, port, head.encode() + body


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def raise_nofile(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(max(soft, wanted), hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


# -- held requests -------------------------------------------------------------------------------


async def hold(url: str, count: int, model: str, timeout: float, stages: list[int]) -> None:
    """``count`` requests held at once. With ``stages`` (ascending counts), the connections open
    in steps: after each step's requests are written, a ``written`` line says how many, and the
    next step waits for a line on stdin (the harness measures the proxy in between)."""
    raise_nofile(count + 256)
    host, port, raw = request_bytes(url, "/v1/chat/completions", chat_body(model))
    statuses: Counter[str] = Counter()
    answered: list[float] = []
    connect_gate = asyncio.Semaphore(256)  # the listen backlog is 1,024: do not flood it

    async def one(written: list[int], step_done: asyncio.Event, step_size: int) -> None:
        try:
            async with connect_gate:
                reader, writer = await asyncio.open_connection(host, port)
            writer.write(raw)
            await writer.drain()
        except OSError as err:
            statuses[f"connect:{type(err).__name__}"] += 1
            reader = None
        written[0] += 1
        if written[0] == step_size:
            step_done.set()
        if reader is None:
            return
        try:
            data = await reader.read()  # Connection: close: until the server closes
            line = data.split(b"\r\n", 1)[0].split()
            statuses[line[1].decode() if len(line) > 1 else "empty"] += 1
            answered.append(time.monotonic())
        except OSError as err:
            statuses[f"read:{type(err).__name__}"] += 1
        finally:
            writer.close()

    started = time.monotonic()
    tasks: list[asyncio.Task[None]] = []
    steps = [n for n in stages if 0 < n < count] + [count]
    for index, target in enumerate(steps):
        if index:
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        written, step_done = [0], asyncio.Event()
        size = target - len(tasks)
        tasks += [asyncio.create_task(one(written, step_done, size)) for _ in range(size)]
        await step_done.wait()
        emit({"event": "written", "count": target, "seconds": time.monotonic() - started})
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    emit(
        {
            "event": "done",
            "statuses": dict(statuses),
            "unanswered": len(pending),
            "first_answer": min(answered) if answered else None,
            "last_answer": max(answered) if answered else None,
            "spread_seconds": (max(answered) - min(answered)) if answered else None,
        }
    )


# -- slow and idle connections ------------------------------------------------------------------

#: The kinds of slow client (``slow --kinds``): a connection that sends nothing; a request head
#: that trickles one header line every ``--head-interval`` seconds; a head whose body stops after
#: its first bytes.
SLOW_KINDS = ("idle", "head", "body")
#: A body kind's declared and sent sizes: it sends a sixteenth and stalls.
SLOW_BODY_DECLARED = 1024
SLOW_BODY_SENT = 64


def slow_opening(kind: str, host: str, port: int) -> bytes:
    """What a slow client of ``kind`` sends first (then nothing, or one header line at a time)."""
    if kind == "idle":
        return b""
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
    if kind == "head":
        return head
    return (
        head
        + (
            f"Content-Type: application/json\r\nContent-Length: {SLOW_BODY_DECLARED}\r\n\r\n"
        ).encode()
        + b"{"
        + b" " * (SLOW_BODY_SENT - 1)
    )


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes (a reset counts as a close)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while data := await reader.read(65536):
            received += data
    return received


async def trickle(writer: asyncio.StreamWriter, interval: float) -> None:
    """One header line every ``interval`` seconds until the server closes."""
    with contextlib.suppress(OSError):
        for line in itertools.count():
            await asyncio.sleep(interval)
            if writer.is_closing():
                return
            writer.write(b"x-slow-%d: 1\r\n" % line)
            await writer.drain()


async def slow_one(
    kind: str, host: str, port: int, gate: asyncio.Semaphore, opened: asyncio.Event,
    interval: float, timeout: float,
) -> dict[str, Any]:  # fmt: skip
    """One slow connection: when and how it ended, measured from when it was open."""
    try:
        async with gate:
            reader, writer = await asyncio.open_connection(host, port)
    except OSError as err:
        opened.set()
        return {"kind": kind, "outcome": f"connect:{type(err).__name__}"}
    started = time.monotonic()
    opened.set()
    writer.write(slow_opening(kind, host, port))
    sender = asyncio.create_task(trickle(writer, interval)) if kind == "head" else None
    try:
        received = await asyncio.wait_for(read_until_closed(reader), timeout)
    except TimeoutError:
        return {"kind": kind, "outcome": "open_at_end"}  # the client closes it, below
    finally:
        if sender is not None:
            sender.cancel()
        writer.close()
    line = received.split(b"\r\n", 1)[0].split()
    status = line[1].decode() if len(line) > 1 else "none"
    return {
        "kind": kind,
        "outcome": "closed_by_server",
        "status": status,
        "seconds": time.monotonic() - started,
    }


def slow_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: how many the server closed, how long after opening, with which answer."""
    summary: dict[str, Any] = {}
    for kind in sorted({r["kind"] for r in results}):
        mine = [r for r in results if r["kind"] == kind]
        closed = sorted(r["seconds"] for r in mine if r["outcome"] == "closed_by_server")
        summary[kind] = {
            "opened": len(mine),
            "outcomes": dict(Counter(r["outcome"] for r in mine)),
            "statuses": dict(Counter(r.get("status", "-") for r in mine)),
            "closed_by_server": len(closed),
            "close_seconds": {
                "min": closed[0],
                "p50": statistics.median(closed),
                "p99": closed[int(0.99 * (len(closed) - 1))],
                "max": closed[-1],
            }
            if closed
            else None,
        }
    return summary


async def slow(url: str, count: int, kinds: list[str], interval: float, timeout: float) -> None:
    """``count`` slow connections, shared evenly among ``kinds``, all open at once; an ``opened``
    line when they are, and one ``slow`` line with :func:`slow_summary` when every one has been
    closed by the server or has been open ``timeout`` seconds (then this client closes it)."""
    raise_nofile(count + 256)
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    gate = asyncio.Semaphore(256)  # the listen backlog is 1,024: do not flood it
    opened = [asyncio.Event() for _ in range(count)]
    started = time.monotonic()
    tasks = [
        asyncio.create_task(
            slow_one(kinds[i % len(kinds)], host, port, gate, opened[i], interval, timeout)
        )
        for i in range(count)
    ]
    for event in opened:
        await event.wait()
    emit({"event": "opened", "count": count, "seconds": time.monotonic() - started})
    results = await asyncio.gather(*tasks)
    emit({"event": "slow", "seconds": time.monotonic() - started, "kinds": slow_summary(results)})


# -- streaming -----------------------------------------------------------------------------------


async def stream_once(url: str, model: str, tokens: int) -> tuple[float, list[float]]:
    """(seconds to the first ``data:`` event, arrival time of each event after the first)."""
    host, port, raw = request_bytes(
        url, "/v1/chat/completions", chat_body(model, stream=True, max_tokens=tokens)
    )
    reader, writer = await asyncio.open_connection(host, port)
    started = time.perf_counter()
    writer.write(raw)
    first: float | None = None
    events: list[float] = []
    buffer = b""
    try:
        while True:
            data = await reader.read(65536)
            now = time.perf_counter()
            if not data:
                break
            buffer += data
            found = buffer.count(b"data: ")
            if found:
                if first is None:
                    first = now
                events.extend([now] * found)
                buffer = buffer[buffer.rfind(b"data: ") + 6 :]
            if b"[DONE]" in data or b"[DONE]" in buffer:
                break
    finally:
        writer.close()
    if first is None:
        raise RuntimeError(f"no event from {url}")
    return first - started, [t - first for t in events]


async def stream(url: str, count: int, model: str, tokens: int) -> None:
    for _ in range(3):  # warm-up: connections, caches, the member's first request
        await stream_once(url, model, tokens)
    ttfb: list[float] = []
    totals: list[float] = []
    chunks: list[int] = []
    for _ in range(count):
        first, events = await stream_once(url, model, tokens)
        ttfb.append(first)
        totals.append(events[-1])
        chunks.append(len(events))
    emit(
        {
            "event": "stream",
            "requests": count,
            "ttfb_p50": statistics.median(ttfb),
            "ttfb_p99": sorted(ttfb)[int(0.99 * (len(ttfb) - 1))],
            "first_to_last_p50": statistics.median(totals),
            "events_p50": statistics.median(chunks),
        }
    )


# -- upstream clients ----------------------------------------------------------------------------


async def clients(url: str, count: int, model: str) -> None:
    import aiohttp
    import httpx

    body = chat_body(model)
    target = url + "/v1/chat/completions"
    headers = {"content-type": "application/json"}

    async def timed(send: Any, concurrency: int) -> dict[str, float]:
        for _ in range(50):
            await send()
        cpu, wall = time.process_time(), time.perf_counter()
        per_task = count // concurrency

        async def worker() -> None:
            for _ in range(per_task):
                await send()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        n = per_task * concurrency
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {"requests_per_s": n / wall, "client_cpu_us_per_request": cpu / n * 1e6}

    results: dict[str, Any] = {}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:

        async def httpx_send() -> None:
            response = await http.send(
                http.build_request("POST", target, content=body, headers=headers), stream=True
            )
            async for _ in response.aiter_raw():
                pass
            await response.aclose()

        for c in (1, 16):
            results[f"httpx c={c}"] = await timed(httpx_send, c)
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=30), auto_decompress=False
    ) as session:

        async def aiohttp_send() -> None:
            async with session.post(target, data=body, headers=headers) as response:
                async for _ in response.content.iter_any():
                    pass

        for c in (1, 16):
            results[f"aiohttp c={c}"] = await timed(aiohttp_send, c)
    emit({"event": "clients", "loop": type(asyncio.get_running_loop()).__module__, **results})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["hold", "stream", "clients", "slow"])
    parser.add_argument("url")
    parser.add_argument("count", type=int)
    parser.add_argument("--model", default="model-a")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--stages", default="", help="hold: counts to pause at (comma-separated), e.g. 1000,5000"
    )
    parser.add_argument("--kinds", default=",".join(SLOW_KINDS), help="slow: the kinds to open")
    parser.add_argument(
        "--head-interval", type=float, default=3.0, help="slow: seconds between header lines"
    )
    args = parser.parse_args(argv)
    if args.mode == "slow":
        kinds = [k for k in args.kinds.split(",") if k in SLOW_KINDS]
        asyncio.run(slow(args.url, args.count, kinds, args.head_interval, args.timeout))
        return 0
    if args.mode == "hold":
        stages = [int(n) for n in args.stages.split(",") if n]
        coro = hold(args.url, args.count, args.model, args.timeout, stages)
    elif args.mode == "stream":
        coro = stream(args.url, args.count, args.model, args.tokens)
    else:
        coro = clients(args.url, args.count, args.model)
    asyncio.run(coro)
    return 0


if __name__ == "__main__":
    sys.exit(main())
