"""Work-queue metrics: controller-runtime's names, labels and buckets, and the values they carry.

Every test uses a fresh registry and a fake clock, so the values are exact.
"""

from __future__ import annotations

import gc

import pytest
from prometheus_client import CollectorRegistry

from controlplane.runtime.metrics import (
    REGISTRY,
    WORKQUEUE_DURATION_BUCKETS,
    workqueue_metrics_provider,
)
from controlplane.runtime.workqueue import FakeClock, Queue, RateLimitingQueue

pytestmark = pytest.mark.anyio

LABELS = {"name": "pools", "controller": "pools"}


def sample(registry: CollectorRegistry, name: str, **extra: str) -> float | None:
    return registry.get_sample_value(name, {**LABELS, **extra})


def make_queue() -> tuple[RateLimitingQueue[str], FakeClock, CollectorRegistry]:
    registry = CollectorRegistry()
    clock = FakeClock()
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        name="pools", clock=clock, metrics_provider=workqueue_metrics_provider(registry)
    )
    return queue, clock, registry


def test_buckets_are_controller_runtimes() -> None:
    assert WORKQUEUE_DURATION_BUCKETS == (
        1e-08, 1e-07, 1e-06, 1e-05, 1e-04, 1e-03, 1e-02, 1e-01, 1.0, 10.0, 100.0, 1000.0,
    )  # fmt: skip


def test_every_family_is_registered_under_controller_runtimes_name() -> None:
    registry = CollectorRegistry()
    workqueue_metrics_provider(registry)
    names = {metric.name for metric in registry.collect()}
    assert {
        "workqueue_depth",
        "workqueue_adds",  # the client strips ``_total`` from a counter's family name
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_retries",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
    } <= names


def test_the_provider_is_made_once_per_registry() -> None:
    registry = CollectorRegistry()
    assert workqueue_metrics_provider(registry) is workqueue_metrics_provider(registry)
    assert workqueue_metrics_provider() is workqueue_metrics_provider(REGISTRY)
    assert workqueue_metrics_provider(registry) is not workqueue_metrics_provider()


async def test_adds_depth_and_queue_latency() -> None:
    queue, clock, registry = make_queue()
    queue.add("a")
    queue.add("a")  # collapsed: not an add
    queue.add("b")
    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_depth") == 2
    clock.advance(0.5)
    await queue.get()
    assert sample(registry, "workqueue_depth") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == 0.5
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="0.1") == 0
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="1.0") == 1


async def test_work_duration_is_observed_at_done() -> None:
    queue, clock, registry = make_queue()
    queue.add("a")
    key = await queue.get()
    clock.advance(2.0)
    assert sample(registry, "workqueue_work_duration_seconds_count") == 0
    queue.done(key)
    assert sample(registry, "workqueue_work_duration_seconds_count") == 1
    assert sample(registry, "workqueue_work_duration_seconds_sum") == 2.0


async def test_retries_count_every_add_after_and_latency_starts_when_due() -> None:
    queue, clock, registry = make_queue()
    queue.add_rate_limited("a")
    queue.add_after("b", 1.0)
    assert sample(registry, "workqueue_retries_total") == 2
    assert sample(registry, "workqueue_adds_total") == 0, "a key is added when it is due"
    clock.advance(3.0)  # "b" was due at 1.0: it has been waiting for a worker for 2 s
    assert len(queue) == 2
    assert sample(registry, "workqueue_depth") == 2
    await queue.get()
    await queue.get()
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(2.995 + 2.0)


async def test_in_flight_gauges_are_computed_at_scrape_time() -> None:
    queue, clock, registry = make_queue()
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0
    queue.add("a")
    queue.add("b")
    a = await queue.get()
    clock.advance(3.0)
    await queue.get()
    clock.advance(1.0)  # "a" has run 4 s, "b" 1 s
    assert sample(registry, "workqueue_unfinished_work_seconds") == 5.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 4.0
    queue.done(a)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 1.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 1.0


def test_a_queue_that_is_gone_stops_reporting() -> None:
    registry = CollectorRegistry()
    queue: Queue[str] = Queue(
        name="gone", clock=FakeClock(), metrics_provider=workqueue_metrics_provider(registry)
    )
    labels = {"name": "gone", "controller": "gone"}
    assert registry.get_sample_value("workqueue_unfinished_work_seconds", labels) == 0
    del queue
    gc.collect()
    assert registry.get_sample_value("workqueue_unfinished_work_seconds", labels) is None


def test_an_unnamed_queue_records_nothing() -> None:
    registry = CollectorRegistry()
    queue: Queue[str] = Queue(metrics_provider=workqueue_metrics_provider(registry))
    queue.add("a")
    samples = [s for metric in registry.collect() for s in metric.samples]
    assert samples == []
