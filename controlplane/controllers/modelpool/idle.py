"""Giving a pool's idle slot back: its settings, and the owner after a reclaim. Pure.

docs/modelpool.md ("Giving an idle slot back"). A pool with ``spec.scheduling.idleAfter`` gives
an idle resident back through the same ``/slots`` gate as a swap, back to ``spec.default``
(``idleAction: Default``) or to nothing at all (``Release``). Who is idle and due is the shared
rule (:func:`controlplane.scheduling.idle.judge_idle`); the pool publishes the residents due in
``status.reclaiming`` and keeps the clocks in ``status.members[].idleSince`` and
``status.idleSince``.

:func:`reclaimed_owner`
    The owner after the reclaim: a resident acted on gives way to the default (``Default``) or to
    nobody (``Release``); a pool that released its slot (phase ``Idle``) stays cold, rather than
    warming its default (with ``Release``), until a request names a member.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from controlplane.api.v1alpha1.modelpool import (
    IDLE_ACTION_DEFAULT,
    IDLE_ACTION_RELEASE,
    PHASE_IDLE,
    parse_duration,
)
from controlplane.controllers.modelpool.intent import Owner, OwnerReason
from controlplane.runtime.objects import ObjectView
from controlplane.scheduling.idle import IdleSettings


@dataclass(frozen=True, slots=True)
class PoolIdleSettings:
    """``spec.scheduling.idleAfter`` in seconds (None: never), its action and the default."""

    after: float | None = None
    action: str = IDLE_ACTION_RELEASE
    default: str | None = None

    @property
    def rule(self) -> IdleSettings:
        """The judgement's settings: a ``Default`` pool never gives its default back."""
        spared = self.default if self.action == IDLE_ACTION_DEFAULT else None
        return IdleSettings(self.after, spared)


def idle_settings(spec: ObjectView) -> PoolIdleSettings:
    """The pool's idle settings, read from its spec: an unset ``idleAction`` is ``Default``
    when the pool has a default, else ``Release``."""
    scheduling = spec.get("scheduling") or {}
    default = spec.get("default") or None
    text = scheduling.get("idleAfter")
    after = parse_duration(text, 0.0) if text else None
    action = scheduling.get("idleAction") or (
        IDLE_ACTION_DEFAULT if default else IDLE_ACTION_RELEASE
    )
    return PoolIdleSettings(after or None, str(action), str(default) if default else None)


def reclaimed_owner(
    owner: Owner, act: Collection[str], settings: PoolIdleSettings, previous_phase: str | None
) -> Owner:
    """The owner once the reclaim is applied (rules in the module docstring)."""
    release = settings.action == IDLE_ACTION_RELEASE
    if owner.reason is OwnerReason.RESIDENT and owner.name in act:
        target = None if release else settings.default
        return Owner(target, OwnerReason.RECLAIMED, ignored=owner.ignored)
    stays_cold = owner.name is None or (owner.reason is OwnerReason.DEFAULT and release)
    if previous_phase == PHASE_IDLE and owner.reason is not OwnerReason.REQUESTED and stays_cold:
        return Owner(None, OwnerReason.RECLAIMED, ignored=owner.ignored)
    return owner
