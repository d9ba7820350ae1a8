"""``fetch-model`` for ``https://`` and ``http://`` sources, against the real file server."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.envtest.fileserver import FileServer
from controlplane.modelfetch import https
from controlplane.modelfetch.marker import marker_path, read_marker
from controlplane.modelfetch.progress import Done
from tests.unit.modelfetch_helpers import fetch, model_file, tls_files

SIZE = 300_000


@pytest.fixture(autouse=True)
def _hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The command points HF_HOME into the cache entry when unset: kept out of this process.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


@pytest.fixture
def served(tmp_path: Path) -> Path:
    return tmp_path / "served"


@pytest.fixture
def server(served: Path) -> Iterator[FileServer]:
    served.mkdir()
    with FileServer(served) as running:
        yield running


def test_https_downloads_trusting_the_ca_of_ssl_cert_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served = tmp_path / "served"
    _, digest = model_file(served, "models/m.gguf", SIZE)
    tls = tls_files(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_bundle))
    dest = tmp_path / "cache" / "entry"
    with FileServer(served, tls=(tls.cert, tls.key)) as server:
        assert server.url.startswith("https://")
        run = fetch(capsys, tmp_path, server.url_of("models/m.gguf"), dest, "--sha256", digest)
    assert run.code == 0, run.stderr
    assert run.done == Done(SIZE, digest, str(dest / "m.gguf"), downloaded=True)
    assert run.progress[0].bytes_done == 0
    assert run.progress[0].bytes_total == SIZE
    assert (dest / "m.gguf").stat().st_size == SIZE
    assert not https.part_path(dest / "m.gguf").exists()
    marker = read_marker(dest / "m.gguf")
    assert marker is not None
    assert marker.sha256 == digest


def test_https_refuses_a_server_the_environment_does_not_trust(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served = tmp_path / "served"
    model_file(served, "m.gguf", 10)
    tls = tls_files(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files(tmp_path / "other").ca_bundle))
    with FileServer(served, tls=(tls.cert, tls.key)) as server:
        run = fetch(capsys, tmp_path, server.url_of("m.gguf"), tmp_path / "d", "--retries", "0")
    assert run.code == 1
    assert run.termination is not None
    assert run.termination.startswith("Unreachable: ")
    assert "CERTIFICATE_VERIFY_FAILED" in run.termination
    assert "spec.model.caBundle" in run.termination


def test_http_downloads_with_its_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, digest = model_file(served, "m.bin", SIZE)
    dest = tmp_path / "d"
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), dest, "--sha256", digest.upper())
    assert run.code == 0, run.stderr
    assert run.done == Done(SIZE, digest, str(dest / "m.bin"), downloaded=True)


def test_https_without_a_digest_records_the_one_it_computed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served = tmp_path / "served"
    _, digest = model_file(served, "m.gguf", SIZE)
    tls = tls_files(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_bundle))
    dest = tmp_path / "d"
    with FileServer(served, tls=(tls.cert, tls.key)) as server:
        run = fetch(capsys, tmp_path, server.url_of("m.gguf"), dest)
    assert run.code == 0, run.stderr
    assert run.done.sha256 == digest
    marker = read_marker(dest / "m.gguf")
    assert marker is not None
    assert marker.sha256 == digest


def test_http_without_a_digest_is_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer
) -> None:
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), tmp_path / "d")
    assert run.code == 3
    assert run.termination is not None
    assert run.termination.startswith("Invalid: an http:// source needs sha256")
    assert run.termination in run.stderr
    assert server.requests() == []


def test_a_cut_connection_resumes_with_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, digest = model_file(served, "m.bin", SIZE)
    server.cut("/m.bin", after=100_000)
    dest = tmp_path / "d"
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), dest, "--sha256", digest)
    assert run.code == 0, run.stderr
    assert run.done.sha256 == digest
    gets = server.requests("GET")
    assert [(g.status, g.headers.get("range")) for g in gets] == [
        (200, None),
        (206, "bytes=100000-"),
    ]


def test_a_part_left_by_an_earlier_run_is_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    source, digest = model_file(served, "m.bin", SIZE)
    dest = tmp_path / "d"
    dest.mkdir()
    https.part_path(dest / "m.bin").write_bytes(source.read_bytes()[:123_456])
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), dest, "--sha256", digest)
    assert run.code == 0, run.stderr
    assert run.progress[0].bytes_done == 123_456
    assert [g.headers.get("range") for g in server.requests("GET")] == ["bytes=123456-"]
    assert (dest / "m.bin").read_bytes() == source.read_bytes()


def test_a_complete_part_is_not_fetched_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    source, digest = model_file(served, "m.bin", 1000)
    dest = tmp_path / "d"
    dest.mkdir()
    https.part_path(dest / "m.bin").write_bytes(source.read_bytes())
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), dest, "--sha256", digest)
    assert run.code == 0, run.stderr
    assert [g.status for g in server.requests("GET")] == [416]
    assert (dest / "m.bin").read_bytes() == source.read_bytes()


def test_a_digest_mismatch_removes_the_download_and_is_permanent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, digest = model_file(served, "m.bin", SIZE)
    wrong = "0" * 64
    dest = tmp_path / "d"
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), dest, "--sha256", wrong)
    assert run.code == 3
    assert run.termination == (
        f"DigestMismatch: sha256 of the download is {digest}, spec.model.sha256 is {wrong}"
    )
    assert not (dest / "m.bin").exists()
    assert not https.part_path(dest / "m.bin").exists()
    assert not marker_path(dest / "m.bin").exists()


def test_a_corrupt_part_is_caught_by_the_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    _, digest = model_file(served, "m.bin", SIZE)
    dest = tmp_path / "d"
    dest.mkdir()
    https.part_path(dest / "m.bin").write_bytes(b"\0" * 1000)
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), dest, "--sha256", digest)
    assert run.code == 3
    assert run.termination is not None
    assert run.termination.startswith("DigestMismatch: ")
    assert not https.part_path(dest / "m.bin").exists()
    # The next run (the Job's retry) starts clean and succeeds.
    assert fetch(capsys, tmp_path, server.url_of("m.bin"), dest, "--sha256", digest).code == 0


@pytest.mark.parametrize(
    ("status", "reason", "code"),
    [
        (404, "NotFound", 3),
        (401, "Unauthorized", 3),
        (403, "Forbidden", 3),
        (400, "Invalid", 3),
    ],
)
def test_a_refusal_is_permanent_and_named(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: FileServer,
    served: Path,
    status: int,
    reason: str,
    code: int,
) -> None:
    model_file(served, "m.bin", 10)
    server.fail("/m.bin", status, times=10)
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), tmp_path / "d", "--sha256", "a" * 64)
    assert run.code == code
    assert run.termination is not None
    assert run.termination.startswith(f"{reason}: {server.url_of('m.bin')} answered {status}")
    assert len(server.requests("GET")) == 1  # not retried


def test_a_missing_file_is_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer
) -> None:
    source = server.url_of("absent.gguf")
    run = fetch(capsys, tmp_path, source, tmp_path / "d", "--sha256", "a" * 64)
    assert run.code == 3
    assert run.termination == f"NotFound: {source} answered 404: no such file"


def test_server_errors_are_retried_until_the_file_comes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    server: FileServer,
    served: Path,
) -> None:
    _, digest = model_file(served, "m.bin", SIZE)
    server.fail("/m.bin", 500, times=2)
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), tmp_path / "d", "--sha256", digest)
    assert run.code == 0, run.stderr
    assert [g.status for g in server.requests("GET")] == [500, 500, 200]
    retries = [r.getMessage() for r in caplog.records if r.name == "controlplane.modelfetch"]
    assert len(retries) == 2
    assert retries[0].startswith(f"{server.url_of('m.bin')} answered 500; retry 1 of 5 in ")


def test_server_errors_after_the_retries_are_a_retryable_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    model_file(served, "m.bin", 10)
    server.fail("/m.bin", 503, times=10)
    run = fetch(
        capsys,
        tmp_path,
        server.url_of("m.bin"),
        tmp_path / "d",
        "--sha256",
        "a" * 64,
        "--retries",
        "2",
    )
    assert run.code == 1
    assert run.termination is not None
    assert run.termination.startswith("ServerError: ")
    assert "gave up after 3 attempts" in run.termination
    assert len(server.requests("GET")) == 3


def test_a_closed_port_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], served: Path
) -> None:
    served.mkdir()
    with FileServer(served) as server:
        url = server.url_of("m.bin")
    run = fetch(capsys, tmp_path, url, tmp_path / "d", "--sha256", "a" * 64, "--retries", "1")
    assert run.code == 1
    assert run.termination is not None
    assert run.termination.startswith("Unreachable: ")


def test_too_little_free_space_is_disk_full_before_downloading(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: FileServer,
    served: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, digest = model_file(served, "m.bin", SIZE)
    monkeypatch.setattr(https, "free_bytes", lambda folder: 1000)
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), tmp_path / "d", "--sha256", digest)
    assert run.code == 1
    assert run.termination is not None
    assert run.termination.startswith(f"DiskFull: the file needs {SIZE} more bytes in ")
    assert "1000 bytes are free" in run.termination


class _FullDisk:
    """A part file whose disk fills after ``room`` bytes."""

    def __init__(self, file: Any, room: int) -> None:
        self._file, self._room, self.written = file, room, 0

    def write(self, data: bytes) -> int:
        if self.written + len(data) > self._room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written += len(data)
        return int(self._file.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def test_enospc_while_writing_is_disk_full_naming_what_is_left(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    server: FileServer,
    served: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    size = 1_000_000
    _, digest = model_file(served, "m.bin", size)
    original = https._Part.__init__
    disks: list[_FullDisk] = []

    def init(self: https._Part, path: Path) -> None:
        original(self, path)
        disks.append(_FullDisk(self._file, 300_000))
        self._file = disks[-1]  # type: ignore[assignment]

    monkeypatch.setattr(https._Part, "__init__", init)
    run = fetch(capsys, tmp_path, server.url_of("m.bin"), tmp_path / "d", "--sha256", digest)
    assert run.code == 1
    assert run.termination is not None
    needed = size - disks[0].written
    assert run.termination.startswith(
        f"DiskFull: the file needs {needed} more bytes in {tmp_path / 'd'}, "
    )
    assert len(server.requests("GET")) == 1  # not retried: freeing space takes a person


def test_progress_moves_through_a_throttled_download(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FileServer, served: Path
) -> None:
    size = 2_000_000
    _, digest = model_file(served, "big.bin", size)
    server.throttle = 2_000_000  # about a second
    run = fetch(
        capsys,
        tmp_path,
        server.url_of("big.bin"),
        tmp_path / "d",
        "--sha256",
        digest,
        "--progress-interval",
        "0.2",
    )
    assert run.code == 0
    done = [record.bytes_done for record in run.progress]
    assert len(done) >= 3
    assert done == sorted(done)
    assert done[0] == 0
    assert 0 < done[-1] <= size
    assert all(record.bytes_total == size for record in run.progress)
    assert any(record.bytes_per_second > 0 for record in run.progress[1:])
    assert run.done.bytes_total == size
