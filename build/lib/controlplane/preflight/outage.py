"""While the API server gives no answer at all, one review at a time asks; the others skip turns.

Without this, every review of a check retries on its own during a stall: 15 (proxy) or 80
(operator) connections per process per round. A SIGSTOPped or partitioned API server still
accepts them into the kernel's backlog, so on recovery it first works through every abandoned
connection of the fleet. With the guard a process keeps one connection in flight while the
server is silent (measured: 80 abandoned connections for 20 processes instead of about 1,000).

The others do not wait for that probe: they keep their own jittered retry schedule and simply do
not send while another review is probing a silent server. When the server answers, each sends at
its next turn, so the reviews of a fleet come back spread over their jitter instead of all at the
moment each process's probe is answered.

One exception: until the server has answered or failed once, only one review is sent and the
others wait for that first outcome. On a healthy server that costs one round trip; on a silent
one it keeps the very first round from opening every connection at once.
"""

from __future__ import annotations

import anyio


class OutageGuard:
    """Shared by the reviews of one check; see the module docstring."""

    def __init__(self) -> None:
        self._answering = False
        self._silence_seen = False
        self._prober: object | None = None
        self._changed = anyio.Event()
        #: The last failure of a probe, for reviews that end without having been sent.
        self.last_silence = ""

    @property
    def first_outcome_pending(self) -> bool:
        """Nothing is known yet: the check's first probe is still in flight."""
        return not self._answering and not self._silence_seen

    @property
    def answering(self) -> bool:
        """The server answered the last review that was sent."""
        return self._answering

    def is_prober(self, who: object) -> bool:
        return self._prober is who

    def try_admit(self, who: object) -> bool:
        """Whether ``who`` may send now: the server answers, or ``who`` is (or becomes) prober."""
        if self._answering:
            return True
        if self._prober is None or self._prober is who:
            self._prober = who
            return True
        return False

    async def first_outcome(self) -> None:
        """Wait until the first probe has been answered or has failed (or its prober left)."""
        changed = self._changed
        if self.first_outcome_pending:
            await changed.wait()

    def answered(self, who: object) -> None:
        """The server answered ``who``: everyone may send."""
        self._answering = True
        if self._prober is who:
            self._prober = None
        self._notify()

    def silent(self, who: object, error: str) -> None:
        """``who`` got no answer: only a prober (``who``, unless another holds it) may send.

        The prober keeps its role through its backoff sleep, so the next probe is its retry.
        """
        self._answering = False
        self._silence_seen = True
        self.last_silence = error
        if self._prober is None:
            self._prober = who
        self._notify()

    def leave(self, who: object) -> None:
        """``who`` is done; a prober hands its role on."""
        if self._prober is who:
            self._prober = None
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
