"""The simulated model: loading, slots, and token generation, with no HTTP in sight.

Contract, mirroring llama-server where the control plane looks at it:

- The model is *loading* until :meth:`SimulatedModel.load` has waited ``load_seconds``; only then
  is it *ready*. Nothing goes back to loading.
- There are ``slots`` slots. A completion holds one slot from the moment it is admitted until its
  last token is generated; while it does, that slot reports ``is_processing``. Admission takes the
  lowest-numbered idle slot; when every slot is busy, requests wait in arrival order (llama-server
  defers the task until a slot frees). A request cancelled while waiting leaves the queue cleanly.
- Each admitted completion gets the next task id. A slot that has served a completion keeps that
  task's id (and its prompt size) after it finishes, as llama-server's does; a slot never used
  reports only that it is idle (:attr:`SlotState.used` is false).
- Generation produces one token per ``token_seconds`` of the model's clock.

The failure modes (of ``/slots``, and of the answers to completions) live here too, because tests
flip them at run time through the app. A switch may be timed (``seconds``, in
:class:`~controlplane.sim.switch.TimedSwitch`): the mode reverts by itself, so a member broken
"for a while" is not left broken.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence

import anyio

from controlplane.sim.clock import AnyioClock, Clock
from controlplane.sim.settings import AnswerMode, SimSettings, SlotsMode
from controlplane.sim.switch import TimedSwitch

log = logging.getLogger(__name__)

#: The task id of a slot that has not served any completion yet.
NO_TASK = -1


@dataclasses.dataclass
class Slot:
    """One slot's live state; the model mutates it, readers get :class:`SlotState` copies."""

    id: int
    id_task: int = NO_TASK
    processing: bool = False
    #: Whether any completion has held this slot yet.
    used: bool = False
    stream: bool = False
    #: The token limit of the completion in this slot (-1: none).
    n_predict: int = -1
    n_decoded: int = 0
    n_remain: int = -1
    n_prompt_tokens: int = 0


@dataclasses.dataclass(frozen=True)
class SlotState:
    """A snapshot of one slot, safe to hand out and render."""

    id: int
    id_task: int
    processing: bool
    used: bool
    stream: bool
    n_predict: int
    n_decoded: int
    n_remain: int
    n_prompt_tokens: int


class SimulatedModel:
    """One loaded (or loading) model with a fixed number of slots."""

    def __init__(self, settings: SimSettings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock if clock is not None else AnyioClock()
        self._slots_switch = TimedSwitch(settings.slots_mode, self.clock)
        self._answer_switch = TimedSwitch(settings.answer_mode, self.clock)
        self._loaded = anyio.Event()
        self._closing = anyio.Event()
        self._slots = [Slot(id=index) for index in range(settings.slots)]
        self._idle = anyio.Semaphore(settings.slots)
        self._next_task = 0
        self._waiting = 0

    # -- loading -------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """True once the model has loaded: ``/health`` answers 200 and completions are served."""
        return self._loaded.is_set()

    async def load(self) -> None:
        """Spend ``load_seconds`` loading, then become ready (idempotent)."""
        if not self.ready:
            await self.clock.sleep(self.settings.load_seconds)
            self.mark_loaded()

    def mark_loaded(self) -> None:
        """Become ready at once: for tests that do not care about the load."""
        if not self.ready:
            self._loaded.set()
            log.debug("model %s loaded", self.settings.model_name)

    async def wait_loaded(self) -> None:
        await self._loaded.wait()

    # -- shutdown ------------------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def begin_shutdown(self) -> None:
        """The process is stopping: waits that exist only to simulate trouble end now."""
        self._closing.set()

    async def hang(self, seconds: float) -> None:
        """Wait ``seconds`` or until shutdown begins, whichever is first (slow ``/slots``)."""
        with anyio.move_on_after(seconds):
            await self._closing.wait()

    # -- the failure modes ----------------------------------------------------------------------

    @property
    def slots_mode(self) -> SlotsMode:
        """How ``/slots`` answers now; a timed switch that has run out has reverted."""
        return self._slots_switch.mode

    @slots_mode.setter
    def slots_mode(self, mode: SlotsMode) -> None:
        self.set_slots_mode(mode)

    def set_slots_mode(self, mode: SlotsMode, seconds: float | None = None) -> None:
        """Switch how ``/slots`` answers; with ``seconds``, only for that long, then back to the
        mode in force before the switch."""
        self._slots_switch.set(mode, seconds)

    @property
    def slots_mode_seconds_left(self) -> float | None:
        """How long a timed switch still lasts; None when the mode is not timed."""
        return self._slots_switch.seconds_left

    @property
    def answer_mode(self) -> AnswerMode:
        """How chat completions are answered now (:mod:`controlplane.sim.faults`)."""
        return self._answer_switch.mode

    def set_answer_mode(self, mode: AnswerMode, seconds: float | None = None) -> None:
        """Switch how completions are answered; with ``seconds``, only for that long."""
        self._answer_switch.set(mode, seconds)

    @property
    def answer_mode_seconds_left(self) -> float | None:
        return self._answer_switch.seconds_left

    # -- slots ---------------------------------------------------------------------------------

    def slots(self) -> Sequence[SlotState]:
        """Every slot as it is now, in id order."""
        return [SlotState(**dataclasses.asdict(slot)) for slot in self._slots]

    @property
    def waiting(self) -> int:
        """Completions admitted to the queue but not yet to a slot (llama.cpp: deferred)."""
        return self._waiting

    @contextlib.asynccontextmanager
    async def occupy(
        self, *, n_predict: int = -1, stream: bool = False, prompt_tokens: int = 0
    ) -> AsyncIterator[Slot]:
        """Hold the lowest idle slot for the body of the ``async with``, waiting for one if all
        are busy; the slot is idle again when the body exits, however it exits."""
        self._waiting += 1
        try:
            await self._idle.acquire()
        finally:
            self._waiting -= 1
        slot = next(slot for slot in self._slots if not slot.processing)
        slot.processing = True
        slot.used = True
        slot.n_prompt_tokens = prompt_tokens
        slot.id_task = self._next_task
        self._next_task += 1
        slot.stream = stream
        slot.n_predict = n_predict
        slot.n_decoded = 0
        slot.n_remain = n_predict
        try:
            yield slot
        finally:
            # As llama-server: the finished slot keeps its task id and prompt, and its
            # generation counters are reset.
            slot.processing = False
            slot.n_remain = -1
            slot.n_decoded = 0
            self._idle.release()

    async def generate(self, slot: Slot, tokens: Sequence[str]) -> AsyncIterator[str]:
        """Yield ``tokens`` one per ``token_seconds``, counting them on ``slot``."""
        for token in tokens:
            await self.clock.sleep(self.settings.token_seconds)
            slot.n_decoded += 1
            if slot.n_remain > 0:
                slot.n_remain -= 1
            yield token
