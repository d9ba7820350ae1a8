"""The fetcher's cache: the marker's fast path, what invalidates it, one download for two pods,
and the console script's ``fetch-model``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.cli import build_parser
from controlplane.envtest.fileserver import FileServer
from controlplane.modelfetch import fetch as fetch_module
from controlplane.modelfetch.marker import marker_path, read_marker
from controlplane.modelfetch.progress import Done, parse_line
from tests.unit.modelfetch_helpers import FAST_RETRIES, fetch, model_file

SIZE = 100_000
REPO = "org/model"


@pytest.fixture(autouse=True)
def _hub_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture
def served(tmp_path: Path) -> Path:
    return tmp_path / "served"


@pytest.fixture
def server(served: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FileServer]:
    served.mkdir()
    with FileServer(served, hub=True) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        yield running


def _no_hashing(path: Path) -> str:
    raise AssertionError(f"the fast path read {path}")


@pytest.mark.parametrize("kind", ["http", "hf"])
def test_a_second_run_finds_the_marker_and_asks_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FileServer,
    served: Path,
    kind: str,
) -> None:
    _, digest = model_file(served, f"{REPO}/m.gguf", SIZE)
    source = server.url_of(f"{REPO}/m.gguf") if kind == "http" else f"hf://{REPO}/m.gguf"
    dest = tmp_path / "entry"
    assert fetch(capsys, tmp_path, source, dest, "--sha256", digest).code == 0
    server.clear_requests()
    monkeypatch.setattr(fetch_module, "sha256_of", _no_hashing)
    run = fetch(capsys, tmp_path, source, dest, "--sha256", digest)
    assert run.code == 0
    assert run.records == [Done(SIZE, digest, str(dest / "m.gguf"), downloaded=False)]
    assert server.requests() == []
    if kind == "hf":  # without --sha256 too (http needs one): the marker's digest is reported
        assert fetch(capsys, tmp_path, source, dest).done.sha256 == digest
        assert server.requests() == []


def test_one_file_spelled_two_ways_shares_its_marker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    model_file(served, f"{REPO}/m.gguf", SIZE)
    dest = tmp_path / "entry"
    assert fetch(capsys, tmp_path, f"hf://{REPO}/m.gguf", dest).code == 0
    server.clear_requests()
    run = fetch(capsys, tmp_path, f"hf://{REPO}/m.gguf@main", dest)
    assert run.done.downloaded is False
    assert server.requests() == []
    marker = read_marker(dest / "m.gguf")
    assert marker is not None
    assert marker.source == f"hf://{REPO}/m.gguf@main"


def test_a_touched_file_is_checked_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, digest = model_file(served, "m.gguf", SIZE)
    dest = tmp_path / "entry"
    source = server.url_of("m.gguf")
    assert fetch(capsys, tmp_path, source, dest, "--sha256", digest).code == 0
    os.utime(dest / "m.gguf", ns=(1, 1))
    server.clear_requests()
    # With a digest: the file is read once, found right, and vouched for again, not fetched.
    run = fetch(capsys, tmp_path, source, dest, "--sha256", digest)
    assert run.done == Done(SIZE, digest, str(dest / "m.gguf"), downloaded=False)
    assert server.requests() == []
    marker = read_marker(dest / "m.gguf")
    assert marker is not None
    assert marker.mtime_ns == 1


def test_a_file_changed_in_place_is_downloaded_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, digest = model_file(served, "m.gguf", SIZE)
    dest = tmp_path / "entry"
    source = server.url_of("m.gguf")
    assert fetch(capsys, tmp_path, source, dest, "--sha256", digest).code == 0
    (dest / "m.gguf").write_bytes(b"not the model")
    server.clear_requests()
    run = fetch(capsys, tmp_path, source, dest, "--sha256", digest)
    assert run.done == Done(SIZE, digest, str(dest / "m.gguf"), downloaded=True)
    assert len(server.requests("GET")) == 1


def test_a_new_digest_in_the_spec_fetches_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, first = model_file(served, "m.gguf", SIZE, seed=1)
    dest = tmp_path / "entry"
    source = server.url_of("m.gguf")
    assert fetch(capsys, tmp_path, source, dest, "--sha256", first).code == 0
    _, second = model_file(served, "m.gguf", SIZE, seed=2)  # the URL serves a new file
    run = fetch(capsys, tmp_path, source, dest, "--sha256", second)
    assert run.done == Done(SIZE, second, str(dest / "m.gguf"), downloaded=True)
    # Asking for the old digest again: the URL no longer serves it.
    run = fetch(capsys, tmp_path, source, dest, "--sha256", first)
    assert run.code == 3
    assert run.termination is not None
    assert run.termination.startswith("DigestMismatch: ")
    assert not marker_path(dest / "m.gguf").exists()


@pytest.mark.parametrize(
    ("source", "sha256", "says"),
    [
        ("/models/m.gguf", None, "a image source is read where it is"),
        ("pvc://claim/m.gguf", None, "a pvc source is read where it is"),
        ("ftp://host/m.gguf", None, "source must be an absolute path"),
        ("https://host/../m.gguf", None, "'.' or '..'"),
        ("https://host/m.gguf", "abc", "--sha256 must be 64 hexadecimal digits"),
    ],
)
def test_a_source_that_is_not_fetched_is_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, sha256: str | None, says: str
) -> None:
    args = ("--sha256", sha256) if sha256 else ()
    run = fetch(capsys, tmp_path, source, tmp_path / "entry", *args)
    assert run.code == 3
    assert run.termination is not None
    assert run.termination.startswith("Invalid: ")
    assert says in run.termination
    assert not (tmp_path / "entry").exists()


def _command(source: str, dest: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "controlplane.cli",
        "fetch-model",
        "--source",
        source,
        "--dest",
        str(dest),
        "--termination-log",
        str(dest.parent / "termination-log"),
        *FAST_RETRIES,
        *args,
    ]


def test_the_cached_path_imports_no_http_client_nor_the_hub_library(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, digest = model_file(served, f"{REPO}/m.gguf", SIZE)
    dest = tmp_path / "entry"
    source = f"hf://{REPO}/m.gguf"
    assert fetch(capsys, tmp_path, source, dest, "--sha256", digest).code == 0
    script = (
        "import sys\n"
        "from controlplane.cli import main\n"
        f"code = main({_command(source, dest, '--sha256', digest)[3:]!r})\n"
        "heavy = [m for m in ('httpx', 'httpx2', 'huggingface_hub', 'filelock', 'tqdm')"
        " if m in sys.modules]\n"
        "print('HEAVY', code, heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "HEAVY 0 []"
    assert parse_line(out.splitlines()[0]) == Done(SIZE, digest, str(dest / "m.gguf"), False)


@pytest.mark.parametrize("kind", ["http", "hf"])
def test_two_pods_fetching_one_file_download_it_once(
    tmp_path: Path, server: FileServer, served: Path, kind: str
) -> None:
    size = 1_500_000
    _, digest = model_file(served, f"{REPO}/m.gguf", size)
    server.throttle = 1_500_000  # a second: the second process starts while the first holds it
    source = server.url_of(f"{REPO}/m.gguf") if kind == "http" else f"hf://{REPO}/m.gguf"
    dest = tmp_path / "entry"
    env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HOME": str(tmp_path / "hf-home")}
    pods = [
        subprocess.Popen(
            _command(source, dest, "--sha256", digest),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [pod.communicate(timeout=60) for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0], [err for _, err in outputs]
    finals = [parse_line(out.splitlines()[-1]) for out, _ in outputs]
    assert all(isinstance(final, Done) for final in finals)
    assert sorted(final.downloaded for final in finals if isinstance(final, Done)) == [False, True]
    assert len(server.requests("GET")) == 1
    assert any("another fetch of" in err for _, err in outputs)  # they did overlap
    assert (dest / "m.gguf").stat().st_size == size


def test_the_console_script_has_the_subcommand_and_its_defaults() -> None:
    args = build_parser("fetch-model").parse_args(
        ["fetch-model", "--source", "hf://o/r/f.gguf", "--dest", "/var/lib/modelpool/model"]
    )
    assert args.command == "fetch-model"
    assert (args.source, args.sha256, args.dest) == (
        "hf://o/r/f.gguf",
        None,
        Path("/var/lib/modelpool/model"),
    )
    assert (args.progress_interval, args.retries, args.retry_delay) == (1.0, 5, 1.0)
    assert (args.connect_timeout, args.read_timeout) == (10.0, 60.0)
    assert args.termination_log == Path("/dev/termination-log")
    with pytest.raises(SystemExit):
        build_parser("fetch-model").parse_args(["fetch-model", "--dest", "/d"])
    with pytest.raises(SystemExit):
        build_parser("fetch-model").parse_args(
            ["fetch-model", "--source", "s", "--dest", "/d", "--retries", "-1"]
        )


@pytest.mark.parametrize("kind", ["http", "hf"])
def test_a_run_that_finds_the_file_by_its_marker_records_a_use(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: FileServer,
    served: Path,
    kind: str,
) -> None:
    """The marker's modification time is the file's last use (the cache's collection reads it):
    every start of a member's pod finds the file by its marker and moves it to now."""
    _, digest = model_file(served, f"{REPO}/m.gguf", SIZE)
    source = server.url_of(f"{REPO}/m.gguf") if kind == "http" else f"hf://{REPO}/m.gguf"
    dest = tmp_path / "entry"
    assert fetch(capsys, tmp_path, source, dest, "--sha256", digest).code == 0
    marker = marker_path(dest / "m.gguf")
    os.utime(marker, (1_000_000, 1_000_000))
    file_mtime = (dest / "m.gguf").stat().st_mtime_ns
    run = fetch(capsys, tmp_path, source, dest, "--sha256", digest)
    assert run.done.downloaded is False
    assert marker.stat().st_mtime > 1_000_000 + 3600, "the fast path did not record the use"
    assert (dest / "m.gguf").stat().st_mtime_ns == file_mtime, "the file itself is untouched"
    assert read_marker(dest / "m.gguf") is not None
