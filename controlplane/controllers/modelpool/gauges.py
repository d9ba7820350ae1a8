"""The pool's gauges, set from each status decided and removed with the pool.

*Why a module of its own:* the metric families are declared in
:mod:`~controlplane.controllers.modelpool.metrics`; keeping their series true takes state (the
resident last exported, whose series must go when it changes, or a dashboard shows two
residents) and a rule for a deleted pool (every series it had goes with it). That bookkeeping is
the same whether the status was written or found unchanged, and has nothing to do with the
decision, so it is kept out of the reconcile.

**Metrics**: the resident and phase per pool, since when it is Swapping and its budget (so an
alert compares the two per pool); swaps completed, drain deferrals by reason, and the idle probes'
outcomes and latency are counted where they happen.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from typing import Any

from controlplane.api.v1alpha1 import ModelPoolStatus
from controlplane.api.v1alpha1.modelpool import (
    DEFAULT_SWAP_BUDGET,
    PHASE_SWAPPING,
    PHASES,
    parse_duration,
)
from controlplane.controllers.modelpool import metrics
from controlplane.controllers.modelpool.plan import slot_allocated_since


class PoolGauges:
    """Exports each pool's gauges and forgets a deleted pool's series."""

    def __init__(self) -> None:
        #: Per pool, the resident last exported (its gauge is removed when it changes).
        self._exported_resident: dict[str, frozenset[str]] = {}

    def export(
        self, namespace: str, pool: str, budget: str | None, status: ModelPoolStatus
    ) -> None:
        """The pool's gauges from the status just decided (written or unchanged)."""
        key = f"{namespace}/{pool}"
        residents = frozenset(status.residents)
        for gone in self._exported_resident.get(key, frozenset()) - residents:
            with contextlib.suppress(KeyError):
                metrics.POOL_RESIDENT.remove(namespace, pool, gone)
        for resident in residents:
            metrics.POOL_RESIDENT.labels(namespace, pool, resident).set(1)
        self._exported_resident[key] = residents
        for phase in PHASES:
            metrics.POOL_PHASE.labels(namespace, pool, phase).set(int(status.phase == phase))
        since = 0.0
        if status.phase == PHASE_SWAPPING:
            since = _epoch_seconds(slot_allocated_since(status)) or time.time()
        metrics.SWAPPING_SINCE.labels(namespace, pool).set(since)
        metrics.SWAP_BUDGET.labels(namespace, pool).set(
            parse_duration(budget, parse_duration(DEFAULT_SWAP_BUDGET, 300.0))
        )

    def forget(self, namespace: str, pool: str) -> None:
        """A deleted pool's series go with it."""
        residents = self._exported_resident.pop(f"{namespace}/{pool}", frozenset())
        removals: list[tuple[Any, tuple[str, ...]]] = [
            (metrics.SWAPPING_SINCE, (namespace, pool)),
            (metrics.SWAP_BUDGET, (namespace, pool)),
            *((metrics.POOL_PHASE, (namespace, pool, phase)) for phase in PHASES),
        ]
        removals += [(metrics.POOL_RESIDENT, (namespace, pool, m)) for m in sorted(residents)]
        for family, labels in removals:
            with contextlib.suppress(KeyError):
                family.remove(*labels)


def _epoch_seconds(stamp: str | None) -> float | None:
    """An RFC 3339 condition time as Unix seconds, or None."""
    if not stamp:
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
