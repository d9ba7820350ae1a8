"""The basic work queue: fair, deduplicating, and never hands one key to two workers at once.

Contract (client-go's ``workqueue.Interface``, which controllers rely on to be level-triggered):

* A key is *dirty* from ``add`` until a worker ``get``\\s it. Adding a dirty key again does
  nothing: any number of events for one object collapse into one reconcile.
* A key is *processing* from ``get`` until ``done``. It is never handed to a second worker while
  processing. An ``add`` while processing marks it dirty again, and ``done`` puts it back at the
  tail, so the change that arrived mid-reconcile is seen by one more reconcile, never lost.
* Keys come out in the order they became queued (FIFO), which keeps the queue fair.
* After ``shut_down`` adds are ignored, but ``get`` keeps handing out what is already queued and
  raises :class:`QueueShutDown` only once nothing is left; ``shut_down_with_drain`` also waits
  until every processing key is ``done``. Workers therefore loop until ``QueueShutDown`` and no
  queued key is dropped on the way out.

Concurrency: the whole framework runs on one event loop, so the queue's state changes only
between awaits and needs no lock; what client-go does with a mutex and ``sync.Cond`` is done here
by having no ``await`` inside any state change. Each waiting ``get`` parks in its own
``anyio.CancelScope``; a state change that makes work available cancels exactly one of them
(``Signal``), shut-down cancels all (``Broadcast``). A parked ``get`` sleeps on the injected clock
when a lower layer gives it a deadline (the delaying queue), so one mechanism serves "woken by
work" and "woken by time", for the real clock and the fake one alike.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel

from controlplane.runtime.workqueue.clock import Clock, SystemClock
from controlplane.runtime.workqueue.errors import NotProcessing, QueueShutDown
from controlplane.runtime.workqueue.metrics import MetricsProvider, QueueMetrics, queue_metrics

K = TypeVar("K", bound=Hashable)


class WorkQueue(Protocol[K]):
    """The interface of the basic queue (see the module docstring for the contract)."""

    def add(self, key: K) -> None: ...

    async def get(self) -> K: ...

    def done(self, key: K) -> None: ...

    def __len__(self) -> int: ...

    def shut_down(self) -> None: ...

    async def shut_down_with_drain(self) -> None: ...

    def shutting_down(self) -> bool: ...


class Queue(Generic[K]):
    """The basic queue. ``name`` labels its metrics; an unnamed queue records none."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        metrics_provider: MetricsProvider | None = None,
    ) -> None:
        self.name = name
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._metrics: QueueMetrics[K] = queue_metrics(name, metrics_provider, self._clock)
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._getters: deque[anyio.CancelScope] = deque()
        self._drainers: list[anyio.Event] = []
        self._shutting_down = False
        self._draining = False

    # -- the interface ---------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Mark ``key`` as needing processing; a no-op if it is already queued or shut down."""
        self._refresh()
        if not self._shutting_down:
            self._mark_dirty(key, self._clock.now())

    async def get(self) -> K:
        """Wait for a key and take it; raises :class:`QueueShutDown` once shut down and empty.

        Always a checkpoint (it yields to the loop even when a key is ready), so a worker whose
        reconcile never awaits cannot starve the rest of the process.
        """
        await anyio.lowlevel.checkpoint()
        while True:
            self._refresh()
            if self._queue:
                return self._take()
            if self._shutting_down:
                raise QueueShutDown(self.name)
            await self._park(self._wake_deadline())

    def done(self, key: K) -> None:
        """Release ``key``; if it was added while processing, queue it again."""
        if key not in self._processing:
            raise NotProcessing(key)
        self._refresh()
        self._processing.remove(key)
        self._metrics.done(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wake_one()
        elif not self._processing:
            self._wake_drainers()

    def __len__(self) -> int:
        """How many keys are queued (waiting for a worker, not processing)."""
        self._refresh()
        return len(self._queue)

    def shut_down(self) -> None:
        """Stop accepting adds and release every waiter (a pending drain stops waiting too)."""
        self._begin_shutdown(drain=False)
        self._wake_drainers()

    async def shut_down_with_drain(self) -> None:
        """Shut down, then wait until no key is processing (or until ``shut_down`` is called)."""
        self._begin_shutdown(drain=True)
        await anyio.lowlevel.checkpoint()
        while self._processing and self._draining:
            drained = anyio.Event()
            self._drainers.append(drained)
            await drained.wait()

    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- hooks for the layers above --------------------------------------------------------

    def _refresh(self) -> None:
        """Called first by every operation: the delaying layer moves the keys that became due.

        Doing it before *every* operation, not only before reads, makes the lazy move
        indistinguishable from client-go's eager one: no operation can observe a key that is
        due but not yet queued.
        """

    def _wake_deadline(self) -> float | None:
        """When a parked ``get`` must look again even if nobody wakes it (``None``: never)."""
        return None

    def _begin_shutdown(self, *, drain: bool) -> None:
        self._shutting_down = True
        self._draining = drain
        self._wake_all()

    def _mark_dirty(self, key: K, at: float) -> None:
        """The one way a key enters the queue; ``at`` is when it became due (for the latency)."""
        if key in self._dirty:
            return
        self._metrics.added(key, at)
        self._dirty.add(key)
        if key in self._processing:
            return  # ``done`` will queue it
        self._queue.append(key)
        self._wake_one()

    def _wake_all(self) -> None:
        """Make every parked ``get`` look again (shut-down, or a deadline that moved earlier)."""
        while self._getters:
            self._getters.popleft().cancel()

    # -- internals ---------------------------------------------------------------------------

    def _take(self) -> K:
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        self._metrics.taken(key)
        return key

    def _wake_one(self) -> None:
        # Every scope in the deque belongs to a parked getter not yet woken: a woken getter was
        # popped here, a getter that left on its own removed itself.
        if self._getters:
            self._getters.popleft().cancel()

    def _wake_drainers(self) -> None:
        drainers, self._drainers = self._drainers, []
        for drained in drainers:
            drained.set()

    async def _park(self, deadline: float | None) -> None:
        """Sleep until woken by a state change, or until ``deadline`` on the clock."""
        scope = anyio.CancelScope()
        self._getters.append(scope)
        returned = False
        try:
            with scope:
                if deadline is None:
                    await anyio.sleep_forever()
                else:
                    await self._clock.sleep_until(deadline)
            returned = True
        finally:
            if not scope.cancel_called:
                self._getters.remove(scope)  # timed out, or cancelled from outside
            elif not returned:
                # Woken, but the worker is being cancelled and will not take the work it was
                # woken for: pass the wake-up on, or a key could sit queued beside an idle worker.
                self._wake_one()
