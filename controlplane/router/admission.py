"""Admission: whether a request for a pool member may be forwarded now, and its swap budget.

*Why a module of its own:* every request asks it, on the fast path and again at each wake of a
held one, and every swap driver asks it to know its target is up; it only reads the informer
caches (nothing is dispatched on belief alone: readiness is read at the moment a request is
dispatched), so it is the activator's one part with no state and no I/O of its own, testable as
a table and shared by the held requests and the drivers without either knowing the other.

**Admission to the resident closes pool-wide** once the turn has passed: while a live intent on
the pool's Lease names another member (in a pool with a budget: and names the resident among those
that leave for it, :mod:`controlplane.scheduling.budget`), no replica forwards a new request to the
resident (the fast path included); those requests are held as demand for its next turn, the ones
in flight finish (the pool controller's ``/slots`` gate drains only then), and the swap runs.
Nothing in flight is ever aborted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from controlplane.api.v1alpha1.inferenceservice import PHASE_READY
from controlplane.api.v1alpha1.modelpool import (
    DEFAULT_SWAP_BUDGET,
    serves_from_slot_server,
)
from controlplane.router.routing import parse_duration
from controlplane.router.schedule import PoolSchedule
from controlplane.runtime.objects import ObjectView

DEFAULT_BUDGET_SECONDS = parse_duration(DEFAULT_SWAP_BUDGET, 300.0)


class ClusterView(Protocol):
    """What the activator reads: the informer caches of the proxy's namespace."""

    def pool(self, name: str) -> ObjectView | None: ...

    def isvc(self, name: str) -> ObjectView | None: ...

    def member_urls(self, member: str) -> list[str]: ...

    def member_starting_urls(self, member: str) -> list[str]:
        """Where the member's pods that are listed but not ready (nor terminating) answer."""
        ...

    def pool_leases(self, pool: str) -> list[ObjectView]:
        """The Leases labelled with ``pool``: its intent and every replica's demand report."""
        ...


class Admission:
    """Reads the caches for a pool member's readiness, admission and the pool's swap budget."""

    def __init__(
        self,
        view: ClusterView,
        schedule: PoolSchedule,
        reported: Callable[[str], bool] = lambda pool: True,
    ) -> None:
        self.view = view
        self.schedule = schedule
        #: Whether our demand report of a pool is live
        #: (:meth:`~controlplane.router.demand.DemandReporter.live`): until it is, the pool's
        #: fenced drain cannot see us, so we admit nothing to it.
        self.reported = reported

    def ready_url(self, pool_name: str, member: str) -> str | None:
        """The member's URL if it is one of the pool's Ready residents with a ready endpoint,
        admission to it is open
        (:meth:`~controlplane.router.schedule.PoolSchedule.admission_closed`) and our report of
        the pool is live, else None."""
        if member not in self.schedule.residents(pool_name):
            return None
        self.schedule.residency(pool_name)
        if self.schedule.admission_closed(pool_name, member) or not self.reported(pool_name):
            return None
        if not self._serving(pool_name, member):
            return None
        urls = self.view.member_urls(member)
        return urls[0] if urls else None

    def _serving(self, pool_name: str, member: str) -> bool:
        """The member's server is up: its InferenceService is Ready, or, of a pool with a slot
        server, the pool's own entry says its model is loaded there (one watch event sooner than
        the InferenceService, which copies it)."""
        pool = self.view.pool(pool_name) or {}
        if serves_from_slot_server(pool):
            entries = (pool.get("status") or {}).get("members") or ()
            phase = next((e.get("phase") for e in entries if e.get("name") == member), None)
            return bool(phase == PHASE_READY)
        isvc = self.view.isvc(member)
        return isvc is not None and (isvc.get("status") or {}).get("phase") == PHASE_READY

    def budget(self, pool_name: str) -> float:
        """The pool's ``swapBudget`` in seconds (the default when unset or unreadable)."""
        pool = self.view.pool(pool_name) or {}
        text = (pool.get("spec") or {}).get("swapBudget")
        return parse_duration(text, DEFAULT_BUDGET_SECONDS)
