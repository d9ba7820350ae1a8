"""What a pool's decision leaves behind: the swap's phases as spans, its events and log lines.

*Why a module of its own:* a reconcile decides and writes; what it tells a user about it is a
second job with rules of its own. The swap's two waiting phases outlive any one reconcile
(:mod:`~controlplane.controllers.modelpool.phases` remembers when each began) and are recorded
with their true start and end under the swap's own span; the events of a status change come from
a pure table (:func:`~controlplane.controllers.modelpool.plan.transitions`); a drain that waits,
an intent ignored, a member drained to change its pod are events too. Kept together, apart from
the decision, so that what the user sees of a swap is one file.

**Traced as part of the request that asked** (DESIGN 4.11): the phases, ``wait for pods gone``
and ``owner up``, are recorded under the swap's span (the context of the valid intent on the
pool's Lease, which the orchestrator reads) when the intent still says which, else under the
current reconcile. A parent, not a link: a trace viewer draws children in the request's
waterfall, where the 40 s are, while a link is a footnote.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace

from controlplane.api.v1alpha1 import ModelPoolStatus
from controlplane.controllers.modelpool.intent import Owner
from controlplane.controllers.modelpool.phases import PhaseSpan, SwapPhases
from controlplane.controllers.modelpool.plan import Deferral, transitions
from controlplane.runtime.cache import Object
from controlplane.runtime.events import EventRecorder

#: The log of the reconciler this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.controllers.modelpool.reconciler")
tracer = trace.get_tracer("controlplane.controllers.modelpool")

#: The Event of a resident drained because a change to its pod waits for the pool.
EVENT_UPDATING_MEMBER: Final = "UpdatingMember"
EVENT_RECLAIMED: Final = "Reclaimed"


class SwapRecord:
    """Records a pool's swap phases, events and log lines; ``swap_context`` gives the trace
    context of the valid intent on a pool's Lease (namespace, pool), if it carries one."""

    def __init__(
        self,
        recorder: EventRecorder,
        swap_context: Callable[[str, str], otel_context.Context | None],
    ) -> None:
        self.recorder = recorder
        self.swap_context = swap_context
        #: The waiting phases of swaps under way, to record as spans when they end.
        self.phases = SwapPhases()

    def forget(self, key: str) -> None:
        """The pool is gone."""
        self.phases.forget(key)

    def owner_may_go_up(self, key: str, namespace: str, pool: str, owner: str) -> None:
        """Every other member is gone: the wait for pods gone ends, if one was under way."""
        self._record_phase(namespace, pool, self.phases.owner_may_go_up(key, owner, time.time_ns()))

    def owner_ready(self, key: str, namespace: str, pool: str, resident: str | None) -> None:
        """The resident is Ready: the owner-up phase ends, if it was for that member."""
        self._record_phase(namespace, pool, self.phases.owner_ready(key, resident, time.time_ns()))

    def _record_phase(self, namespace: str, pool: str, phase: PhaseSpan | None) -> None:
        """A finished phase as a span, under the swap's span when the intent still says which,
        else under the current reconcile."""
        if phase is None:
            return
        attributes = {"k8s.namespace.name": namespace, "modelpool.pool": pool, **phase.attributes}
        span = tracer.start_span(
            phase.name,
            context=self.swap_context(namespace, pool),
            attributes=attributes,
            start_time=phase.start_ns,
        )
        span.end(end_time=phase.end_ns)

    def decided(
        self,
        key: str,
        owner: str | None,
        released: Sequence[str],
        granted: str | None,
    ) -> None:
        """What a written status changed of the slot: the swap's phases move, and it is logged."""
        now = time.time_ns()
        for name in released:
            self.phases.drained(key, name, owner, now)
            log.info("%s: %s released: drained", key, name)
        if granted is not None:
            self.phases.raised(key, granted, now)
            log.info("%s: %s granted the slot", key, granted)

    def transitions(
        self,
        pool: Object,
        before: ModelPoolStatus,
        after: ModelPoolStatus,
        owner: Owner,
        now: datetime,
    ) -> None:
        """Log and record the events of a status change (:func:`~.plan.transitions`)."""
        key = f"{pool['metadata'].get('namespace')}/{pool['metadata']['name']}"
        for event in transitions(before, after, owner, now):
            if event.warning:
                log.warning("%s: %s: %s", key, event.reason, event.message)
            else:
                log.info("%s: %s", key, event.message)
            self.recorder.event(
                pool,
                "Warning" if event.warning else "Normal",
                event.reason,
                event.action,
                event.message,
            )

    def decision_events(
        self,
        pool: Object,
        key: str,
        refreshed: Iterable[str],
        released: Sequence[str],
        deferral: Deferral | None,
        owner: Owner,
        reclaimed: Iterable[str] = (),
        action: str = "",
    ) -> None:
        """The events of every decision, written or not: a resident drained to change its pod,
        an idle one given back (``reclaimed``, by ``action``), a drain that waits, an intent
        ignored."""
        for name in refreshed:
            if name in released:
                note = f"{name} drained to change its pod; it is granted again once changed"
                self.recorder.event(pool, "Normal", EVENT_UPDATING_MEMBER, "Drain", note)
        for name in reclaimed:
            if name in released:
                note = f"{name} had no request for spec.scheduling.idleAfter: released ({action})"
                self.recorder.event(pool, "Normal", EVENT_RECLAIMED, "Drain", note)
        if deferral is not None:
            log.info("%s: %s: %s", key, deferral.reason, deferral.message)
            self.recorder.event(pool, "Warning", deferral.reason, "Drain", deferral.message)
        if owner.ignored is not None:
            self.recorder.event(pool, "Warning", "IntentIgnored", "SelectOwner", owner.ignored)
