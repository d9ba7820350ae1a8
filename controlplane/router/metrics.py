"""The router-proxy's Prometheus metrics, in the framework's registry (docs/router.md).

Swap metrics are counted only by the replica that drove the swap (held the Lease while the target
came up); every replica counts its held requests and its proxied requests.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from controlplane.runtime.metrics import REGISTRY

SWAPS_TOTAL = Counter(
    "modelpool_swaps_total",
    "Swaps driven by this replica, by pool and members.",
    ("pool", "from", "to"),
    registry=REGISTRY,
)
SWAP_DURATION = Histogram(
    "modelpool_swap_duration_seconds",
    "From claiming the pool's Lease to the target being ready, for swaps this replica drove.",
    ("pool",),
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)
HOLD_DURATION = Histogram(
    "modelpool_hold_duration_seconds",
    "How long a cross-model request was held before it was dispatched or answered.",
    ("pool",),
    buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)
HELD_REQUESTS = Gauge(
    "modelpool_held_requests",
    "Requests held right now, waiting for a member to become ready.",
    ("pool",),
    registry=REGISTRY,
)
PROXY_REQUESTS = Counter(
    "modelpool_proxy_requests_total",
    "Requests answered by the proxy, by requested model, HTTP status and outcome reason (the "
    "error code of an answer the proxy made, `upstream` for one the member made).",
    ("model", "code", "reason"),
    registry=REGISTRY,
)
