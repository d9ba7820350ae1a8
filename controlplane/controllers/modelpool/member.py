"""One member of a pool as the pool controller's caches show it: what every rule reads.

Kept apart from the rules (:mod:`~controlplane.controllers.modelpool.plan` for the drain and the
grant, :mod:`~controlplane.controllers.modelpool.residents` for a pool with a budget), so both
read one snapshot type and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.api.v1alpha1.inferenceservice import PHASE_READY as ISVC_READY
from controlplane.api.v1alpha1.inferenceservice import RUNTIME_LLAMACPP
from controlplane.api.v1alpha1.modelpool import SLOT_RELEASED


@dataclass(frozen=True, slots=True)
class MemberState:
    """One member as the caches show it."""

    name: str
    found: bool = True
    #: This pool's decision about it as last written (``status.members[].slot``; None: not yet).
    slot: str | None = None
    #: When that decision was made (``status.members[].since``).
    since: str | None = None
    #: The member acknowledged that release, and the cache shows the Deployment it applied
    #: (:func:`~controlplane.controllers.modelpool.grant.acknowledged`).
    acknowledged: bool = False
    #: The InferenceService's ``status.phase``.
    phase: str | None = None
    #: ``http://host:port`` of every ready endpoint of its Service.
    urls: tuple[str, ...] = ()
    #: ... and of every endpoint neither ready nor terminating (a server starting, or up before
    #: its readiness probe has said so).
    starting_urls: tuple[str, ...] = ()
    #: Its pods, Terminating ones included.
    pods: int = 0
    #: Its Deployment is absent, or at 0 replicas and observed so with none left.
    deployment_drained: bool = True
    #: ``spec.runtime``: which idle probe understands it.
    runtime: str = RUNTIME_LLAMACPP
    #: Its weights are where its server reads them (``ModelReady`` True for its source now).
    weights_ready: bool = True
    #: ``status.model.summary`` (Downloading 42%, Failed: NotFound), to say what a swap waits for.
    weights: str | None = None
    #: A change to its pod waits for this pool to drain it (``UpdatePending`` True).
    update_pending: bool = False
    #: The other pool whose claim on it stands (:mod:`~controlplane.controllers.modelpool.claims`):
    #: this pool neither grants nor drains it.
    claimed_by: str | None = None

    @property
    def ready(self) -> bool:
        """Serving as an owner should: Ready and not released."""
        return self.found and self.slot != SLOT_RELEASED and self.phase == ISVC_READY

    @property
    def serving(self) -> bool:
        """Requests may be in flight: Ready, or reachable at a ready endpoint."""
        return self.found and (self.phase == ISVC_READY or bool(self.urls))

    @property
    def probe_urls(self) -> tuple[str, ...]:
        """Where to ask whether requests are in flight before releasing it: its ready endpoints
        when serving, else its starting ones (none: nothing can be in flight)."""
        return self.urls if self.serving else self.starting_urls

    @property
    def released(self) -> bool:
        """Holds nothing of the slot: released, the release acknowledged, its Deployment at 0,
        no pod left."""
        return (
            self.found
            and self.slot == SLOT_RELEASED
            and self.acknowledged
            and self.deployment_drained
            and self.pods == 0
        )


def missing_members(members: Mapping[str, MemberState]) -> list[str]:
    return [name for name, state in members.items() if not state.found]
