"""``controlplane sim``: every knob reaches the settings, and nonsense is a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.cli import build_parser
from controlplane.sim.command import settings_from
from controlplane.sim.settings import SimSettings, SlotsMode


def test_defaults_are_the_settings_defaults() -> None:
    assert settings_from(build_parser().parse_args(["sim"])) == SimSettings()


def test_every_knob_reaches_the_settings() -> None:
    args = build_parser().parse_args(
        [
            "sim",
            "--host=::1",
            "--port=0",
            "--model-name=llama-b",
            "--load-seconds=2.5",
            "--token-seconds=0.2",
            "--slots=4",
            "--ctx-size=512",
            "--reply-tokens=30",
            "--no-slots",
            "--legacy-slots",
            "--slots-mode=slow",
            "--slow-slots-seconds=9",
            "--metrics",
        ]
    )
    assert settings_from(args) == SimSettings(
        host="::1",
        port=0,
        model_name="llama-b",
        load_seconds=2.5,
        token_seconds=0.2,
        slots=4,
        n_ctx=512,
        reply_tokens=30,
        slots_endpoint=False,
        legacy_slots=True,
        slots_mode=SlotsMode.SLOW,
        slow_slots_seconds=9.0,
        metrics_endpoint=True,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--slots=0"],
        ["--port=-1"],
        ["--load-seconds=-1"],
        ["--token-seconds=soon"],
        ["--slots-mode=sideways"],
    ],
)
def test_nonsense_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["sim", *argv])
    assert exit_info.value.code == 2


def test_settings_refuse_what_the_parser_would_have_refused() -> None:
    with pytest.raises(ValueError, match="slots"):
        SimSettings(slots=0)
    with pytest.raises(ValueError, match="negative"):
        SimSettings(token_seconds=-1)


def test_the_slot_save_path_must_be_a_folder_as_llama_server_insists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path
    args = build_parser().parse_args(
        ["sim", f"--slot-save-path={folder}", "--slot-restore-delay=3"]
    )
    assert settings_from(args) == SimSettings(slot_save_path=folder, slot_restore_delay_seconds=3.0)
    (folder / "file").write_text("")
    for bad in (folder / "file", folder / "missing"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["sim", f"--slot-save-path={bad}"])
        assert f"not a directory: {bad}" in capsys.readouterr().err
