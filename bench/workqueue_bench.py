"""Raw work-queue throughput: how many keys per second go through add, get and done.

Run: ``.venv/bin/python -m bench.workqueue_bench``

It measures the queue alone (the "reconcile" does nothing), so the numbers are the ceiling the
queue puts on a controller, to compare with what a reconcile costs (an API round trip is in the
milliseconds). Scenarios:

* inline: one task adds a key, gets it, marks it done; no waiting ever happens.
* prefilled: N keys are queued first, then W workers drain them.
* streaming: a producer adds keys in batches of 64 while W workers, parked in ``get``, are woken
  for them; this exercises the wake-up path.

Each runs with no metrics and with the Prometheus provider (on a private registry).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
from prometheus_client import CollectorRegistry

from controlplane.runtime.metrics import workqueue_metrics_provider
from controlplane.runtime.workqueue import MetricsProvider, QueueShutDown, RateLimitingQueue

KEYS = 100_000
BATCH = 64


def make_queue(metrics: bool) -> RateLimitingQueue[int]:
    provider: MetricsProvider | None = (
        workqueue_metrics_provider(CollectorRegistry()) if metrics else None
    )
    return RateLimitingQueue(name="bench", metrics_provider=provider)


async def worker(queue: RateLimitingQueue[int], counter: list[int]) -> None:
    while True:
        try:
            key = await queue.get()
        except QueueShutDown:
            return
        counter[0] += 1
        queue.done(key)


async def inline(queue: RateLimitingQueue[int], workers: int) -> None:
    for i in range(KEYS):
        queue.add(i)
        queue.done(await queue.get())


async def prefilled(queue: RateLimitingQueue[int], workers: int) -> None:
    counter = [0]
    for i in range(KEYS):
        queue.add(i)
    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker, queue, counter)
        await queue.shut_down_with_drain()
    assert counter[0] == KEYS


async def streaming(queue: RateLimitingQueue[int], workers: int) -> None:
    counter = [0]
    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker, queue, counter)
        for start in range(0, KEYS, BATCH):
            for i in range(start, min(start + BATCH, KEYS)):
                queue.add(i)
            await anyio.lowlevel.checkpoint()  # let the workers run, as an informer would
        queue.shut_down()  # the workers still take what is queued, then end

    assert counter[0] == KEYS


Scenario = Callable[[RateLimitingQueue[int], int], Awaitable[None]]


def measure(scenario: Scenario, workers: int, metrics: bool) -> float:
    """Keys per second through ``scenario`` (best of three, to damp a noisy machine)."""
    best = float("inf")
    for _ in range(3):
        queue = make_queue(metrics)
        started = time.perf_counter()
        anyio.run(scenario, queue, workers, backend="asyncio")
        best = min(best, time.perf_counter() - started)
    return KEYS / best


def main() -> None:
    print(f"work queue throughput, {KEYS} distinct keys, add+get+done per key (best of 3)")
    print(f"{'scenario':<12}{'workers':>8}{'no metrics':>16}{'prometheus':>16}")
    cases: list[tuple[str, Scenario, int]] = [
        ("inline", inline, 1),
        ("prefilled", prefilled, 1),
        ("prefilled", prefilled, 4),
        ("streaming", streaming, 1),
        ("streaming", streaming, 4),
    ]
    for label, scenario, workers in cases:
        plain = measure(scenario, workers, metrics=False)
        with_metrics = measure(scenario, workers, metrics=True)
        print(f"{label:<12}{workers:>8}{plain:>13,.0f}/s{with_metrics:>13,.0f}/s")


if __name__ == "__main__":
    main()
