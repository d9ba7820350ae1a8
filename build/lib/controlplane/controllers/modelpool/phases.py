"""The waiting phases of a swap, as spans with the durations they really had.

A reconcile never waits: the pool controller writes a member down, returns, and is woken by the
watch when the pods are gone; it writes the owner up and is woken when the owner is Ready. So the
two phases a user's "why did my request take 40 s?" is mostly made of, *wait for pods gone* and
*owner up*, are no single reconcile's work. :class:`SwapPhases` remembers, per pool, the instant
each began (the write that started it) and hands back a finished :class:`PhaseSpan` from the
reconcile that sees it end, to be recorded with its true start and end. It is pure (instants are
passed in), so the rules are unit-tested without a clock or a tracer.

* **wait for pods gone**: from the first drain write of a swap to the reconcile that finds every
  other member at 0 with no pod left (the owner may go up);
* **owner up**: from the write that raises the owner to the reconcile that sees it Ready as the
  resident.

A phase whose owner changed in between (a withdrawn intent) is dropped, not reported as done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

WAIT_FOR_PODS_GONE: Final = "wait for pods gone"
OWNER_UP: Final = "owner up"


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One finished phase: its span name, start and end (ns since the epoch), and attributes."""

    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass
class _Began:
    at_ns: int
    member: str
    owner: str | None


class SwapPhases:
    """Per pool key (``namespace/name``), the phases under way and when they began."""

    def __init__(self) -> None:
        self._draining: dict[str, _Began] = {}
        self._raising: dict[str, _Began] = {}

    def drained(self, pool: str, member: str, owner: str | None, now_ns: int) -> None:
        """A member was written down for ``owner``: the wait for its pods begins (the first
        drain of a swap starts it; a second member drained later joins the same wait)."""
        began = self._draining.get(pool)
        if began is None or began.owner != owner:
            self._draining[pool] = _Began(now_ns, member, owner)

    def owner_may_go_up(self, pool: str, owner: str, now_ns: int) -> PhaseSpan | None:
        """Every other member is at 0 with no pod: the wait ends (if one was under way for it)."""
        began = self._draining.pop(pool, None)
        if began is None or began.owner != owner:
            return None
        return PhaseSpan(
            WAIT_FOR_PODS_GONE,
            began.at_ns,
            max(now_ns, began.at_ns),
            {"modelpool.member": began.member, "modelpool.owner": owner},
        )

    def raised(self, pool: str, owner: str, now_ns: int) -> None:
        """The owner was written up: it is loading."""
        self._raising[pool] = _Began(now_ns, owner, owner)

    def owner_ready(self, pool: str, resident: str | None, now_ns: int) -> PhaseSpan | None:
        """The pool's resident is Ready: the owner-up phase ends if it was for that member."""
        began = self._raising.get(pool)
        if began is None or resident is None:
            return None
        del self._raising[pool]
        if began.owner != resident:
            return None
        return PhaseSpan(
            OWNER_UP, began.at_ns, max(now_ns, began.at_ns), {"modelpool.member": resident}
        )

    def forget(self, pool: str) -> None:
        """The pool is gone."""
        self._draining.pop(pool, None)
        self._raising.pop(pool, None)
