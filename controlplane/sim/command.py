"""``controlplane sim``: the simulator's command line, kept light for the CLI to import.

Parsing needs only argparse and the settings tree; the server (starlette, uvicorn) is imported
when the command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import anyio

from controlplane.cliargs import seconds
from controlplane.sim.settings import (
    DEFAULT_HOST,
    DEFAULT_LOAD_SECONDS,
    DEFAULT_MODEL_NAME,
    DEFAULT_N_CTX,
    DEFAULT_PORT,
    DEFAULT_REPLY_TOKENS,
    DEFAULT_SLOTS,
    DEFAULT_SLOW_SLOTS_SECONDS,
    DEFAULT_STALL_SECONDS,
    DEFAULT_TOKEN_SECONDS,
    AnswerMode,
    SimSettings,
    SlotsMode,
)


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument(
        "--port", type=_count(0), default=DEFAULT_PORT, help="0 picks a free port and prints it"
    )
    parser.add_argument(
        "--model-name", default=DEFAULT_MODEL_NAME, help="the served name (llama-server --alias)"
    )
    parser.add_argument("--load-seconds", type=seconds, default=DEFAULT_LOAD_SECONDS)
    parser.add_argument("--token-seconds", type=seconds, default=DEFAULT_TOKEN_SECONDS)
    parser.add_argument(
        "--slots", type=_count(1), default=DEFAULT_SLOTS, help="llama-server --parallel"
    )
    parser.add_argument("--ctx-size", type=_count(1), default=DEFAULT_N_CTX, help="n_ctx per slot")
    parser.add_argument(
        "--reply-tokens",
        type=_count(0),
        default=DEFAULT_REPLY_TOKENS,
        help="tokens before the model ends a reply by itself",
    )
    parser.add_argument(
        "--no-slots", action="store_true", help="/slots answers 501, as with llama-server's"
    )
    parser.add_argument(
        "--legacy-slots", action="store_true", help="/slots reports `state` 0/1, as older servers"
    )
    parser.add_argument(
        "--slots-mode",
        choices=[mode.value for mode in SlotsMode],
        default=SlotsMode.NORMAL.value,
        help="how /slots answers (switch at run time with POST /sim/slots-mode)",
    )
    parser.add_argument(
        "--slow-slots-seconds",
        type=seconds,
        default=DEFAULT_SLOW_SLOTS_SECONDS,
        help="how long /slots hangs in slow mode",
    )
    parser.add_argument(
        "--answer-mode",
        choices=[mode.value for mode in AnswerMode],
        default=AnswerMode.NORMAL.value,
        help="how chat completions are answered: as llama-server does, or broken (switch at run "
        "time with POST /sim/answer-mode)",
    )
    parser.add_argument(
        "--stall-seconds",
        type=seconds,
        default=DEFAULT_STALL_SECONDS,
        help="how long an answer stalls mid-body in stall mode",
    )
    parser.add_argument(
        "--slot-save-path",
        type=_folder,
        default=None,
        help="folder for POST /slots/{id}?action=save|restore, as llama-server's",
    )
    parser.add_argument(
        "--metrics", action="store_true", help="serve llama-server's Prometheus /metrics"
    )
    parser.add_argument(
        "--slot-restore-delay",
        type=seconds,
        default=0.0,
        help="every slot restore first hangs this long (a restore that does not answer)",
    )


def _folder(text: str) -> Path:
    """An existing folder, as llama-server insists for ``--slot-save-path``."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not a directory: {text}")
    return path


def settings_from(args: argparse.Namespace) -> SimSettings:
    return SimSettings(
        host=args.host,
        port=args.port,
        model_name=args.model_name,
        load_seconds=args.load_seconds,
        token_seconds=args.token_seconds,
        slots=args.slots,
        n_ctx=args.ctx_size,
        reply_tokens=args.reply_tokens,
        slots_endpoint=not args.no_slots,
        legacy_slots=args.legacy_slots,
        slots_mode=SlotsMode(args.slots_mode),
        slow_slots_seconds=args.slow_slots_seconds,
        slot_save_path=args.slot_save_path,
        slot_restore_delay_seconds=args.slot_restore_delay,
        answer_mode=AnswerMode(args.answer_mode),
        stall_seconds=args.stall_seconds,
        metrics_endpoint=args.metrics,
    )


def run(args: argparse.Namespace) -> int:
    """Run a llama.cpp-compatible server simulator until SIGTERM (tests and demos)."""
    serve(settings_from(args))


def serve(settings: SimSettings) -> NoReturn:
    """Serve ``settings`` until SIGTERM (the server's imports are paid only here), then exit."""
    from controlplane.sim.server import run_simulator

    anyio.run(run_simulator, settings)
    exit_at_once()


def exit_at_once() -> NoReturn:
    """Exit 0 once the server has stopped, without the interpreter's teardown.

    The server has already finished its responses and closed its sockets; what is left is
    freeing every module and object, 30 to 150 ms on a busy machine, and a swap waits for the
    old member's process to be gone (bench/README.md, "Swaps"). Logs and stdout are flushed first.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
