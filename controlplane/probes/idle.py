"""What an idle probe reports, whatever the runtime.

Three outcomes, because the pool controller acts on exactly three: drain (``IDLE``), wait for the
requests in flight (``BUSY``), or refuse to guess (``FAILED``: the server did not give an answer
that proves it idle). ``FAILED`` is never treated as idle: a swap is deferred, never forced.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class IdleOutcome(enum.StrEnum):
    IDLE = "idle"
    BUSY = "busy"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class IdleReport:
    """One probe of one endpoint: the outcome and what was seen, in words for a condition."""

    outcome: IdleOutcome
    detail: str
    #: Slots (or the runtime's unit of concurrency) reported, and how many were processing.
    slots: int = 0
    processing: int = 0
    #: The server answered the probe with a success status: it is up, whatever the body says.
    #: A starting member (not yet Ready) that did not is not serving and may be released
    #: (docs/modelpool.md, "Drain").
    answered: bool = False


class IdleProbe(Protocol):
    """Asks the server at ``base_url`` whether it is idle; never raises, always times out."""

    async def probe(
        self, base_url: str, *, member: str = "", model: str | None = None
    ) -> IdleReport:
        """``model``: of a router-mode server holding several models, the one to ask about."""
        ...
