"""The pool's ``Ready`` condition: can the pool serve, or hold and then serve, a request now?

``Ready`` is the one condition generic tools read: ``kubectl wait --for=condition=Ready mpool/X``
and Helm 4's ``--wait`` (kstatus reads ``Ready`` when present: True is Current, False is still in
progress). So it must answer what those callers ask, "is this pool working?", and stay put through
the pool's normal life. A swap is the pool's normal life: a router holds a request while its member
is brought up, so a pool mid-swap is working. Were ``Ready`` to follow the phase, it would flip
twice per swap and a ``kubectl wait`` or a Helm upgrade started mid-swap would wait for traffic to
pause (and every swap would carry two more condition transitions in its status writes). The phase,
``SlotAllocated`` and ``SwapDeferred`` say where a swap stands; ``Ready`` says whether the pool can
do its job at all (docs/modelpool.md, "Ready").

:func:`pool_ready`, first rule that holds:

1. a member's InferenceService does not exist: False ``MembersNotFound``; or another pool holds
   a member's claim: False ``MemberInAnotherPool`` (:mod:`~controlplane.controllers.modelpool.
   claims`). The pool decides nothing until then (it is Degraded), so no request for any member
   could be served;
2. the drain waits on an idle check that failed (``SwapDeferred`` ``IdleCheckFailed``): False
   ``IdleCheckFailed``. Without an answer from ``/slots`` the slot is never handed over, and it
   ends only when the member answers again or someone fixes it (a member started without
   ``/slots``, a NetworkPolicy refusing the operator); a busy member (``PodsBusy``) is a drain that
   ends by itself when its requests finish, so it does not count;
3. otherwise True ``AcceptingRequests``: cold (the first request warms it), warming, swapping,
   or settled, a request is served by the resident or held until its member is up.

A member's own trouble (weights still downloading or failed, a crashing server) is not the pool's:
it shows on that member's ``Ready`` and in ``SlotAllocated``, the pool still serves its other
members, and an abandoned swap returns it to its resident.

The decision reads only what the same status write already carries (the members found, the
deferral), and its True message is constant: ``Ready`` changes only in a write that changes
``MembersValid`` or ``SwapDeferred`` anyway, so it adds no status write to any swap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from controlplane.api.v1alpha1.conditions import FALSE, TRUE
from controlplane.api.v1alpha1.modelpool import REASON_IDLE_CHECK_FAILED

REASON_ACCEPTING_REQUESTS: Final = "AcceptingRequests"
#: The same reason as ``MembersValid`` False: one cause, one name.
REASON_MEMBERS_NOT_FOUND: Final = "MembersNotFound"

ACCEPTING_MESSAGE: Final = (
    "every member exists and the slot can be handed over: a request is served by the resident "
    "or held until its member is up"
)


@dataclass(frozen=True, slots=True)
class ReadyDecision:
    """``Ready``: (status, reason, message)."""

    status: str
    reason: str
    message: str

    @property
    def condition(self) -> tuple[str, str, str]:
        return (self.status, self.reason, self.message)


def pool_ready(
    invalid: tuple[str, str, str] | None, deferral: tuple[str, str] | None
) -> ReadyDecision:
    """``Ready`` from ``MembersValid`` when False (status, reason, message: a member not found,
    or one another pool holds) and the drain's deferral (reason, message), by the rules in the
    module docstring (first match wins)."""
    if invalid is not None:
        _, reason, message = invalid
        return ReadyDecision(FALSE, reason, f"{message}; the pool decides nothing until then")
    if deferral is not None and deferral[0] == REASON_IDLE_CHECK_FAILED:
        return ReadyDecision(
            FALSE,
            REASON_IDLE_CHECK_FAILED,
            f"the slot cannot be handed over until the idle check answers; {deferral[1]}",
        )
    return ReadyDecision(TRUE, REASON_ACCEPTING_REQUESTS, ACCEPTING_MESSAGE)
