"""``controlplane preflight``: arguments and the exit codes that need no API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.cli import build_parser, main
from controlplane.preflight.command import EXIT_CONFIG
from controlplane.preflight.permissions import Component
from controlplane.preflight.verdict import (
    EXIT_ALLOWED,
    EXIT_DENIED,
    EXIT_INCONCLUSIVE,
    Outcome,
    Source,
    Verdict,
)


def test_the_subcommand_takes_component_namespace_kubeconfig_and_cache_dir() -> None:
    args = build_parser().parse_args(
        [
            "preflight",
            "--component",
            "operator",
            "--namespace",
            "ops",
            "--kubeconfig",
            "/k",
            "--cache-dir",
            "/c",
        ]
    )
    assert (args.component, args.namespace) == ("operator", "ops")
    assert (args.kubeconfig, args.cache_dir) == (Path("/k"), Path("/c"))


def test_an_unknown_component_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["preflight", "--component", "scheduler"])


def test_no_namespace_outside_a_pod_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    code = main(["preflight", "--component", "router-proxy", "--namespace", ""])
    assert code == EXIT_CONFIG
    assert "--namespace" in capsys.readouterr().err


def test_a_missing_kubeconfig_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "preflight",
            "--component",
            "router-proxy",
            "--namespace",
            "ns",
            "--kubeconfig",
            str(tmp_path / "absent.yaml"),
        ]
    )
    assert code == EXIT_CONFIG
    assert "no usable API server configuration" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (Outcome.ALLOWED, EXIT_ALLOWED),
        (Outcome.DENIED, EXIT_DENIED),
        (Outcome.INCONCLUSIVE, EXIT_INCONCLUSIVE),
    ],
)
def test_exit_codes_follow_sysexits(outcome: Outcome, code: int) -> None:
    verdict = Verdict(outcome, Source.LIVE, Component.OPERATOR, "ns", "m")
    assert verdict.exit_code == code
    assert (EXIT_ALLOWED, EXIT_DENIED, EXIT_INCONCLUSIVE) == (0, 77, 75)
