"""``controlplane llama-sim`` takes a member pod's llama-server arguments with their meanings."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.cli import build_parser
from controlplane.sim.llamacommand import settings_from
from controlplane.sim.settings import SimSettings


def parse(*argv: str) -> SimSettings:
    return settings_from(build_parser().parse_args(["llama-sim", *argv]))


def test_the_operators_arguments_give_the_served_name_address_and_slots() -> None:
    settings = parse(
        "--model", "/models/qwen.gguf", "--alias", "qwen-2-7b", "--host", "0.0.0.0",
        "--port", "8080", "--parallel", "2", "--ctx-size", "4096", "--threads", "1",
    )  # fmt: skip
    assert (settings.model_name, settings.host, settings.port) == ("qwen-2-7b", "0.0.0.0", 8080)
    assert (settings.slots, settings.n_ctx) == (2, 2048)


def test_metrics_serves_metrics_as_the_operator_starts_every_member() -> None:
    assert parse("--model", "m.gguf", "--metrics").metrics_endpoint is True
    assert parse("--model", "m.gguf").metrics_endpoint is False


def test_without_an_alias_the_model_files_stem_names_it() -> None:
    assert parse("-m", "/models/llama-3-8b.Q4.gguf").model_name == "llama-3-8b.Q4"


def test_an_unknown_flag_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--model", "m.gguf", "--flash-attn")
    assert "--flash-attn" in capsys.readouterr().err


def test_a_slot_save_path_must_be_a_folder(tmp_path: Path) -> None:
    assert parse("--slot-save-path", str(tmp_path)).slot_save_path == tmp_path
    with pytest.raises(SystemExit, match="not a directory"):
        parse("--slot-save-path", str(tmp_path / "missing"))
