"""The fenced drain: a member's idle probe waits until every router replica has closed it.

*Why a room of its own:* it is the one rule that makes the ``/slots`` gate sound against requests
still on their way, and every way a member stops (a swap, a reclaim, a change to its pod, a
node move, a lowered capacity, a slot-server change) reaches the probe through the plan, so the
fence is applied in one place, as a pure function of what the reconcile read (docs/design.md,
"One fenced drain").

Without it, a probe could read "idle" while a request admitted by a replica whose cache had not
yet seen the closure was on the wire to the member, and the stop would cut it. With it:

1. Every member the plan wants to probe is first *published* in ``status.admissionClosed``; each
   time a member joins that list ``status.admissionGeneration`` is raised. Every replica holds new
   requests for a member in that list (its admission reads the pool's status from its cache).
2. Each live replica acknowledges in its demand report (:class:`~controlplane.api.v1alpha1.demand.
   AdmissionAck`) the generation its cache has applied and its requests in flight on each closed
   member. A replica counts a request in flight *before* it checks admission and sends it, so a
   report that acknowledges generation G with nothing in flight on M proves that replica sends M
   nothing more.
3. A member is probed only once it was published by the status this reconcile read (so its
   generation is the one the replicas acknowledge) and every live report acknowledges that
   generation with nothing in flight on it. A replica that has not written its report yet
   admits nothing (it admits to a pool only once its report is written), one whose report
   expired is taken for gone (the cost: docs/modelpool.md, "The fenced drain"), and a report
   with no acknowledgement (an older replica, a malformed one) holds the drain until it expires.

What it costs a swap: one status write and one report write per replica before the probe,
measured in bench/README.md ("The fenced drain's cost").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from controlplane.api.v1alpha1.demand import LiveReport


@dataclass(frozen=True, slots=True)
class Fence:
    """What the fence allows now: the closure to publish and the members that may be probed."""

    #: ``status.admissionClosed`` to write: every member the plan wants to probe.
    closed: tuple[str, ...] = ()
    #: ``status.admissionGeneration`` to write.
    generation: int = 0
    #: The members whose probe may run now.
    fenced: tuple[str, ...] = ()
    #: Of the members still waiting, why (in words for the pool's condition).
    waiting: dict[str, str] = field(default_factory=dict)


def judge_fence(
    probe: Sequence[str],
    published: Sequence[str],
    generation: int,
    reports: Sequence[LiveReport],
    holding: Sequence[str] = (),
) -> Fence:
    """The fence over the members the plan wants to probe (``probe``), given the closure the
    status this reconcile read had published (``published`` at ``generation``) and every live
    demand report of the pool's replicas. A published member the plan has released but whose pod
    is not gone yet (``holding``) stays closed: it may keep its title of resident until the next
    one is up, and nothing may be sent to a server that is stopping."""
    closed = tuple(sorted(set(probe) | (set(published) & set(holding))))
    raised = generation + 1 if set(closed) - set(published) else generation
    fenced: list[str] = []
    waiting: dict[str, str] = {}
    for member in sorted(set(probe)):
        if member not in published:
            waiting[member] = f"admission to {member} is being closed"
            continue
        why = [_unacknowledged(report, generation, member) for report in reports]
        missing = [w for w in why if w]
        if missing:
            waiting[member] = "; ".join(missing)
        else:
            fenced.append(member)
    return Fence(closed, raised, tuple(fenced), waiting)


def _unacknowledged(report: LiveReport, generation: int, member: str) -> str:
    """Why ``report`` does not yet let ``member`` be probed ("" when it does)."""
    ack = report.admission
    if ack is None:
        return f"router replica {report.holder} acknowledges no admission generation"
    if ack.generation < generation:
        return (
            f"router replica {report.holder} has applied admission generation "
            f"{ack.generation} of {generation}"
        )
    busy = ack.in_flight.get(member, 0)
    if busy:
        return f"router replica {report.holder} has {busy} request(s) in flight on {member}"
    return ""
