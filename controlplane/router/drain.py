"""A stopping router-proxy drains itself: not Ready, nothing held, its relays ended, then exit.

*Why a module of its own:* the order of a stop is what keeps a stream whole through a rollout,
an eviction or a node drain, and it spans three parts that each know only their own job (the
activator, the HTTP server, the demand reports). The timeline is
:class:`~controlplane.router.stopplan.StopPlan`'s; this is its I/O, run by the manager on SIGTERM
before it cancels what is left (``Manager.run_until_signal``'s ``before_shutdown``):

1. **At once:** ``/readyz`` answers 503 (``stopping``), and the activator stops: the requests it
   holds get 503 ``proxy_stopping`` with a ``Retry-After`` (openai-python retries that by
   itself, through the Service, to a replica that is not stopping), no swap is started, and the
   pool Lease it holds is released. New requests are still accepted and served meanwhile (a
   member that is ready is forwarded to; one that is not is refused the same way).
2. **After the endpoint-propagation delay:** the listening socket closes; idle kept-alive
   connections close, busy ones after their answer.
3. **Until the budget:** every answer in flight, streams included, is relayed to its end; at
   the budget what is left is cut, so the process exits before SIGKILL.
4. **Last**, once the HTTP server has returned (so every in-flight count is released), the
   manager cancels the rest: the DemandReporter empties this replica's reports only then, so
   until the last relay ends the pools see this replica's members as active.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from controlplane.clock import TimeSource
from controlplane.router.stopplan import StopPlan

log = logging.getLogger(__name__)

#: ``/readyz``'s reason while the replica stops.
STOPPING_REASON = "stopping: relaying what is in flight, then exiting"


class ProxyDrain:
    """The stop sequence of one router-proxy replica; :attr:`stopping` is its readiness."""

    def __init__(
        self,
        plan: StopPlan,
        stop_activator: Callable[[], Awaitable[None]],
        drain_server: Callable[[float], Awaitable[None]],
        *,
        clock: TimeSource = time.monotonic,
    ) -> None:
        self.plan = plan
        self.stop_activator = stop_activator
        self.drain_server = drain_server
        self.clock = clock
        #: Since when (on :attr:`clock`) the replica stops; None while it serves.
        self.since: float | None = None

    @property
    def stopping(self) -> bool:
        return self.since is not None

    def not_ready(self) -> str | None:
        """``/readyz``'s extra reason: None while serving."""
        return STOPPING_REASON if self.stopping else None

    async def run(self) -> None:
        """Steps 1 to 3 of the module's sequence; returns once the HTTP server has."""
        if self.since is not None:
            return
        started = self.since = self.clock()
        log.info("router-proxy stopping: %s", self.plan.describe())
        with anyio.move_on_after(self.plan.accepting_for):
            await self.stop_activator()  # bounded by the swap drivers' release patience
        if (left := self.plan.accepting_for - (self.clock() - started)) > 0:
            await anyio.sleep(left)
        relay = self.plan.relay_for(self.clock() - started)
        log.info("router-proxy stopping: no new connections; relays have %.1f s", relay)
        await self.drain_server(relay)
        log.info("router-proxy stopping: relays ended after %.1f s", self.clock() - started)
