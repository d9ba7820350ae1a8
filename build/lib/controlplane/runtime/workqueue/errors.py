"""Errors of the work queue: a small hierarchy, so a worker loop can end on exactly one of them.

A worker loops ``key = await queue.get()`` until :class:`QueueShutDown`; that is the normal end of
a worker, not a failure. :class:`NotProcessing` is a programming error in the caller (``done``
for a key it does not hold), raised loudly because silently accepting it would corrupt the
queue's bookkeeping.
"""

from __future__ import annotations

from collections.abc import Hashable


class WorkqueueError(Exception):
    """Base of everything the work queue raises."""


class QueueShutDown(WorkqueueError):
    """The queue was shut down and nothing is left to hand out: the worker should return."""

    def __init__(self, name: str) -> None:
        super().__init__(f"work queue {name!r} is shut down" if name else "work queue is shut down")
        self.name = name


class NotProcessing(WorkqueueError):
    """``done`` was called for a key that no worker holds (never got, or already done)."""

    def __init__(self, key: Hashable) -> None:
        super().__init__(f"done({key!r}) for a key that is not being processed")
        self.key = key
