"""RBAC preflight: check our own permissions at start, riding through control-plane stalls.

The operator and each router-proxy replica ask the API server, one SelfSubjectAccessReview per
declared permission, whether they may do what their RBAC declarations say they need, so that a
missing grant is reported at start-up rather than as a failure in the middle of a swap. Design
notes and contract: ``docs/preflight.md``.

Public surface:
- :func:`run_preflight` / :class:`Preflight`: one check, returning a :class:`Verdict`;
- :class:`PreflightGate`: the start-up gate with readiness and background re-checks;
- :class:`VerdictCache`, :class:`BackoffPolicy`, :class:`Component`, :class:`Outcome`,
  :class:`Source` and the errors.
"""

from controlplane.clock import SystemClock, WallClock
from controlplane.preflight.backoff import DEFAULT_POLICY, BackoffPolicy
from controlplane.preflight.cache import CacheKey, VerdictCache, default_cache_dir
from controlplane.preflight.errors import PreflightDenied, PreflightError
from controlplane.preflight.gate import PreflightGate
from controlplane.preflight.permissions import Component, ScopedPermission, permissions_for
from controlplane.preflight.runner import Preflight, run_preflight
from controlplane.preflight.verdict import (
    EXIT_ALLOWED,
    EXIT_DENIED,
    EXIT_INCONCLUSIVE,
    Outcome,
    Source,
    Verdict,
)

__all__ = [
    "DEFAULT_POLICY",
    "EXIT_ALLOWED",
    "EXIT_DENIED",
    "EXIT_INCONCLUSIVE",
    "BackoffPolicy",
    "CacheKey",
    "Component",
    "Outcome",
    "Preflight",
    "PreflightDenied",
    "PreflightError",
    "PreflightGate",
    "ScopedPermission",
    "Source",
    "SystemClock",
    "Verdict",
    "VerdictCache",
    "WallClock",
    "default_cache_dir",
    "permissions_for",
    "run_preflight",
]
