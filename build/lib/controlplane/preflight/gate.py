"""The start-up gate the operator and the router-proxy put in front of their work.

Contract:
- :meth:`PreflightGate.start` runs the first preflight inline. DENIED raises
  :class:`PreflightDenied` (the process stops with the message naming what is missing). ALLOWED
  makes the gate ready. INCONCLUSIVE with no usable cache leaves it not ready and keeps checking
  in the background, in the task group the caller gives, so the process can serve its readiness
  endpoint ("not ready: ...") meanwhile.
- The background loop runs whole preflights (each with its own retry budget) separated by jittered
  pauses, until one is ALLOWED (ready) or DENIED (the task raises :class:`PreflightDenied`, which
  ends the task group and so the process, exactly as a DENIED at start would).
- :meth:`wait_ready` lets work wait for the gate; it raises :class:`PreflightDenied` if the gate
  ends denied.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from controlplane.clock import SYSTEM_CLOCK, WallClock
from controlplane.preflight.backoff import BackoffPolicy, RandomSource, system_random
from controlplane.preflight.errors import PreflightDenied
from controlplane.preflight.verdict import Outcome, Verdict

log = logging.getLogger("controlplane.preflight")

#: Pauses between background preflights: each preflight already retried for its whole budget.
DEFAULT_ROUND_PAUSE = BackoffPolicy(base_delay=5.0, max_delay=60.0, budget=0.0)


class PreflightGate:
    """Ready once a preflight is ALLOWED; see the module docstring for the contract."""

    def __init__(
        self,
        check: Callable[[], Awaitable[Verdict]],
        *,
        pause: BackoffPolicy = DEFAULT_ROUND_PAUSE,
        clock: WallClock = SYSTEM_CLOCK,
        uniform: RandomSource | None = None,
    ) -> None:
        self._check = check
        self._pause = pause
        self._clock = clock
        self._uniform = uniform or system_random()
        self._verdict: Verdict | None = None
        self._settled = anyio.Event()
        #: Preflights run so far, the first included.
        self.rounds = 0

    @property
    def verdict(self) -> Verdict | None:
        """The latest verdict (None before the first one)."""
        return self._verdict

    @property
    def ready(self) -> bool:
        return self._verdict is not None and self._verdict.allowed

    def readiness(self) -> tuple[bool, str]:
        """What a readiness endpoint reports: ready or not, and why."""
        if self._verdict is None:
            return False, "preflight not run yet"
        if self._verdict.allowed:
            return True, self._verdict.message
        return False, f"not ready: {self._verdict.message}"

    async def _round(self) -> Verdict:
        self.rounds += 1
        verdict = await self._check()
        self._verdict = verdict
        for warning in verdict.warnings:
            log.warning("%s", warning)
        if verdict.outcome is Outcome.DENIED:
            self._settled.set()
            raise PreflightDenied(verdict)
        if verdict.allowed:
            log.info("%s", verdict.message)
            self._settled.set()
        else:
            log.warning("%s", verdict.message)
        return verdict

    async def start(self, task_group: anyio.abc.TaskGroup) -> Verdict:
        """The first preflight; on INCONCLUSIVE, keep checking in ``task_group``."""
        verdict = await self._round()
        if not verdict.allowed:
            task_group.start_soon(self._keep_checking, name="preflight-gate")
        return verdict

    async def _keep_checking(self) -> None:
        pause = 0
        while not self.ready:
            await self._clock.sleep(self._pause.delay(pause, self._uniform))
            pause += 1
            await self._round()

    async def wait_ready(self) -> Verdict:
        """Wait until the gate is ALLOWED; raises :class:`PreflightDenied` if it ends DENIED."""
        await self._settled.wait()
        assert self._verdict is not None
        if self._verdict.outcome is Outcome.DENIED:
            raise PreflightDenied(self._verdict)
        return self._verdict
