"""``controlplane llama-sim``: the simulator behind llama-server's own command line.

Why: in a cluster a member pod runs its image with the arguments the operator gives llama-server
(``--model``, ``--alias``, ``--host``, ``--port``, then ``spec.args``). The simulator image
(``hack/build-image.sh``: the project image with this subcommand as its entrypoint) must take
exactly those, so a member can run the simulator or the real server from the same
InferenceService. llama-server's meanings are kept: ``--ctx-size`` is the total context, shared
between the ``--parallel`` slots; the served name is ``--alias``, else the model file's stem.

Only the flags below are accepted; like llama-server, any other is an error naming it, so a member
whose ``spec.args`` the simulator cannot honour fails at start instead of serving something else.
``--sim-load-seconds`` (the node stand-in's per-member load time) is accepted too.

**Router mode**: given ``--models-dir DIR`` and no ``--model``, it is llama-server's router
(:mod:`controlplane.sim.router`): ``--models-max N`` (llama.cpp's default, 4) and
``--models-autoload``/``--no-models-autoload`` are read, each model of ``DIR`` is loaded and
unloaded through ``POST /models/load|unload`` as a child simulator, and the other flags above
(``--parallel``, ``--ctx-size``, ``--sim-load-seconds``...) are passed on to every child, as the
real router passes them to its child servers.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from controlplane.cliargs import seconds
from controlplane.sim import command as sim_command
from controlplane.sim.modelsdir import DEFAULT_MODELS_MAX
from controlplane.sim.routersettings import RouterSettings, child_flags
from controlplane.sim.settings import DEFAULT_N_CTX, DEFAULT_SLOTS, SimSettings

#: llama-server's ``--threads`` (and ``-t``), accepted and ignored: the simulator computes nothing.
IGNORED_WITH_VALUE = ("--threads", "-t")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--model", default=None, help="model file (its stem names it)")
    parser.add_argument("-a", "--alias", default=None, help="the served model name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("-np", "--parallel", type=int, default=DEFAULT_SLOTS, help="slots")
    parser.add_argument(
        "-c", "--ctx-size", type=int, default=None, help="total context, shared by the slots"
    )
    parser.add_argument("--slot-save-path", default=None, help="folder for slot save/restore")
    parser.add_argument("--no-slots", action="store_true", help="/slots answers 501")
    parser.add_argument("--metrics", action="store_true", help="serve /metrics (else 501)")
    for flag in IGNORED_WITH_VALUE:
        parser.add_argument(flag, dest="ignored_" + flag.strip("-"), default=None)
    parser.add_argument("--sim-load-seconds", type=seconds, default=0.0)
    parser.add_argument("--sim-token-seconds", type=seconds, default=0.01)
    parser.add_argument("--models-dir", default=None, help="router mode: the models' folder")
    parser.add_argument("--models-max", type=int, default=DEFAULT_MODELS_MAX, help="0: no limit")
    parser.add_argument(
        "--models-autoload",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="router mode: a request for a model that is not loaded loads it",
    )


def settings_from(args: argparse.Namespace) -> SimSettings:
    if args.parallel < 1:
        raise SystemExit(f"error: --parallel must be at least 1, got {args.parallel}")
    name = args.alias or (Path(args.model).stem if args.model else "model")
    per_slot = args.ctx_size // args.parallel if args.ctx_size else DEFAULT_N_CTX
    save_path = Path(args.slot_save_path) if args.slot_save_path else None
    if save_path is not None and not save_path.is_dir():
        raise SystemExit(f"error: --slot-save-path {save_path} is not a directory")
    return SimSettings(
        host=args.host,
        port=args.port,
        model_name=name,
        load_seconds=args.sim_load_seconds,
        token_seconds=args.sim_token_seconds,
        slots=args.parallel,
        n_ctx=max(per_slot, 1),
        slots_endpoint=not args.no_slots,
        slot_save_path=save_path,
        metrics_endpoint=args.metrics,
    )


def router_settings_from(args: argparse.Namespace) -> RouterSettings:
    """Router mode's settings; the single-model flags given become every child's."""
    if args.parallel < 1:
        raise SystemExit(f"error: --parallel must be at least 1, got {args.parallel}")
    models_dir = Path(args.models_dir)
    if not models_dir.is_dir():
        raise SystemExit(f"error: '{models_dir}' does not exist or is not a directory")
    passed = child_flags(
        [
            ("--parallel", args.parallel),
            ("--ctx-size", args.ctx_size),
            ("--slot-save-path", args.slot_save_path),
            ("--no-slots", args.no_slots),
            ("--metrics", args.metrics),
            ("--sim-load-seconds", args.sim_load_seconds),
            ("--sim-token-seconds", args.sim_token_seconds),
        ]
    )
    return RouterSettings(
        models_dir=models_dir,
        host=args.host,
        port=args.port,
        models_max=args.models_max,
        autoload=args.models_autoload,
        child_flags=passed,
    )


def run(args: argparse.Namespace) -> int:
    """Run the simulator behind llama-server's command line (a member pod's container), or its
    router mode (``--models-dir`` without ``--model``)."""
    if args.models_dir and not args.model:
        serve_router(router_settings_from(args))
    sim_command.serve(settings_from(args))


def serve_router(settings: RouterSettings) -> NoReturn:
    """Serve router mode until SIGTERM (its children stopped first), then exit."""
    import anyio

    from controlplane.sim.router import run_router

    anyio.run(run_router, settings)
    sim_command.exit_at_once()
