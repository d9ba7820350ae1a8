"""The ``controlplane`` console script: one entry point, one subcommand per process.

Dispatch only: each subcommand's flags, settings and exit codes are in its package's
``command.py`` (``add_arguments``, ``settings_from``, ``run``); ``demo`` and ``dev``, which start
the whole local system, are :mod:`controlplane.local.command`'s.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from controlplane.runtime.logs import configure_logging

log = logging.getLogger("controlplane")

# Why the command modules are imported by name: a process imports only its own subcommand's
# module. Importing all of them pulled the kubernetes package, the control-plane launcher and the
# proxy's HTTP stack into every simulator (about 1,000 modules: 0.3 s more to start, 0.15 s more
# to exit in interpreter teardown), and a member's exit is what a swap waits for (bench/README.md,
# "Swaps"). ``--help`` without a subcommand still imports them all to list them.

#: Subcommand -> (its command module, the function that runs it), in ``--help`` order.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("controlplane.local.command", "run_demo"),
    "dev": ("controlplane.local.command", "run_dev"),
    "operator": ("controlplane.operator.command", "run"),
    "preflight": ("controlplane.preflight.command", "run"),
    "router-proxy": ("controlplane.router.command", "run"),
    "sim": ("controlplane.sim.command", "run"),
    "llama-sim": ("controlplane.sim.llamacommand", "run"),
    "sim-node": ("controlplane.standin.command", "run"),
    "tiny-model": ("controlplane.envtest.tinymodel", "run"),
    "fetch-model": ("controlplane.modelfetch.command", "run"),
    "collect-model-cache": ("controlplane.modelcache.command", "run"),
}


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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, that subcommand's module is the one imported (the
    others are accepted names without flags, enough to parse a command line that uses ``only``)."""
    parser = argparse.ArgumentParser(
        prog="controlplane", description=__doc__, parents=[_logging_options(True)]
    )
    after = [_logging_options(False)]
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, run_name) in SUBCOMMANDS.items():
        if only is not None and name != only:
            commands.add_parser(name, parents=after)
            continue
        module: ModuleType = importlib.import_module(module_name)
        run: Callable[[argparse.Namespace], int] = getattr(module, run_name)
        sub = commands.add_parser(name, help=run.__doc__, parents=after)
        module.add_arguments(sub)
        sub.set_defaults(run=run)
    return parser


def subcommand_of(argv: Sequence[str]) -> str | None:
    """The subcommand a command line names (its first word that is one), or None."""
    return next((word for word in argv if word in SUBCOMMANDS), None)


def _is_envtest_error(err: Exception) -> bool:
    """An error of the control-plane launcher, known without importing it (only ``demo`` and
    ``dev`` load it; when it was never imported, nothing raised one)."""
    envtest = sys.modules.get("controlplane.envtest")
    return envtest is not None and isinstance(err, envtest.EnvtestError)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(subcommand_of(words)).parse_args(words)
    configure_logging(args.log_level, args.log_format)
    try:
        code: int = args.run(args)
    except Exception as err:
        if not _is_envtest_error(err):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
