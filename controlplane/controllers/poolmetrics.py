"""The pool controller's own Prometheus metrics, in the framework's registry (DESIGN 4.4, 6).

``modelpool_member_write_conflicts_total{pool, member}`` counts member writes the API server
refused with 409 (``MemberWriteConflict``): somebody (an activator scaling a failed target down,
a human) wrote the member after our cache last saw it. Each is requeued and decided again on the
newer object, never retried blindly, so a rising count means contention, not lost writes.

The router-proxy counts its own conflicts under the same name and labels, in its own process, and
registers its counter when its module is imported. Both modules are imported into one process
(the console script imports the operator and the router-proxy; so do the unit tests), and a
registry refuses a name twice. So this side registers lazily, on first use, and takes the family
already in the registry when there is one (:func:`member_write_conflicts`).
"""

from __future__ import annotations

import functools
from typing import Final

from prometheus_client import CollectorRegistry, Counter

from controlplane.runtime.metrics import REGISTRY

MEMBER_WRITE_CONFLICTS_NAME: Final = "modelpool_member_write_conflicts"
MEMBER_WRITE_CONFLICTS_LABELS: Final = ("pool", "member")


@functools.cache
def member_write_conflicts(registry: CollectorRegistry = REGISTRY) -> Counter:
    """The conflict counter of ``registry``: registered on first use, or the one registered
    there already under the same name (the router-proxy's)."""
    try:
        return Counter(
            MEMBER_WRITE_CONFLICTS_NAME,
            "Member writes refused with 409 (MemberWriteConflict), by pool and member.",
            MEMBER_WRITE_CONFLICTS_LABELS,
            registry=registry,
        )
    except ValueError:  # "Duplicated timeseries": registered by the other side of this process
        existing = registry._names_to_collectors.get(f"{MEMBER_WRITE_CONFLICTS_NAME}_total")
        if isinstance(existing, Counter):
            return existing
        raise
