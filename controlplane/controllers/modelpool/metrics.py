"""The pool controller's Prometheus metrics, in the framework's registry (docs/modelpool.md).

What an operator of a pool wants on a dashboard and in an alert, from the one process that
decides: which member is resident (``modelpool_pool_resident_member``, 1 for the resident), the
pool's phase and since when it has been ``Swapping`` next to its ``swapBudget`` (so an alert can
compare the two per pool: a budget is per pool, a rule's ``for:`` is not), swaps completed, idle
residents given back (``modelpool_pool_reclaims_total``), drain
deferrals by reason, and the idle probes' outcomes and latency. The router's swap metrics
(``modelpool_swaps_total``...) count what one replica drove; these count what the pool did.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from controlplane.api.v1alpha1.modelpool import PHASES
from controlplane.runtime.metrics import REGISTRY

POOL_RESIDENT = Gauge(
    "modelpool_pool_resident_member",
    "1 for each member that holds the pool's slot (status.residents: one, or up to the "
    "capacity of a pool with spec.capacity); absent when cold.",
    ("namespace", "pool", "member"),
    registry=REGISTRY,
)
POOL_PHASE = Gauge(
    "modelpool_pool_phase",
    "1 for the pool's current phase (Pending, Ready, Swapping, Degraded, Idle), 0 for the others.",
    ("namespace", "pool", "phase"),
    registry=REGISTRY,
)
SWAPPING_SINCE = Gauge(
    "modelpool_pool_swapping_since_timestamp_seconds",
    "Unix time the pool's slot stopped being allocated to a ready resident while it is "
    "Swapping; 0 when it is not.",
    ("namespace", "pool"),
    registry=REGISTRY,
)
SWAP_BUDGET = Gauge(
    "modelpool_pool_swap_budget_seconds",
    "The pool's spec.swapBudget: how long a proxy holds a request for a swap.",
    ("namespace", "pool"),
    registry=REGISTRY,
)
SWAPS_COMPLETED = Counter(
    "modelpool_pool_swaps_completed",
    "Swaps the pool completed (a new resident became Ready), by the member that became resident.",
    ("namespace", "pool", "member"),
    registry=REGISTRY,
)
RECLAIMS = Counter(
    "modelpool_pool_reclaims",
    "Residents the pool released after spec.scheduling.idleAfter without a request, by member "
    "and idleAction (Default, Release).",
    ("namespace", "pool", "member", "action"),
    registry=REGISTRY,
)
DRAIN_DEFERRALS = Counter(
    "modelpool_drain_deferrals",
    "Reconciles that deferred a drain, by reason (PodsBusy, IdleCheckFailed).",
    ("namespace", "pool", "reason"),
    registry=REGISTRY,
)
IDLE_PROBES = Counter(
    "modelpool_idle_probes",
    "Idle probes of members' endpoints (llama.cpp GET /slots), by runtime and outcome "
    "(idle, busy, failed).",
    ("runtime", "outcome"),
    registry=REGISTRY,
)
IDLE_PROBE_DURATION = Histogram(
    "modelpool_idle_probe_duration_seconds",
    "How long one idle probe took (bounded by the probe's timeout).",
    ("runtime",),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
    registry=REGISTRY,
)

__all__ = [
    "DRAIN_DEFERRALS",
    "IDLE_PROBES",
    "IDLE_PROBE_DURATION",
    "PHASES",
    "POOL_PHASE",
    "POOL_RESIDENT",
    "SWAPPING_SINCE",
    "SWAPS_COMPLETED",
    "SWAP_BUDGET",
]
