"""Every tunable of the simulator in one frozen tree, each default a named constant.

The CLI builds a :class:`SimSettings`; tests build one directly with the few fields they care
about. Nothing here imports the server, so the CLI can parse arguments without loading starlette.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
#: llama-server's own default port.
DEFAULT_PORT = 8080
DEFAULT_MODEL_NAME = "sim-model"
#: How long the simulated model takes to load before ``/health`` answers 200.
DEFAULT_LOAD_SECONDS = 0.0
#: How long each generated token takes.
DEFAULT_TOKEN_SECONDS = 0.01
#: llama-server's ``--parallel`` default: one slot.
DEFAULT_SLOTS = 1
#: The context size each slot reports in ``/slots``.
DEFAULT_N_CTX = 4096
#: How many tokens a reply has before the model "emits EOS" (``finish_reason: stop``).
DEFAULT_REPLY_TOKENS = 8
#: How long ``/slots`` hangs in ``slow`` mode: far past any probe timeout.
DEFAULT_SLOW_SLOTS_SECONDS = 60.0
#: How long an answer stalls mid-body in ``stall`` answer mode: far past a proxy's read timeout
#: in tests that set one, and ended early by shutdown.
DEFAULT_STALL_SECONDS = 60.0
#: What a ``huge`` answer declares and sends, if the client reads that far: 10 GiB.
HUGE_ANSWER_BYTES = 10 * 1024**3


class SlotsMode(enum.Enum):
    """How ``GET /slots`` answers: truthfully, or broken in a way a probe must survive."""

    NORMAL = "normal"
    #: 500 with a llama.cpp-shaped server error.
    ERROR500 = "error500"
    #: 200 with a JSON body that is not an array.
    MALFORMED = "malformed"
    #: Hangs for ``slow_slots_seconds`` (or until shutdown), then answers truthfully.
    SLOW = "slow"


class AnswerMode(enum.Enum):
    """How chat completions are answered: as llama-server does, or as a broken member would
    (:mod:`controlplane.sim.faults`); what a proxy in front must survive without a hung client
    or a leaked connection."""

    NORMAL = "normal"
    #: Bytes that are not HTTP at all, then the connection closes.
    GARBAGE = "garbage"
    #: The answer's head and part of its body, then the connection closes.
    CUT = "cut"
    #: A body of :data:`HUGE_ANSWER_BYTES` (declared when not streamed; events when streamed),
    #: sent for as long as the client reads.
    HUGE = "huge"
    #: The head and part of the body, then nothing for ``stall_seconds``, then the rest.
    STALL = "stall"
    #: 500 with an HTML body, as a crashed server or a proxy's error page would send.
    ERROR_TEXT = "error-text"


@dataclasses.dataclass(frozen=True)
class SimSettings:
    """One simulated llama-server: what it serves, how fast, and how ``/slots`` and its answers
    behave."""

    host: str = DEFAULT_HOST
    #: 0 picks a free port; the server prints the one it got.
    port: int = DEFAULT_PORT
    #: The served model name, llama-server's ``--alias``.
    model_name: str = DEFAULT_MODEL_NAME
    load_seconds: float = DEFAULT_LOAD_SECONDS
    token_seconds: float = DEFAULT_TOKEN_SECONDS
    slots: int = DEFAULT_SLOTS
    n_ctx: int = DEFAULT_N_CTX
    reply_tokens: int = DEFAULT_REPLY_TOKENS
    #: False is llama-server's ``--no-slots``: ``/slots`` answers 501.
    slots_endpoint: bool = True
    #: Report the older ``state`` (0 idle, 1 processing) instead of ``is_processing``.
    legacy_slots: bool = False
    slots_mode: SlotsMode = SlotsMode.NORMAL
    slow_slots_seconds: float = DEFAULT_SLOW_SLOTS_SECONDS
    #: llama-server's ``--slot-save-path``: where slot save/restore keep their files; None
    #: answers slot actions 501, as llama-server does without it.
    slot_save_path: Path | None = None
    #: Every restore first hangs this long (or until shutdown): a restore that does not answer.
    slot_restore_delay_seconds: float = 0.0
    answer_mode: AnswerMode = AnswerMode.NORMAL
    stall_seconds: float = DEFAULT_STALL_SECONDS
    #: llama-server's ``--metrics``: serve ``/metrics``; without it ``/metrics`` answers 501.
    metrics_endpoint: bool = False

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, got {self.slots}")
        if min(self.load_seconds, self.token_seconds, self.slow_slots_seconds,
               self.slot_restore_delay_seconds, self.stall_seconds) < 0:  # fmt: skip
            raise ValueError("durations must not be negative")
        if self.reply_tokens < 0 or self.n_ctx < 1:
            raise ValueError("reply_tokens must be >= 0 and n_ctx >= 1")
