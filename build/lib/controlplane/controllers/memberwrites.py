"""Metrics of the pool's member writes, shared by both writers (docs/modelpool.md, docs/router.md).

``modelpool_member_write_conflicts_total{pool, member}`` counts member writes the API server
refused with 409 (``MemberWriteConflict``): somebody (an activator scaling a failed target down,
the pool controller, a human) wrote the member after the writer last read it. Neither writer
retries blindly: the pool controller requeues and decides again on the newer object, the
activator re-reads and re-decides, so a rising count means contention, not lost writes.

Both the pool controller and the router-proxy's activator count here, each in its own process;
one definition, because a registry refuses a name twice and both are imported into one process
by the console script and the unit tests. It sits beside the controller packages rather than in
:mod:`controlplane.controllers.modelpool` so that the router-proxy, which counts here too, imports
nothing of the pool controller (an import-linter contract).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

from controlplane.runtime.metrics import REGISTRY

MEMBER_WRITE_CONFLICTS_NAME: Final = "modelpool_member_write_conflicts"

MEMBER_WRITE_CONFLICTS = Counter(
    MEMBER_WRITE_CONFLICTS_NAME,
    "Member writes refused with 409 (MemberWriteConflict) and re-decided from a fresh read.",
    ("pool", "member"),
    registry=REGISTRY,
)
