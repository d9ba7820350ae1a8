"""The delaying layer: ``add_after(key, delay)`` queues a key once a delay has passed.

Contract (client-go's ``DelayingInterface``):

* ``delay <= 0`` is a plain ``add``.
* A key waits at most once: a second ``add_after`` for a waiting key can only move it *earlier*
  (a later request is ignored), so a flood of requeues cannot postpone a key indefinitely.
* A waiting key and a queued key are independent: when a waiting key becomes due it is added,
  and collapses with the queued copy if that one has not been picked up yet.
* Every ``add_after`` counts as a retry in the metrics, as in client-go.
* Shut-down drops keys whose time has not come yet; keys already due are still handed out.

Unlike client-go there is no goroutine moving due keys across. The keys wait in a heap, and the
queue moves the due ones first thing in every operation (``add``, ``add_after``, ``get``,
``done``, ``len``, shut-down), so no operation can tell the difference; a ``get`` that finds
nothing parks with the earliest deadline as its timer, and a new earliest deadline wakes the
parked ``get``\\s to re-arm. Workers that are idle therefore see a key exactly when it is due,
and busy ones see it when they next ask, which is when client-go's would have seen it too. The
queue latency of a delayed key is measured from when it became due, not from when it moved, so
the metric is the same as client-go's. What differs: no task to start or stop, and the depth
gauge counts a due key from the next queue call rather than from its deadline.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Protocol, TypeVar

from controlplane.runtime.workqueue.clock import Clock
from controlplane.runtime.workqueue.metrics import MetricsProvider
from controlplane.runtime.workqueue.queue import Queue, WorkQueue

K = TypeVar("K", bound=Hashable)


class DelayingWorkQueue(WorkQueue[K], Protocol[K]):
    """A :class:`WorkQueue` that can also queue a key after a delay."""

    def add_after(self, key: K, delay: float) -> None: ...


class DelayingQueue(Queue[K]):
    """The basic queue plus ``add_after`` (see the module docstring for the contract)."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        super().__init__(name, clock=clock, metrics_provider=metrics_provider)
        # Heap of (ready_at, sequence, key). Moving a key earlier pushes a new entry; the old one
        # stays in the heap but no longer matches ``_waiting`` and is skipped when it surfaces.
        self._heap: list[tuple[float, int, K]] = []
        self._waiting: dict[K, tuple[float, int]] = {}
        self._sequence = itertools.count()

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed (only ever earlier than already asked)."""
        self._refresh()
        if self._shutting_down:
            return
        self._metrics.retried()
        if delay <= 0:
            self.add(key)
            return
        ready_at = self._clock.now() + delay
        current = self._waiting.get(key)
        if current is not None and current[0] <= ready_at:
            return
        entry = (ready_at, next(self._sequence))
        self._waiting[key] = entry
        heapq.heappush(self._heap, (*entry, key))
        self._drop_stale_top()
        if self._heap[0][1] == entry[1]:
            self._wake_all()  # parked getters hold timers for a later deadline: re-arm them

    def _refresh(self) -> None:
        heap = self._heap
        if not heap:
            return
        now = self._clock.now()
        while heap and heap[0][0] <= now:
            ready_at, sequence, key = heapq.heappop(heap)
            if self._waiting.get(key) == (ready_at, sequence):
                del self._waiting[key]
                self._mark_dirty(key, ready_at)

    def _wake_deadline(self) -> float | None:
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def _begin_shutdown(self, *, drain: bool) -> None:
        if not self._shutting_down:
            self._refresh()  # what is already due still gets processed
            self._heap.clear()
            self._waiting.clear()
        super()._begin_shutdown(drain=drain)

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap and self._waiting.get(heap[0][2]) != (heap[0][0], heap[0][1]):
            heapq.heappop(heap)
