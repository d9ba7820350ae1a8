"""Errors of the preflight: a small hierarchy, so callers branch on what happened, not on text.

Only :class:`PreflightDenied` is meant to end a process: it carries the DENIED verdict whose
message names every missing permission. The others describe inputs the preflight refuses to trust
(a cache file, an answer that is not a review) and are handled inside the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controlplane.preflight.verdict import Verdict


class PreflightError(Exception):
    """Base of everything the preflight raises."""


class PreflightDenied(PreflightError):
    """The API server definitively refused at least one declared permission: stop the process."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


class CacheEntryRejected(PreflightError):
    """A cache file that is corrupt, foreign or unsafe: ignored with a warning, never trusted."""


class ReviewAnswerInvalid(PreflightError):
    """The API server's answer to a review is not a SelfSubjectAccessReview with a status."""
