"""The framework's Prometheus registry, and the work queue's metrics named as controller-runtime's.

:data:`REGISTRY` is what the manager serves at ``/metrics``: a registry of the framework's own,
not ``prometheus_client``'s global one, so that what is exposed is exactly what the framework
registered (as controller-runtime does with its ``metrics.Registry``). Tests pass a fresh
``CollectorRegistry`` instead and see only their own samples.

Names, labels and buckets are controller-runtime's, so existing dashboards and alerts work: every
family has the labels ``name`` and ``controller``, both set to the queue's name, and the two
duration histograms use buckets from 10 ns to 1000 s by powers of ten.

``workqueue_unfinished_work_seconds`` and ``workqueue_longest_running_processor_seconds`` are
computed by a custom collector when the registry is scraped, from each queue's in-flight probe,
instead of being set by a background task every 500 ms as in client-go: no task to run, and the
value is current at scrape time. Queues are held weakly, so a queue that is gone stops reporting.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from controlplane.runtime.workqueue.metrics import (
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    InFlightProbe,
)

REGISTRY = CollectorRegistry()
"""The registry the manager serves at ``/metrics``."""

WORKQUEUE_LABELS = ("name", "controller")
WORKQUEUE_DURATION_BUCKETS: tuple[float, ...] = tuple(float(f"1e{e}") for e in range(-8, 4))
"""10 ns to 1000 s by powers of ten: controller-runtime's ``ExponentialBuckets(10e-9, 10, 12)``."""

_UNFINISHED_HELP = (
    "How many seconds of work has been done that is in progress and hasn't been observed by "
    "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
    "threads by observing the rate at which this increases."
)
_LONGEST_HELP = "How many seconds has the longest running processor for workqueue been running."


class _InFlightCollector:
    """Computes the two in-flight gauges of every watched queue at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a scrape may come from an exposition thread
        self._probes: dict[str, weakref.ref[InFlightProbe]] = {}

    def watch(self, name: str, probe: InFlightProbe) -> None:
        with self._lock:
            self._probes[name] = weakref.ref(probe)  # a new queue of the same name takes over

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("workqueue_unfinished_work_seconds", _UNFINISHED_HELP)
        yield GaugeMetricFamily("workqueue_longest_running_processor_seconds", _LONGEST_HELP)

    def collect(self) -> Iterator[Metric]:
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds", _UNFINISHED_HELP, labels=WORKQUEUE_LABELS
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds", _LONGEST_HELP, labels=WORKQUEUE_LABELS
        )
        with self._lock:
            for name, ref in list(self._probes.items()):
                probe = ref()
                if probe is None:
                    del self._probes[name]
                    continue
                now = probe.in_flight()
                unfinished.add_metric([name, name], now.unfinished_work_seconds)
                longest.add_metric([name, name], now.longest_running_processor_seconds)
        yield unfinished
        yield longest


class PrometheusWorkqueueMetricsProvider:
    """The work queue's :class:`MetricsProvider` backed by one Prometheus registry.

    Make it with :func:`workqueue_metrics_provider`, which registers the families once per
    registry (registering a name twice is an error in ``prometheus_client``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge(
            "workqueue_depth",
            "Current depth of workqueue",
            WORKQUEUE_LABELS,
            registry=registry,
        )
        self.adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            WORKQUEUE_LABELS,
            registry=registry,
        )
        self.latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            WORKQUEUE_LABELS,
            registry=registry,
            buckets=WORKQUEUE_DURATION_BUCKETS,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            WORKQUEUE_LABELS,
            registry=registry,
            buckets=WORKQUEUE_DURATION_BUCKETS,
        )
        self.retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            WORKQUEUE_LABELS,
            registry=registry,
        )
        self._in_flight = _InFlightCollector()
        registry.register(self._in_flight)

    def new_depth_metric(self, name: str) -> GaugeMetric:
        return self.depth.labels(name, name)

    def new_adds_metric(self, name: str) -> CounterMetric:
        return self.adds.labels(name, name)

    def new_latency_metric(self, name: str) -> HistogramMetric:
        return self.latency.labels(name, name)

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        return self.work_duration.labels(name, name)

    def new_retries_metric(self, name: str) -> CounterMetric:
        return self.retries.labels(name, name)

    def watch_in_flight(self, name: str, probe: InFlightProbe) -> None:
        self._in_flight.watch(name, probe)


_providers: weakref.WeakKeyDictionary[CollectorRegistry, PrometheusWorkqueueMetricsProvider] = (
    weakref.WeakKeyDictionary()
)
_providers_lock = threading.Lock()


def workqueue_metrics_provider(
    registry: CollectorRegistry = REGISTRY,
) -> PrometheusWorkqueueMetricsProvider:
    """The work-queue metrics of ``registry`` (the framework's by default), registered once."""
    with _providers_lock:
        provider = _providers.get(registry)
        if provider is None:
            provider = PrometheusWorkqueueMetricsProvider(registry)
            _providers[registry] = provider
        return provider


class FilteredRegistry:
    """A read-only view of a registry without the families whose names start with ``exclude``.

    One process registry holds every family the framework defines, imported or not used: the
    router-proxy runs no controller and no leader election, yet ``controller_runtime_*`` and
    ``leader_election_*`` would be exposed by it (as empty families) and dashboards would count
    it as a controller. It serves this view instead; what it registers itself is unchanged.
    """

    def __init__(self, registry: CollectorRegistry, exclude: tuple[str, ...]) -> None:
        self._registry = registry
        self._exclude = exclude

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if not family.name.startswith(self._exclude):
                yield family

    def restricted_registry(self, names: Iterable[str]) -> FilteredRegistry:
        """What ``?name[]=...`` asks for (prometheus_client's exposition calls this)."""
        wanted = set(names)
        return _Restricted(self, wanted)  # type: ignore[return-value]


class _Restricted:
    def __init__(self, source: FilteredRegistry, names: set[str]) -> None:
        self._source = source
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            samples = [s for s in family.samples if s.name in self._names]
            if samples:
                family.samples = samples
                yield family
