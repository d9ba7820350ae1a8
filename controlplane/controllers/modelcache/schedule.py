"""When the cache is collected: every interval, and after a file stops being named (pure).

A path that leaves the named set (its InferenceService deleted, its source changed, the last pod
naming it gone) asks for two runs: one at once (a size cap may free its bytes now) and one when
the retention has passed (the file, unused since at the latest now, is then due). Without them a
file would wait up to one more interval past its retention. The periodic run comes first one
interval after the operator starts leading, so that restarts do not each collect every node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

#: Past the retention, so that a run after it finds the file due (clocks of nodes differ).
RETENTION_MARGIN_SECONDS: Final = 1.0


@dataclass
class CollectionSchedule:
    interval: float
    retention: float
    next_periodic: float
    #: Runs asked for by paths that stopped being named.
    pending: list[float] = field(default_factory=list)
    #: The named paths last seen; None before the first look.
    named: frozenset[str] | None = None

    @classmethod
    def starting(cls, now: float, interval: float, retention: float) -> CollectionSchedule:
        return cls(interval, retention, now + interval)

    def observe(self, named: frozenset[str], now: float) -> None:
        """Note the named paths; a path no longer named asks for its two runs."""
        if self.named is not None and self.named - named:
            self.pending += [now, now + self.retention + RETENTION_MARGIN_SECONDS]
        self.named = named

    def take_due(self, now: float) -> bool:
        """Whether a run is due now; if so, it is taken (the next periodic one set)."""
        due = self.next_periodic <= now or any(when <= now for when in self.pending)
        if due:
            self.pending = [when for when in self.pending if when > now]
            if self.next_periodic <= now:
                self.next_periodic = now + self.interval
        return due

    def wake_in(self, now: float) -> float:
        """Seconds until the next run is due."""
        return max(0.0, min([self.next_periodic, *self.pending]) - now)
