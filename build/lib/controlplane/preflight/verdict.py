"""What a preflight concludes, and how each conclusion is worded for the person reading the logs.

Three outcomes only. DENIED is the API server's definitive ``allowed: false`` and names each
missing permission; INCONCLUSIVE means no answer came in time and says so in capitals, because the
one thing it must never be mistaken for is a denial.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from controlplane.preflight.permissions import Component, ScopedPermission

#: Exit codes of ``controlplane preflight`` (sysexits: EX_NOPERM, EX_TEMPFAIL).
EXIT_ALLOWED = 0
EXIT_DENIED = 77
EXIT_INCONCLUSIVE = 75

NOT_A_DENIAL = "This is NOT a permissions denial"


class Outcome(enum.StrEnum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"
    INCONCLUSIVE = "INCONCLUSIVE"


class Source(enum.StrEnum):
    """What the verdict rests on."""

    LIVE = "live"  #: reviews answered just now
    CACHE = "cache"  #: a fresh cached ALLOWED (no API call made)
    STALE_CACHE = "stale-cache"  #: an older cached ALLOWED, used because the live check failed


@dataclass(frozen=True, slots=True)
class Verdict:
    """The result of one preflight of one component in one namespace."""

    outcome: Outcome
    source: Source
    component: Component
    namespace: str
    message: str
    #: Permissions the API server refused (DENIED only).
    missing: tuple[ScopedPermission, ...] = ()
    #: Permissions that got no answer in time.
    unanswered: tuple[ScopedPermission, ...] = ()
    warnings: tuple[str, ...] = ()
    #: Wall-clock time of the live check this verdict rests on (None when there was none).
    checked_at: float | None = None
    #: SelfSubjectAccessReviews sent for this verdict (0 for a cache hit).
    reviews_sent: int = 0

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ALLOWED

    @property
    def exit_code(self) -> int:
        return {
            Outcome.ALLOWED: EXIT_ALLOWED,
            Outcome.DENIED: EXIT_DENIED,
            Outcome.INCONCLUSIVE: EXIT_INCONCLUSIVE,
        }[self.outcome]


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def allowed_message(
    component: Component, namespace: str, checked: int, source: Source, age: float = 0.0
) -> str:
    where = f"{component} (namespace {namespace})"
    if source is Source.LIVE:
        return f"preflight ALLOWED: {where} holds all {checked} declared permissions"
    if source is Source.CACHE:
        return (
            f"preflight ALLOWED: {where} holds all {checked} declared permissions "
            f"(cached verdict from {_age(age)} ago; no API call made)"
        )
    return (
        f"preflight ALLOWED from a STALE cache: {where} was allowed all {checked} declared "
        f"permissions {_age(age)} ago; the live check was inconclusive"
    )


def denied_message(
    component: Component,
    namespace: str,
    missing: tuple[ScopedPermission, ...],
    reasons: dict[ScopedPermission, str],
    unanswered: int,
) -> str:
    lines = [
        f"preflight DENIED: {component} (namespace {namespace}) lacks {len(missing)} permission(s)"
        " its RBAC declares; grant them (see manifests/rbac) and restart:"
    ]
    for permission in missing:
        why = reasons.get(permission)
        lines.append(f"  - {permission}" + (f" ({why})" if why else ""))
    if unanswered:
        lines.append(f"  ({unanswered} other permission(s) got no answer in time)")
    return "\n".join(lines)


def inconclusive_message(
    component: Component,
    namespace: str,
    server: str,
    unanswered: tuple[ScopedPermission, ...],
    checked: int,
    last_error: str,
) -> str:
    return (
        f"preflight INCONCLUSIVE: {component} (namespace {namespace}) got no answer from the API "
        f"server at {server} for {len(unanswered)} of {checked} permission reviews "
        f"(last error: {last_error}). {NOT_A_DENIAL}: the control plane is unreachable or "
        "still recovering, and no usable cached verdict exists."
    )
