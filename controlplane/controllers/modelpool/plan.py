"""What a pool controller does with one snapshot of its members, and what it reports.

*Why one module of this size:* the plan, the status and the swap events read one snapshot and must
agree on it; the table tests drive them together.

Pure functions of what the caches and the idle probes say (no I/O), kept apart from the reconciler
so every rule is unit-tested as a table (``tests/unit/test_modelpool_plan.py``):

:func:`plan_actions` (docs/modelpool.md, "What the controller does")
    The plan's writes are the pool's own: ``status.members[].slot``
    (:mod:`~controlplane.controllers.modelpool.grant`), never a field of the member.

    * A member that does not exist makes the plan empty: a Degraded pool changes no slot.
    * **Drain.** Every member other than the owner that is not ``Released`` is released. One that
      is *serving* (its InferenceService is Ready, or it has a ready endpoint) is released only
      after its idle probe says idle on every ready endpoint (``probe``). One that is *starting*
      (a pod listed but not ready: its server may already answer, and the swap's driver forwards
      to a server that answers ``/health`` before its readiness probe says so) is probed on those
      endpoints too, and released when each is idle or does not answer (it is not up, so nothing
      can be in flight there). One with neither (no pod, or only Terminating ones) is released
      at once (``release``).
    * **Weights first.** An owner whose weights are not ready (its ``ModelReady`` is not True:
      still downloading, or failed) makes the plan empty: nothing is drained for a member that
      could not start, and ``SlotAllocated`` says ``WaitingForWeights`` (a swap never downloads).
    * **A change to a resident's pod** (its InferenceService's ``UpdatePending``, reason
      ``WaitingForPool``: docs/inferenceservice.md, "Changing a serving member") is carried out by
      the same drain: the resident (the owner, or one kept beside it) is probed and released like
      any other member (``refresh``), and the owner is granted again only once its
      InferenceService no longer reports the change pending (it went in with the Deployment at 0).
      Admission to it is closed meanwhile by every router-proxy replica, which reads the same
      condition (:meth:`~controlplane.router.schedule.PoolSchedule.admission_closed`).
    * **Owner up.** The owner is ``Granted`` only when every other member has *released* the slot:
      ``Released``, the release acknowledged by the member (``status.poolDecision``: see
      :mod:`~controlplane.controllers.modelpool.grant`), its Deployment (at least at the
      generation it acknowledged) at 0 replicas and observed so by the deployment controller, and
      no pod left, Terminating ones included (the GPU memory is freed when the process exits, not
      when its pod is marked for deletion).

:func:`pool_status` (docs/modelpool.md, status)
    * ``residentMember``: the owner once its InferenceService is Ready; until then the previous
      resident keeps the title (the slot is still its to return to: a withdrawn intent sends the
      pool back to it).
    * ``pendingMember``: the owner while it is not Ready.
    * ``phase``: Degraded when a member is missing; Pending when cold (no owner); Swapping while a
      member is pending or another member still holds the slot; Ready otherwise.
    * Conditions ``MembersValid``, ``SlotAllocated`` and ``SwapDeferred``, and ``Ready`` from
      them (:mod:`~controlplane.controllers.modelpool.ready`); ``members[]``;
      ``observedGeneration``.

:func:`deferral_from`, :func:`deployment_drained`, :func:`requeue_result` and :func:`transitions`
    What the probes' reports, a member's Deployment, a deferral and an intent, and a status change
    mean for the plan: one ``SwapDeferred``, whether a Deployment has released the slot, when to
    look again (the only timed requeues: ``/slots`` and a Lease's expiry have no watch event), and
    which events a status change tells.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from controlplane.api.v1alpha1 import set_condition
from controlplane.api.v1alpha1.conditions import FALSE, TRUE, find_condition
from controlplane.api.v1alpha1.modelpool import (
    CONDITION_MEMBERS_VALID,
    CONDITION_READY,
    CONDITION_SLOT_ALLOCATED,
    CONDITION_SWAP_DEFERRED,
    PHASE_DEGRADED,
    PHASE_IDLE,
    PHASE_PENDING,
    PHASE_READY,
    PHASE_SWAPPING,
    REASON_IDLE_CHECK_FAILED,
    REASON_PODS_BUSY,
    SLOT_GRANTED,
    SLOT_RELEASED,
    MemberStatus,
    ModelPool,
    ModelPoolStatus,
    WaitingDemand,
)
from controlplane.controllers.modelpool.fence import Fence
from controlplane.controllers.modelpool.intent import Intent, Owner, OwnerReason
from controlplane.controllers.modelpool.member import MemberState, missing_members
from controlplane.controllers.modelpool.ready import pool_ready
from controlplane.controllers.modelpool.residents import (
    budget_status,
    exclusive_budget,
    newly_resident,
    shared_residents,
)
from controlplane.probes.idle import IdleOutcome, IdleReport
from controlplane.runtime.controller import Result
from controlplane.runtime.timeutil import micro_time
from controlplane.scheduling.budget import Budget
from controlplane.scheduling.idle import IdleVerdict, stamp

#: How soon a deferred drain is probed again: the only polling, since ``/slots`` has no watch.
DEFER_REQUEUE_SECONDS: Final = 1.0
#: Shown waiting demand is re-read this often (an expired report brings no event).
WAITING_REQUEUE_SECONDS: Final = 5.0
#: A valid intent is re-checked this long after it would expire (its expiry has no event).
EXPIRY_MARGIN_SECONDS: Final = 0.1

#: ``members[].phase`` of a member whose InferenceService does not exist, or has no phase yet.
MEMBER_NOT_FOUND: Final = "NotFound"
MEMBER_UNKNOWN: Final = "Unknown"

REASON_MEMBERS_FOUND: Final = "MembersFound"
REASON_MEMBERS_NOT_FOUND: Final = "MembersNotFound"
REASON_MEMBER_IN_ANOTHER_POOL: Final = "MemberInAnotherPool"
REASON_RESIDENT_READY: Final = "ResidentReady"
REASON_COLD: Final = "Cold"
REASON_DRAINING: Final = "Draining"
REASON_WAITING_FOR_PODS: Final = "WaitingForPods"
REASON_STARTING: Final = "Starting"
REASON_NOT_DEFERRED: Final = "NotDeferred"
REASON_WAITING_FOR_WEIGHTS: Final = "WaitingForWeights"
REASON_RECLAIMING: Final = "Reclaiming"
REASON_IDLE: Final = "Idle"


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do now: probe then maybe release, release, grant the owner."""

    probe: tuple[str, ...] = ()
    release: tuple[str, ...] = ()
    grant: str | None = None
    #: Members other than the owner that still hold (part of) the slot.
    holding: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    #: The owner, when nothing is done because its weights are not ready yet.
    waiting_for_weights: str | None = None
    #: Residents drained (in ``probe`` or ``release``) because a change to their pod waits for
    #: the pool (their InferenceService's ``UpdatePending``).
    refresh: tuple[str, ...] = ()
    #: Members whose claim another pool holds, with that pool: nothing is done, as for missing.
    claimed: tuple[tuple[str, str], ...] = ()

    @property
    def invalid(self) -> bool:
        """A member is missing or claimed by another pool: the pool changes no slot."""
        return bool(self.missing or self.claimed)


def plan_actions(
    members: Mapping[str, MemberState],
    owner: str | None,
    keep: Collection[str] = (),
    budget: Budget | None = None,
) -> Plan:
    """The actions for this snapshot (rules in the module docstring). ``keep``: of a pool with a
    ``budget``, the residents that stay beside the owner (:func:`kept_residents`)."""
    missing = tuple(missing_members(members))
    claimed = tuple((n, m.claimed_by) for n, m in members.items() if m.claimed_by is not None)
    if missing or claimed:
        return Plan(missing=missing, claimed=claimed)
    staying = {owner, *keep}
    if (
        owner is not None
        and members[owner].slot != SLOT_GRANTED
        and not members[owner].weights_ready
    ):
        # A swap never downloads: nothing is drained for an owner that could not start.
        held = tuple(n for n, m in members.items() if n not in staying and not m.released)
        return Plan(holding=held, waiting_for_weights=owner)
    probe: list[str] = []
    release: list[str] = []
    holding: list[str] = []
    refresh: list[str] = []
    for name, state in members.items():
        if name in staying:
            if not (state.update_pending and state.slot == SLOT_GRANTED):
                continue
            refresh.append(name)  # drained like any other, granted again once changed
        else:
            if not state.released:
                holding.append(name)
            if state.slot == SLOT_RELEASED:
                continue
        (probe if state.serving or state.starting_urls else release).append(name)
    grant = None
    if (
        owner is not None
        and members[owner].slot != SLOT_GRANTED
        and not members[owner].update_pending
    ):
        room = not holding if budget is None else budget.fits(owner, [*holding, *keep])
        grant = owner if room else None
    return Plan(tuple(probe), tuple(release), grant, tuple(holding), refresh=tuple(refresh))


def decided_slots(
    members: Mapping[str, MemberState], released: Sequence[str], granted: str | None
) -> dict[str, str | None]:
    """Every member's slot after this reconcile: as last written, ``released`` ones Released,
    ``granted`` Granted. The one write of the pool's decision (``status.members[].slot``)."""
    slots = {name: state.slot for name, state in members.items() if state.found}
    slots.update(dict.fromkeys(released, SLOT_RELEASED))
    if granted is not None:
        slots[granted] = SLOT_GRANTED
    return slots


@dataclass(frozen=True, slots=True)
class Deferral:
    """A drain that waits: ``PodsBusy`` or ``IdleCheckFailed``, and what was seen."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PoolView:
    """Everything :func:`pool_status` needs besides the pool itself."""

    members: Mapping[str, MemberState]
    owner: Owner
    plan: Plan
    deferral: Deferral | None = None
    now: datetime | None = field(default=None, compare=False)
    #: Every replica's held demand for members other than the resident (``status.waiting``).
    waiting: Sequence[WaitingDemand] = ()
    #: The slots decided (:func:`decided_slots`); None: as last written.
    slots: Mapping[str, str | None] | None = None
    #: Of a pool with a budget: the budget, and the residents that stay beside the owner.
    budget: Budget | None = None
    keep: tuple[str, ...] = ()
    #: The idle clocks and the residents being given back (:mod:`~.idle`).
    idle: IdleVerdict = field(default_factory=IdleVerdict)
    #: The admission closed for the drain, as it is to be published (:mod:`~.fence`).
    fence: Fence = field(default_factory=Fence)
    #: How the members run (``status.runtime``, :mod:`~.slotswitch`); None: as last written.
    runtime: str | None = None


def _members_phase(
    members: Mapping[str, MemberState],
    residents: Collection[str],
    slots: Mapping[str, str | None],
    now: datetime | None,
    idle: IdleVerdict,
) -> list[MemberStatus]:
    """Each member's entry; a slot that changes now gets ``since`` now, others keep theirs; a
    resident's idle clock, if one runs."""
    out = []
    for name, state in members.items():
        phase = (state.phase or MEMBER_UNKNOWN) if state.found else MEMBER_NOT_FOUND
        slot = slots.get(name)
        since = state.since if slot == state.slot else (micro_time(now) if slot else None)
        resident = name in residents
        idle_since = stamp(idle.member_since.get(name)) if resident else None
        out.append(
            MemberStatus(
                name=name,
                phase=phase,
                resident=resident,
                slot=slot,
                since=since,
                idle_since=idle_since,
            )
        )
    return out


def _slot_condition(view: PoolView) -> tuple[str, str, str]:
    """SlotAllocated: (status, reason, message)."""
    owner, plan, members = view.owner.name, view.plan, view.members
    if plan.invalid:
        return FALSE, members_valid(plan)[1], "members are invalid; no replica is changed"
    if owner is None and view.owner.reason is OwnerReason.RECLAIMED:
        if plan.holding:
            leaving = ", ".join(plan.holding)
            return FALSE, REASON_RECLAIMING, f"{leaving} idle: giving the slot back"
        if view.keep:
            return TRUE, REASON_RESIDENT_READY, f"{', '.join(view.keep)} hold the slot"
        return (FALSE, REASON_IDLE, "the slot was given back after spec.scheduling.idleAfter; "
                "the next request brings its member up")  # fmt: skip
    if owner is None:
        return FALSE, REASON_COLD, "no member is requested, resident or default: the pool is cold"
    if plan.waiting_for_weights is not None:
        weights = members[owner].weights or "not ready"
        message = f"{owner} waits for its weights ({weights}); nothing is drained until they are"
        return FALSE, REASON_WAITING_FOR_WEIGHTS, message
    draining = [n for n in plan.holding if members[n].slot != SLOT_RELEASED]
    if draining:
        return FALSE, REASON_DRAINING, f"{owner} waits for {', '.join(draining)} to drain"
    if plan.holding:
        return (
            FALSE,
            REASON_WAITING_FOR_PODS,
            f"{owner} waits for the pods of {', '.join(plan.holding)} to be gone",
        )
    if members[owner].ready:
        return TRUE, REASON_RESIDENT_READY, f"{owner} holds the slot"
    return FALSE, REASON_STARTING, f"{owner} is starting"


def pool_status(pool: ModelPool, view: PoolView) -> ModelPoolStatus:
    """The status to write: a copy of the current one with every field we own set.

    A condition's ``lastTransitionTime`` moves only when its status flips, so the result equals
    the current status whenever nothing changed.
    """
    status = ModelPoolStatus.from_dict(pool.status.to_dict())
    generation = pool.metadata.generation
    members, owner, plan = view.members, view.owner.name, view.plan
    previous = status.resident_member if status.resident_member in members else None
    slots = view.slots if view.slots is not None else {n: m.slot for n, m in members.items()}
    if plan.invalid:
        # Nothing moves while the pool is Degraded: keep resident and pending as they were.
        resident = previous
        pending = status.pending_member if status.pending_member in members else None
        phase = PHASE_DEGRADED
    else:
        owner_ready = owner is not None and members[owner].ready
        resident = owner if owner_ready else previous
        pending = owner if owner is not None and not owner_ready else None
        if owner is None and view.owner.reason is OwnerReason.RECLAIMED:
            # Given back for idleness: Swapping while it drains, then Idle (or Ready beside
            # the residents a budget keeps), and the title goes with the slot.
            phase = PHASE_SWAPPING if plan.holding else PHASE_READY if view.keep else PHASE_IDLE
            if phase == PHASE_IDLE:
                resident = None
        elif owner is None:
            phase = PHASE_PENDING
        elif pending is not None or plan.holding:
            phase = PHASE_SWAPPING
        else:
            phase = PHASE_READY
    if view.budget is None:
        residents = [resident] if resident is not None else []
        status.budget = exclusive_budget(slots)
    else:
        before = status.resident_names
        residents = before if plan.invalid else shared_residents(before, owner, members, slots)
        if resident not in residents:
            resident = residents[-1] if residents else None
        status.budget = budget_status(view.budget, members, slots)
    status.phase = phase
    status.resident_member = resident
    status.pending_member = pending
    status.residents = residents
    status.members = _members_phase(members, residents, slots, view.now, view.idle)
    status.waiting = [w for w in view.waiting if w.member not in residents]
    status.idle_since = stamp(view.idle.pool_since)
    status.reclaiming = [m for m in view.idle.due if m in residents]
    if not plan.invalid:  # a Degraded pool keeps its closure as it was: nothing moves
        status.admission_closed = list(view.fence.closed)
        status.admission_generation = view.fence.generation or status.admission_generation
    if not plan.invalid and view.runtime is not None:
        status.runtime = view.runtime  # a Degraded pool keeps it as it was: nothing moves
    status.observed_generation = generation

    invalid = members_valid(plan) if plan.invalid else None
    valid = invalid or (TRUE, REASON_MEMBERS_FOUND, f"all {len(members)} member(s) exist")
    set_condition(status.conditions, CONDITION_MEMBERS_VALID, *valid, generation, view.now)
    slot = _slot_condition(view)
    set_condition(status.conditions, CONDITION_SLOT_ALLOCATED, *slot, generation, view.now)
    if view.deferral is not None:
        deferred = (TRUE, view.deferral.reason, view.deferral.message)
    else:
        deferred = (FALSE, REASON_NOT_DEFERRED, "no drain is waiting on a member")
    set_condition(status.conditions, CONDITION_SWAP_DEFERRED, *deferred, generation, view.now)
    waits = (view.deferral.reason, view.deferral.message) if view.deferral is not None else None
    ready = pool_ready(invalid, waits)
    set_condition(status.conditions, CONDITION_READY, *ready.condition, generation, view.now)
    return status


def members_valid(plan: Plan) -> tuple[str, str, str]:
    """``MembersValid`` False of an invalid plan: the members not found first, else the members
    another pool holds, each named with that pool."""
    if plan.missing:
        return (FALSE, REASON_MEMBERS_NOT_FOUND,
                f"InferenceService(s) not found: {', '.join(plan.missing)}")  # fmt: skip
    held = ", ".join(f"{member} (held by pool {other})" for member, other in plan.claimed)
    return (FALSE, REASON_MEMBER_IN_ANOTHER_POOL,
            f"member(s) listed by another pool first: {held}; this pool neither grants nor "
            "drains them")  # fmt: skip


def status_changed(current: ModelPoolStatus, wanted: ModelPoolStatus) -> bool:
    return bool(current.to_dict() != wanted.to_dict())


def slot_allocated_since(status: ModelPoolStatus) -> str | None:
    """When ``SlotAllocated`` last flipped (RFC 3339), for how long a swap took."""
    condition = find_condition(status.conditions, CONDITION_SLOT_ALLOCATED)
    return condition.last_transition_time if condition is not None else None


# -- what the probes, the Deployment, the deferral and the intent mean ---------------------------


def blocking_reports(
    state: MemberState, results: Sequence[tuple[str, IdleReport]]
) -> list[tuple[str, IdleReport]]:
    """The probes that keep ``state``'s member from being released: of a serving member, every
    one that did not say idle; of a starting one, every one whose server answered and did not say
    idle (a server that does not answer is not up: nothing is in flight there)."""
    return [
        (url, report)
        for url, report in results
        if report.outcome is not IdleOutcome.IDLE and (state.serving or report.answered)
    ]


def deferral_from(reports: Mapping[str, Sequence[tuple[str, IdleReport]]]) -> Deferral | None:
    """One ``SwapDeferred`` out of the probes of the members that are not idle.

    ``IdleCheckFailed`` wins over ``PodsBusy`` when both are seen: it is the one that needs a
    human if it persists.
    """
    failed, busy = [], []
    for member, results in reports.items():
        for url, report in results:
            if report.outcome is IdleOutcome.FAILED:
                failed.append(f"{member} at {url}: {report.detail}")
            elif report.outcome is IdleOutcome.BUSY:
                busy.append(f"{member} at {url}: {report.detail}")
    if failed:
        return Deferral(
            REASON_IDLE_CHECK_FAILED,
            "drain deferred, the idle check failed: " + "; ".join(failed + busy),
        )
    if busy:
        return Deferral(REASON_PODS_BUSY, "drain deferred, requests in flight: " + "; ".join(busy))
    return None


def deployment_drained(deployment: Mapping[str, Any] | None) -> bool:
    """Absent, or asked for 0 replicas, observed so by the deployment controller, none left."""
    if deployment is None:
        return True
    spec_replicas = (deployment.get("spec") or {}).get("replicas")
    status = deployment.get("status") or {}
    generation = deployment["metadata"].get("generation") or 0
    observed = status.get("observedGeneration")
    return (
        spec_replicas == 0
        and observed is not None
        and observed >= generation
        and not status.get("replicas")
    )


def requeue_result(
    deferral: Deferral | None,
    intent: Intent | None,
    waiting: bool = False,
    idle: IdleVerdict | None = None,
    fencing: bool = False,
) -> Result:
    """When to look again although no watch event may come: a deferred drain is re-probed after
    :data:`DEFER_REQUEUE_SECONDS`, a valid intent re-checked just after it would expire, shown
    waiting demand re-read after :data:`WAITING_REQUEUE_SECONDS` (a report of a replica that died
    expires with no event), an idle clock looked at as it falls due, and a fenced drain looked at
    again as a backstop (the replicas' acknowledgements come as report events, an expired report
    with none)."""
    delays = []
    if idle is not None and idle.next_due_in is not None:
        delays.append(idle.next_due_in + EXPIRY_MARGIN_SECONDS)
    if deferral is not None or fencing:
        delays.append(DEFER_REQUEUE_SECONDS)
    if intent is not None:
        delays.append(intent.expires_in + EXPIRY_MARGIN_SECONDS)
    if waiting:
        delays.append(WAITING_REQUEUE_SECONDS)
    return Result(requeue_after=min(delays)) if delays else Result()


# -- what a status change tells ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """One event a status change is worth: ``Degraded``, ``SwapAbandoned``, ``SwapStarted`` or
    ``SwapCompleted``."""

    warning: bool
    reason: str
    action: str
    message: str


def owner_why(owner: Owner) -> str:
    """Why the owner owns the slot, in words for events and logs."""
    if owner.reason is OwnerReason.REQUESTED and owner.intent is not None:
        return f"requested by {owner.intent.holder}"
    if owner.reason is OwnerReason.DEFAULT:
        return "warming the default"
    if owner.reason is OwnerReason.RECLAIMED:
        return "the resident was idle for spec.scheduling.idleAfter"
    return "back to the resident"


def _seconds_since(stamp: str | None, now: datetime) -> float | None:
    if not stamp:
        return None
    try:
        then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return max(0.0, (now - then).total_seconds())


def transitions(
    before: ModelPoolStatus, after: ModelPoolStatus, owner: Owner, now: datetime
) -> list[Transition]:
    """The events the change from ``before`` to ``after`` tells, in the order they happened."""
    out: list[Transition] = []
    if after.phase == PHASE_DEGRADED and before.phase != PHASE_DEGRADED:
        message = next(
            (c.message or "" for c in after.conditions if c.type == CONDITION_MEMBERS_VALID), ""
        )
        out.append(Transition(True, "Degraded", "Reconcile", message))
    if (
        before.pending_member is not None
        and after.pending_member != before.pending_member
        and after.resident_member != before.pending_member
        and after.phase != PHASE_DEGRADED
    ):
        back_to = after.pending_member or after.resident_member or "nobody (cold)"
        message = (
            f"swap to {before.pending_member} abandoned (the intent was withdrawn or "
            f"expired); the slot goes back to {back_to}"
        )
        out.append(Transition(False, "SwapAbandoned", "Swap", message))
    if (
        after.pending_member is not None
        and after.pending_member != before.pending_member
        and after.pending_member != after.resident_member
    ):
        if after.budget is None:
            origin = after.resident_member or "nothing"
        else:
            leaving = owner.intent.evict if owner.intent is not None else ()
            origin = ", ".join(leaving) or f"room beside {', '.join(after.residents) or 'nothing'}"
        message = f"swap started: {origin} -> {after.pending_member} ({owner_why(owner)})"
        out.append(Transition(False, "SwapStarted", "Swap", message))
    if newly_resident(before, after) is not None:
        took = _seconds_since(slot_allocated_since(before), now)
        spent = f" in {took:.0f} s" if took is not None else ""
        if after.budget is None:
            was = f"was {before.resident_member or 'nothing'}"
        else:
            beside = [m for m in after.residents if m != after.resident_member]
            was = f"beside {', '.join(beside) or 'nothing'}"
        message = f"swap done: {after.resident_member} is resident ({was}){spent}"
        out.append(Transition(False, "SwapCompleted", "Swap", message))
    return out
