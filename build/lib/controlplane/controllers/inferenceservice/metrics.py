"""The InferenceService controller's Prometheus metrics: the KV cache's saves and restores.

A failed save or restore never fails a swap (docs/kv-cache.md), so this counter and the Warning
events are where it shows: ``modelpool_kv_cache_operations_total`` with ``operation="save"`` and
``outcome="Failed"`` rising is a cache that is not being carried. Outcomes are the API's words
(Succeeded, Partial, Failed, TimedOut, Nothing).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from controlplane.runtime.metrics import REGISTRY

KV_CACHE_OPERATIONS = Counter(
    "modelpool_kv_cache_operations",
    "KV cache saves (before a scale to zero) and restores (before a pod counts as Ready), by "
    "InferenceService, operation (save, restore) and outcome (Succeeded, Partial, Failed, "
    "TimedOut, Nothing).",
    ("namespace", "inferenceservice", "operation", "outcome"),
    registry=REGISTRY,
)
KV_CACHE_DURATION = Histogram(
    "modelpool_kv_cache_operation_duration_seconds",
    "How long one KV cache save or restore took, all slots together (bounded by "
    "spec.kvCache.timeoutSeconds).",
    ("operation",),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
    registry=REGISTRY,
)

__all__ = ["KV_CACHE_DURATION", "KV_CACHE_OPERATIONS"]
