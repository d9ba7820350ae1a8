"""When a stopping router-proxy does what: the timeline of its drain, from its grace period.

*Why a module of its own:* the timeline is pure arithmetic on three numbers (the pod's grace
period, the endpoint-propagation delay, the exit margin), and it decides whether a stream in
flight is relayed whole or cut at SIGKILL. Kept apart from the I/O that follows it
(:mod:`controlplane.router.drain`) so its unit tests (``tests/unit/test_router_stopplan.py``) can
check every edge, a grace period shorter than the delay included.

From SIGTERM (time 0):

* ``0``: not Ready (``/readyz`` 503), the held requests answered 503 ``proxy_stopping`` with a
  ``Retry-After``, no swap started, the pool Lease released; still accepting and serving.
* :attr:`StopPlan.accepting_for`: the listening socket closes (kube-proxy and the load balancers
  in front have had that long to take the pod out of their endpoints); idle kept-alive
  connections close, busy ones after their answer.
* :meth:`StopPlan.relay_for`: what is still relayed (streams included) has until
  :attr:`StopPlan.budget`, the grace period less the margin; then it is cut, so the process exits
  by itself (its demand reports emptied, its spans flushed) before the kubelet's SIGKILL.

**Why in the process, not a ``preStop`` hook.** A ``lifecycle.preStop.sleep`` (Kubernetes 1.30
and later) would need no code, but during it the process does not know it is stopping: it stays
Ready, keeps holding requests and may start a swap it must then abandon, and the pool's Lease stays
claimed for the whole sleep. Here the process knows at SIGTERM: readiness fails at once (which
also turns the EndpointSlice's ``serving`` condition false, so kube-proxy's fallback to
terminating endpoints skips it), the held requests get their retryable 503 at once, and the delay
is a flag next to the budget it is taken from. It needs no ``sleep`` binary in the image either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from controlplane.api.v1alpha1.modelrouter import DEFAULT_PROXY_TERMINATION_GRACE_SECONDS

#: Seconds a stopping proxy keeps accepting after SIGTERM (``--shutdown-delay``): kube-proxy
#: applies an EndpointSlice change within a second or two on a quiet cluster; ingress controllers
#: and cloud load balancers that follow the endpoints take a few more.
DEFAULT_SHUTDOWN_DELAY_SECONDS: Final = 5.0
#: Seconds of the grace period kept for after the relays (``--shutdown-margin``): the demand
#: reports emptied (bounded by 2 s), the spans flushed, the interpreter's exit.
DEFAULT_SHUTDOWN_MARGIN_SECONDS: Final = 5.0
#: ``--termination-grace-period``'s default: the ModelRouter field's, which the operator passes.
DEFAULT_GRACE_SECONDS: Final = float(DEFAULT_PROXY_TERMINATION_GRACE_SECONDS)


@dataclass(frozen=True)
class StopPlan:
    """A stop's timeline, in seconds after SIGTERM."""

    #: The pod's ``terminationGracePeriodSeconds``: SIGKILL comes this long after SIGTERM.
    grace: float = DEFAULT_GRACE_SECONDS
    #: How long to keep accepting after SIGTERM, for the endpoints to be updated everywhere.
    delay: float = DEFAULT_SHUTDOWN_DELAY_SECONDS
    #: How much of the grace period the process keeps for its own exit.
    margin: float = DEFAULT_SHUTDOWN_MARGIN_SECONDS

    def __post_init__(self) -> None:
        if min(self.grace, self.delay, self.margin) < 0:
            raise ValueError("a stop's grace period, delay and margin cannot be negative")

    @property
    def budget(self) -> float:
        """When the last relay is cut: the grace period less the margin (0 when the margin
        takes it all)."""
        return max(0.0, self.grace - self.margin)

    @property
    def accepting_for(self) -> float:
        """When the listening socket closes: the delay, unless the budget is shorter."""
        return min(self.delay, self.budget)

    def relay_for(self, elapsed: float) -> float:
        """How long what is relayed may still take, ``elapsed`` seconds after SIGTERM."""
        return max(0.0, self.budget - max(0.0, elapsed))

    def describe(self) -> str:
        """One log line's worth: what the stop waits for, and its bound."""
        return (
            f"not ready now; accepting for {self.accepting_for:g} s; relays cut "
            f"{self.budget:g} s after SIGTERM (grace period {self.grace:g} s, margin "
            f"{self.margin:g} s)"
        )
