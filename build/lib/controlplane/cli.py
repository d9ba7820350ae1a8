"""The ``controlplane`` console script: one entry point, one subcommand per process.

Dispatch only: each subcommand's flags, settings and exit codes are in its package's
``command.py`` (``add_arguments``, ``settings_from``, ``run``); ``demo`` and ``dev``, which start
the whole local system, are :mod:`controlplane.local.command`'s.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from controlplane.envtest import EnvtestError
from controlplane.envtest import tinymodel as tiny_model_command
from controlplane.local import command as local_command
from controlplane.operator import command as operator_command
from controlplane.preflight import command as preflight_command
from controlplane.router import command as router_command
from controlplane.runtime.logs import configure_logging
from controlplane.sim import command as sim_command
from controlplane.sim import llamacommand as llama_sim_command
from controlplane.standin import command as sim_node_command

log = logging.getLogger("controlplane")


def _logging_options(defaults: bool) -> argparse.ArgumentParser:
    """``--log-level`` and ``--log-format``, accepted before the subcommand *and* after it
    (``controlplane operator --log-format json``, as a Deployment's args put it). The
    subcommands' copies default to ``SUPPRESS``, so one given before the subcommand is not
    overwritten by a default after it."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--log-level",
        default=os.environ.get("LOG_LEVEL", "INFO") if defaults else argparse.SUPPRESS,
        help="DEBUG, INFO, WARNING, ERROR ($LOG_LEVEL)",
    )
    options.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("LOG_FORMAT", "text") if defaults else argparse.SUPPRESS,
        help="json: one object per line with trace and span ids ($LOG_FORMAT)",
    )
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="controlplane", description=__doc__, parents=[_logging_options(True)]
    )
    after = [_logging_options(False)]
    commands = parser.add_subparsers(dest="command", required=True)
    for name, run in (("demo", local_command.run_demo), ("dev", local_command.run_dev)):
        local = commands.add_parser(name, help=run.__doc__, parents=after)
        local_command.add_arguments(local)
        local.set_defaults(run=run)
    operator = commands.add_parser("operator", help=operator_command.run.__doc__, parents=after)
    operator_command.add_arguments(operator)
    operator.set_defaults(run=operator_command.run)
    preflight = commands.add_parser("preflight", help=preflight_command.run.__doc__, parents=after)
    preflight_command.add_arguments(preflight)
    preflight.set_defaults(run=preflight_command.run)
    router = commands.add_parser("router-proxy", help=router_command.run.__doc__, parents=after)
    router_command.add_arguments(router)
    router.set_defaults(run=router_command.run)
    sim = commands.add_parser("sim", help=sim_command.run.__doc__, parents=after)
    sim_command.add_arguments(sim)
    sim.set_defaults(run=sim_command.run)
    llama_sim = commands.add_parser("llama-sim", help=llama_sim_command.run.__doc__, parents=after)
    llama_sim_command.add_arguments(llama_sim)
    llama_sim.set_defaults(run=llama_sim_command.run)
    sim_node = commands.add_parser("sim-node", help=sim_node_command.run.__doc__, parents=after)
    sim_node_command.add_arguments(sim_node)
    sim_node.set_defaults(run=sim_node_command.run)
    tiny = commands.add_parser("tiny-model", help=tiny_model_command.run.__doc__, parents=after)
    tiny_model_command.add_arguments(tiny)
    tiny.set_defaults(run=tiny_model_command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        code: int = args.run(args)
    except EnvtestError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
