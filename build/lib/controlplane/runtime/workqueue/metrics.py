"""What the queue reports about itself, without knowing who listens (client-go's metrics provider).

The queue depends only on the small protocols here; :mod:`controlplane.runtime.metrics` plugs
Prometheus in behind them. A queue without a name, or given the :class:`NoopMetricsProvider`
(the default), records nothing at all, so the hot path pays for no bookkeeping it will not use.

Two gauges, unfinished work and the longest-running processor, are about *now*, not about
events. client-go refreshes them from a goroutine every 500 ms; here the provider instead reads
:meth:`InFlightProbe.in_flight` when it is collected. That needs no background task (the queue
stays a plain object with no lifecycle) and the value is exact at scrape time rather than up to
500 ms stale.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from controlplane.runtime.workqueue.clock import Clock

K = TypeVar("K", bound=Hashable)


class CounterMetric(Protocol):
    def inc(self) -> None: ...


class GaugeMetric(Protocol):
    def inc(self) -> None: ...

    def dec(self) -> None: ...


class HistogramMetric(Protocol):
    def observe(self, value: float) -> None: ...


@dataclass(frozen=True)
class UnfinishedWork:
    """A snapshot of the keys being processed right now (client-go's "unfinished work")."""

    unfinished_work_seconds: float
    """Sum over the keys being processed of how long each has been processing."""
    longest_running_processor_seconds: float
    """How long the oldest key still being processed has been processing (0 when none)."""


class InFlightProbe(Protocol):
    def in_flight(self) -> UnfinishedWork: ...


class MetricsProvider(Protocol):
    """Makes the metrics of one named queue (``name`` is the queue's, usually its controller's)."""

    def new_depth_metric(self, name: str) -> GaugeMetric: ...

    def new_adds_metric(self, name: str) -> CounterMetric: ...

    def new_latency_metric(self, name: str) -> HistogramMetric: ...

    def new_work_duration_metric(self, name: str) -> HistogramMetric: ...

    def new_retries_metric(self, name: str) -> CounterMetric: ...

    def watch_in_flight(self, name: str, probe: InFlightProbe) -> None:
        """Read ``probe`` whenever the gauges are collected (hold it weakly: queues come and go)."""
        ...


class _NoopMetric:
    def inc(self) -> None:
        pass

    def dec(self) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


class NoopMetricsProvider:
    """Records nothing; the default, so that the queue works without any metrics backend."""

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return _NoopMetric()

    def new_adds_metric(self, name: str) -> CounterMetric:
        return _NoopMetric()

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return _NoopMetric()

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return _NoopMetric()

    def new_retries_metric(self, name: str) -> CounterMetric:
        return _NoopMetric()

    def watch_in_flight(self, name: str, probe: InFlightProbe) -> None:
        pass


class QueueMetrics(Generic[K]):
    """The queue's side of the metrics: a no-op here; :func:`queue_metrics` picks the real one."""

    def added(self, key: K, at: float) -> None:
        """``key`` became dirty at time ``at`` (an add that collapsed is not reported)."""

    def taken(self, key: K) -> None:
        """A worker got ``key``."""

    def done(self, key: K) -> None:
        """The worker holding ``key`` finished with it."""

    def retried(self) -> None:
        """A key was scheduled again through ``add_after`` (client-go counts retries there)."""


class _RecordingQueueMetrics(QueueMetrics[K]):
    """client-go's bookkeeping: when each key was added and when each started processing."""

    def __init__(self, name: str, provider: MetricsProvider, clock: Clock) -> None:
        self._clock = clock
        self._depth = provider.new_depth_metric(name)
        self._adds = provider.new_adds_metric(name)
        self._latency = provider.new_latency_metric(name)
        self._work_duration = provider.new_work_duration_metric(name)
        self._retries = provider.new_retries_metric(name)
        self._added_at: dict[K, float] = {}
        self._started_at: dict[K, float] = {}
        provider.watch_in_flight(name, self)

    def added(self, key: K, at: float) -> None:
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(key, at)

    def taken(self, key: K) -> None:
        now = self._clock.now()
        self._depth.dec()
        self._started_at[key] = now
        added_at = self._added_at.pop(key, None)
        if added_at is not None:
            self._latency.observe(max(0.0, now - added_at))

    def done(self, key: K) -> None:
        started_at = self._started_at.pop(key, None)
        if started_at is not None:
            self._work_duration.observe(max(0.0, self._clock.now() - started_at))

    def retried(self) -> None:
        self._retries.inc()

    def in_flight(self) -> UnfinishedWork:
        # A scrape may run on another thread than the event loop. ``tuple(dict.values())`` of
        # floats is copied in C without running Python code, so it cannot see a dict that is
        # resized half-way; the arithmetic then works on the private copy.
        started = tuple(self._started_at.values())
        now = self._clock.now()
        ages = [max(0.0, now - at) for at in started]
        return UnfinishedWork(sum(ages), max(ages, default=0.0))


def queue_metrics(name: str, provider: MetricsProvider | None, clock: Clock) -> QueueMetrics[K]:
    """The metrics of one queue: real only for a named queue with a real provider (as client-go)."""
    if not name or provider is None or isinstance(provider, NoopMetricsProvider):
        return QueueMetrics()
    return _RecordingQueueMetrics(name, provider, clock)
