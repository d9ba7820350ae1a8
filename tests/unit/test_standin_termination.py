"""How a container's end and its log are reported: termination messages, log files, tails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from controlplane.standin.entrypoints import NotRunnable, missing_model, subcommand_argv
from controlplane.standin.logfiles import container_log_path, container_names, tail
from controlplane.standin.termination import (
    FALLBACK_LOG_BYTES,
    MAX_MESSAGE_BYTES,
    exit_code,
    exit_reason,
    termination_message,
)
from controlplane.standin.volumes import Mount

POD = {
    "metadata": {"namespace": "ns", "name": "p"},
    "spec": {
        "initContainers": [{"name": "fetch-model"}],
        "containers": [{"name": "server"}, {"name": "side"}],
    },
}


def test_each_container_has_its_log_and_the_first_keeps_the_pods_name(tmp_path: Path) -> None:
    assert container_log_path(tmp_path, POD, "server") == tmp_path / "ns_p.log"
    assert container_log_path(tmp_path, POD, "side") == tmp_path / "containers/ns_p_side.log"
    assert container_log_path(tmp_path, POD, "fetch-model") == (
        tmp_path / "containers/ns_p_fetch-model.log"
    )
    assert container_names(POD) == ["fetch-model", "server", "side"]


@pytest.mark.parametrize(
    ("text", "lines", "expected"),
    [
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 1, b"c"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b""),
        (b"a\nb\nc\n", None, b"a\nb\nc\n"),
        (b"", 3, b""),
    ],
)
def test_tail_gives_the_last_lines(
    tmp_path: Path, text: bytes, lines: int | None, expected: bytes
) -> None:
    path = tmp_path / "log"
    path.write_bytes(text)
    assert tail(path, lines) == expected


def test_tail_reads_from_the_end_across_blocks_and_bounds_bytes(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"".join(b"line %06d\n" % n for n in range(50_000)))
    assert tail(path, 2) == b"line 049998\nline 049999\n"
    assert tail(path, 80, 15) == b"0998\nline 049999\n"[-15:]
    assert tail(path, 1, end=len(b"line 000000\n") * 3) == b"line 000002\n"
    assert tail(tmp_path / "none", 5) == b""


def test_the_message_is_what_the_container_wrote(tmp_path: Path) -> None:
    message, log = tmp_path / "message", tmp_path / "log"
    message.write_bytes(b"NotFound: gone" + b"x" * 5000)
    log.write_bytes(b"the log\n")
    found = termination_message({"terminationMessagePolicy": "FallbackToLogsOnError"}, 3,
                                message, log)  # fmt: skip
    assert found.startswith("NotFound: gone")
    assert len(found) == MAX_MESSAGE_BYTES


def test_a_failure_that_wrote_nothing_falls_back_to_the_logs_end(tmp_path: Path) -> None:
    message, log = tmp_path / "message", tmp_path / "log"
    message.write_bytes(b"")
    log.write_bytes(b"".join(b"%d\n" % n for n in range(200)))
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    found = termination_message(fallback, 1, message, log)
    assert found.splitlines() == [str(n) for n in range(120, 200)], "the last 80 lines"
    assert termination_message(fallback, 0, message, log) == "", "only on failure"
    assert termination_message({}, 1, message, log) == "", "only with the fallback policy"
    log.write_bytes(b"y" * 10_000)
    assert len(termination_message(fallback, 1, message, log)) == FALLBACK_LOG_BYTES


def test_exit_codes_and_reasons() -> None:
    assert [exit_code(c) for c in (0, 3, -9, -15)] == [0, 3, 137, 143]
    assert (exit_reason(0), exit_reason(1)) == ("Completed", "Error")


def test_only_runnable_subcommands_run_and_they_get_their_termination_file() -> None:
    file = Path("/tmp/pod/termination/fetch-model")
    container = {"name": "fetch-model", "args": ["fetch-model", "--dest", "/d"]}
    assert subcommand_argv(container, ["fetch-model", "--dest", "/d"], file) == [
        sys.executable, "-m", "controlplane.cli", "fetch-model", "--dest", "/d",
        "--termination-log", str(file),
    ]  # fmt: skip
    given = ["fetch-model", "--termination-log", "/dev/termination-log"]
    assert subcommand_argv({"command": ["controlplane"]}, given, file)[-2:] == [
        "--termination-log", str(file)
    ], "the container's termination path is the pod's file"  # fmt: skip
    collector = ["collect-model-cache", "--cache-dir", "/c"]
    assert subcommand_argv({"name": "c"}, collector, file)[-3:] == collector, "no message flag"
    for command, args in (([], ["sim"]), (["sh", "-c"], ["fetch-model"]), ([], [])):
        with pytest.raises(
            NotRunnable, match="runs only the subcommands collect-model-cache, fetch-model"
        ):
            subcommand_argv({"name": "c", "command": command}, args, file)


def test_a_model_under_a_volume_must_be_there(tmp_path: Path) -> None:
    mounts = [Mount("/models", tmp_path)]
    crash = missing_model("/models/m.gguf", mounts)
    assert crash is not None
    assert crash.endswith("main: exiting due to model loading error\n")
    assert "'/models/m.gguf'" in crash
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert missing_model("/models/m.gguf", mounts) is None
    assert missing_model("/image/m.gguf", mounts) is None, "a file of the image: not looked at"
    assert missing_model(None, mounts) is None
