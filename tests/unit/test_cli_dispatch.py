"""The console script imports only the subcommand it runs: a simulator (started for every member
pod, and waited for on every swap) must not load the kubernetes package or the proxy's stack."""

from __future__ import annotations

import subprocess
import sys

import pytest

from controlplane.cli import SUBCOMMANDS, build_parser, subcommand_of

HEAVY = ("kubernetes", "controlplane.envtest", "controlplane.router.app", "opentelemetry.sdk")


def _modules_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_the_simulator_command_line_loads_no_kubernetes_client_nor_proxy() -> None:
    loaded = _modules_after(
        "from controlplane.cli import build_parser, subcommand_of\n"
        "argv = ['--log-level', 'INFO', 'sim', '--port', '0']\n"
        "build_parser(subcommand_of(argv)).parse_args(argv)"
    )
    assert "controlplane.sim.command" in loaded
    assert not [name for name in HEAVY if name in loaded]


def test_the_whole_parser_still_knows_every_subcommand() -> None:
    loaded = _modules_after("from controlplane.cli import build_parser\nbuild_parser()")
    assert {module for module, _ in SUBCOMMANDS.values()} <= loaded


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sim", "--port", "0"], "sim"),
        (["--log-level", "DEBUG", "router-proxy", "--router", "r"], "router-proxy"),
        (["--help"], None),
        ([], None),
    ],
)
def test_the_subcommand_is_the_first_word_that_names_one(
    argv: list[str], expected: str | None
) -> None:
    assert subcommand_of(argv) == expected


def test_a_parser_for_one_subcommand_still_parses_its_flags_and_refuses_others() -> None:
    args = build_parser("sim").parse_args(["sim", "--slots", "3"])
    assert args.slots == 3
    assert args.command == "sim"
    with pytest.raises(SystemExit):
        build_parser("sim").parse_args(["sim", "--router", "r"])
