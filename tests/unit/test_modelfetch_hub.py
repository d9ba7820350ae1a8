"""``fetch-model`` for ``hf://`` sources: ``huggingface_hub`` against the file server's Hub mode."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.envtest.fileserver import FileServer
from controlplane.modelfetch.errors import Reason
from controlplane.modelfetch.hub import classify
from controlplane.modelfetch.marker import read_marker
from controlplane.modelfetch.progress import Done, ProgressReporter
from tests.unit.modelfetch_helpers import fetch, model_file, tls_files

SIZE = 200_000
REPO = "tiny-org/tiny-model"
FILE = "gguf/tiny.Q8_0.gguf"
RESOLVE = f"/{REPO}/resolve/main/{FILE}"


@pytest.fixture(autouse=True)
def _hub_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture
def served(tmp_path: Path) -> Path:
    return tmp_path / "served"


@pytest.fixture
def digest(served: Path) -> str:
    return model_file(served, f"{REPO}/{FILE}", SIZE)[1]


@pytest.fixture
def hub(served: Path, digest: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FileServer]:
    with FileServer(served, hub=True, hub_revisions=("main", "v1")) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_a_hub_file_lands_at_its_repository_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hub: FileServer, digest: str
) -> None:
    dest = tmp_path / "cache" / "hf" / REPO / "main"
    run = fetch(capsys, tmp_path, f"hf://{REPO}/{FILE}", dest, "--sha256", digest)
    assert run.code == 0, run.stderr
    assert run.done == Done(SIZE, digest, str(dest / FILE), downloaded=True)
    assert run.progress[0] == run.progress[0].__class__(0, SIZE, 0.0)
    assert [(r.method, r.path, r.status) for r in hub.requests()] == [
        ("HEAD", RESOLVE, 200),
        ("GET", RESOLVE, 200),
    ]
    assert "authorization" not in hub.requests()[0].headers  # no token given: none sent
    marker = read_marker(dest / FILE)
    assert marker is not None
    assert marker.sha256 == digest


def test_a_revision_and_no_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hub: FileServer, digest: str
) -> None:
    commit = hub.commit_of(REPO)
    run = fetch(capsys, tmp_path, f"hf://{REPO}/{FILE}@{commit}", tmp_path / "d")
    assert run.code == 0, run.stderr
    assert run.done.sha256 == digest  # computed after the download
    assert hub.requests()[0].path == f"/{REPO}/resolve/{commit}/{FILE}"
    assert fetch(capsys, tmp_path, f"hf://{REPO}/{FILE}@v1", tmp_path / "e").code == 0


def test_the_token_is_sent_and_checked(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    served: Path,
    digest: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = f"hf://{REPO}/{FILE}"
    with FileServer(served, hub=True, hub_token="hf_secret") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        run = fetch(capsys, tmp_path, source, tmp_path / "a", "--sha256", digest)
        assert run.code == 3
        assert run.termination is not None
        assert run.termination.startswith(f"Unauthorized: {source}@main (HF_ENDPOINT {hub.url})")
        monkeypatch.setenv("HF_TOKEN", "hf_wrong")
        run = fetch(capsys, tmp_path, source, tmp_path / "a", "--sha256", digest)
        assert run.code == 3
        assert run.termination is not None
        assert run.termination.startswith("Unauthorized: ")
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        hub.clear_requests()
        run = fetch(capsys, tmp_path, source, tmp_path / "a", "--sha256", digest)
        assert run.code == 0, run.stderr
        assert {r.headers.get("authorization") for r in hub.requests()} == {"Bearer hf_secret"}


@pytest.mark.parametrize(
    "source",
    [
        f"hf://{REPO}/gguf/absent.gguf",
        f"hf://tiny-org/absent-repo/{FILE}",
        f"hf://{REPO}/{FILE}@no-such-branch",
    ],
)
def test_what_the_hub_does_not_have_is_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hub: FileServer, source: str
) -> None:
    run = fetch(capsys, tmp_path, source, tmp_path / "d")
    assert run.code == 3
    assert run.termination is not None
    assert run.termination.startswith("NotFound: ")
    assert len(hub.requests()) == 1  # a permanent answer: asked once


def test_a_forbidden_file_is_forbidden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hub: FileServer
) -> None:
    hub.fail(RESOLVE, 403, times=5)
    run = fetch(capsys, tmp_path, f"hf://{REPO}/{FILE}", tmp_path / "d")
    assert run.code == 3
    assert run.termination is not None
    assert run.termination.startswith("Forbidden: ")


def test_a_hub_digest_mismatch_removes_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hub: FileServer, digest: str
) -> None:
    dest = tmp_path / "d"
    run = fetch(capsys, tmp_path, f"hf://{REPO}/{FILE}", dest, "--sha256", "f" * 64)
    assert run.code == 3
    assert run.termination == (
        f"DigestMismatch: sha256 of the download is {digest}, spec.model.sha256 is {'f' * 64}"
    )
    assert not (dest / FILE).exists()


def test_the_hub_over_tls_trusts_ssl_cert_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    served: Path,
    digest: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tls = tls_files(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_bundle))
    with FileServer(served, hub=True, tls=(tls.cert, tls.key)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        run = fetch(capsys, tmp_path, f"hf://{REPO}/{FILE}", tmp_path / "d", "--sha256", digest)
    assert run.code == 0, run.stderr


def test_an_unreachable_hub_is_retryable(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    served: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served.mkdir()
    with FileServer(served, hub=True) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
    # The library retries a refused connection itself, for 23 s: its waits are skipped here.
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    run = fetch(capsys, tmp_path, f"hf://{REPO}/{FILE}", tmp_path / "d", "--retries", "0")
    assert run.code == 1
    assert run.termination is not None
    assert run.termination.startswith("Unreachable: ")


def test_the_library_s_errors_are_classified_through_their_chain(tmp_path: Path) -> None:
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    reporter = ProgressReporter(write=lambda line: None)
    request = httpx2.Request("HEAD", "http://hub/x")

    def wrapped(status: int) -> BaseException:
        try:
            try:
                raise HfHubHTTPError("refused", response=httpx2.Response(status, request=request))
            except HfHubHTTPError as inner:
                raise LocalEntryNotFoundError("cannot find the requested files") from inner
        except LocalEntryNotFoundError as outer:
            return outer

    def reason(err: BaseException) -> Reason:
        return classify(err, "hf://o/r/f", tmp_path, reporter).reason

    assert reason(wrapped(403)) is Reason.FORBIDDEN
    assert reason(wrapped(500)) is Reason.SERVER_ERROR
    assert reason(wrapped(429)) is Reason.SERVER_ERROR
    assert reason(httpx2.ConnectError("refused")) is Reason.UNREACHABLE
    assert reason(httpx2.ReadTimeout("slow")) is Reason.UNREACHABLE
    assert reason(LocalEntryNotFoundError("offline")) is Reason.UNREACHABLE
    assert reason(OSError(28, "No space left on device")) is Reason.DISK_FULL
    assert reason(ValueError("too large")) is Reason.INVALID
    with pytest.raises(KeyError):
        classify(KeyError("a bug"), "hf://o/r/f", tmp_path, reporter)
