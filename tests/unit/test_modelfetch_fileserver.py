"""The test file server the fetcher's tests download from: ranges, HEAD, failures, the Hub."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.envtest.fileserver import FileServer, commit_of
from tests.unit.modelfetch_helpers import model_file

SIZE = 1000


@pytest.fixture
def served(tmp_path: Path) -> Path:
    return tmp_path / "served"


@pytest.fixture
def data(served: Path) -> bytes:
    path, _ = model_file(served, "org/repo/m.bin", SIZE)
    return path.read_bytes()


@pytest.fixture
def server(served: Path, data: bytes) -> Iterator[FileServer]:
    with FileServer(served, hub=True) as running:
        yield running


def test_a_whole_file_and_its_head(server: FileServer, data: bytes) -> None:
    got = httpx.get(server.url_of("org/repo/m.bin"))
    assert (got.status_code, got.content) == (200, data)
    assert got.headers["Accept-Ranges"] == "bytes"
    head = httpx.head(server.url_of("org/repo/m.bin"))
    assert (head.status_code, head.headers["Content-Length"], head.content) == (200, "1000", b"")
    assert [(r.method, r.path, r.status) for r in server.requests()] == [
        ("GET", "/org/repo/m.bin", 200),
        ("HEAD", "/org/repo/m.bin", 200),
    ]
    server.clear_requests()
    assert server.requests() == []


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [("bytes=100-", 100, 999), ("bytes=100-199", 100, 199), ("bytes=-10", 990, 999)],
)
def test_ranges_are_partial_content(
    server: FileServer, data: bytes, header: str, first: int, last: int
) -> None:
    got = httpx.get(server.url_of("org/repo/m.bin"), headers={"Range": header})
    assert got.status_code == 206
    assert got.headers["Content-Range"] == f"bytes {first}-{last}/{SIZE}"
    assert got.content == data[first : last + 1]


def test_a_range_past_the_end_is_unsatisfiable(server: FileServer) -> None:
    got = httpx.get(server.url_of("org/repo/m.bin"), headers={"Range": "bytes=1000-"})
    assert got.status_code == 416
    assert got.headers["Content-Range"] == f"bytes */{SIZE}"


def test_missing_files_and_paths_outside_the_root_are_404(server: FileServer, served: Path) -> None:
    (served.parent / "secret").write_text("not served")
    assert httpx.get(server.url_of("absent")).status_code == 404
    assert httpx.get(server.url + "/..%2Fsecret").status_code == 404


def test_injected_failures_answer_so_many_times(server: FileServer) -> None:
    server.fail("/org/repo/m.bin", 503, times=2, headers={"Retry-After": "1"})
    url = server.url_of("org/repo/m.bin")
    first = httpx.get(url)
    assert (first.status_code, first.headers["Retry-After"]) == (503, "1")
    assert [httpx.get(url).status_code for _ in range(2)] == [503, 200]


def test_a_cut_ends_the_body_early(server: FileServer) -> None:
    server.cut("/org/repo/m.bin", after=100)
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(server.url_of("org/repo/m.bin"))
    assert httpx.get(server.url_of("org/repo/m.bin")).status_code == 200


def test_the_throttle_paces_the_body(tmp_path: Path) -> None:
    model_file(tmp_path, "big.bin", 200_000)
    with FileServer(tmp_path, throttle=1_000_000) as server:
        started = time.monotonic()
        assert len(httpx.get(server.url_of("big.bin")).content) == 200_000
        assert time.monotonic() - started >= 0.18


def test_the_hub_resolves_a_file_with_the_headers_the_client_reads(
    server: FileServer, data: bytes
) -> None:
    url = server.url + "/org/repo/resolve/main/m.bin"
    head = httpx.head(url)
    assert head.status_code == 200
    assert head.headers["X-Repo-Commit"] == commit_of("org/repo")
    assert len(commit_of("org/repo")) == 40
    assert head.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert head.headers["Content-Length"] == str(SIZE)
    assert not [name for name in head.headers if name.lower().startswith("x-xet")]
    assert httpx.get(url, headers={"Range": "bytes=10-"}).content == data[10:]
    by_commit = server.url + f"/org/repo/resolve/{commit_of('org/repo')}/m.bin"
    assert httpx.get(by_commit).content == data


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/org/absent/resolve/main/m.bin", "RepoNotFound"),
        ("/org/repo/resolve/v9/m.bin", "RevisionNotFound"),
        ("/org/repo/resolve/main/absent.bin", "EntryNotFound"),
    ],
)
def test_the_hub_says_what_is_missing(server: FileServer, path: str, code: str) -> None:
    got = httpx.head(server.url + path)
    assert (got.status_code, got.headers["X-Error-Code"]) == (404, code)


def test_the_hub_checks_the_token(served: Path, data: bytes) -> None:
    with FileServer(served, hub=True, hub_token="t") as server:
        url = server.url + "/org/repo/resolve/main/m.bin"
        assert httpx.head(url).status_code == 401
        assert httpx.head(url, headers={"Authorization": "Bearer x"}).status_code == 401
        assert httpx.head(url, headers={"Authorization": "Bearer t"}).status_code == 200
