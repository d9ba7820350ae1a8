"""A small HTTP(S) file server on loopback: model downloads for the tests and the demo.

The fetcher (``controlplane fetch-model``) needs a server that behaves like the ones it meets:
byte ranges (a resumed download), ``HEAD``, TLS under a private CA (:mod:`.pki`), a bandwidth
cap (a download that lasts long enough for its progress to be seen), and the failures a test
needs to provoke on purpose (an answer of 404, 401 or 500 a number of times, a connection cut
after so many bytes), plus a log of what was asked, so a test can prove a cached run asked
nothing. With ``hub=True`` it also serves the Hugging Face Hub's download protocol, as
``huggingface_hub.hf_hub_download(endpoint=server.url)`` speaks it (2.4.0):

* ``HEAD``/``GET /{org}/{repo}/resolve/{revision}/{path}``, the file ``ROOT/{org}/{repo}/{path}``,
  answered 200 with ``X-Repo-Commit`` (a fixed fake commit per repository, :meth:`commit_of`),
  ``ETag`` (the file's sha256, quoted, as the Hub gives an LFS file's) and ``Content-Length``;
  no redirect, and no Xet header (so the client downloads over plain HTTP, by ``Range`` too);
* revisions: ``main``, the repository's commit, and any name given in ``hub_revisions``;
* 404 with the Hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
  ``EntryNotFound``), which the client turns into its typed errors;
* with ``hub_token``, 401 unless ``Authorization: Bearer TOKEN`` (no header: ``RepoNotFound``,
  as the Hub answers for a private repository; a wrong token: "Invalid credentials").

Standard library only (``http.server``, one thread per connection), so it runs where the tests
run. ``python -m controlplane.envtest.fileserver ROOT [--port N] [--hub]`` serves a folder until
interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Final
from urllib.parse import unquote, urlsplit

CHUNK_SIZE: Final = 64 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_RESOLVE = re.compile(r"^/(?P<org>[^/]+)/(?P<repo>[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)$")


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    method: str
    #: The URL's path (no query), as sent (still quoted).
    path: str
    #: ``time.monotonic()`` when the request arrived.
    time: float
    status: int
    headers: dict[str, str]


@dataclass
class _Injected:
    status: int
    times: int
    headers: dict[str, str]


@dataclass
class _State:
    root: Path
    hub: bool
    hub_token: str | None
    hub_revisions: frozenset[str]
    throttle: float | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    log: list[LoggedRequest] = field(default_factory=list)
    failures: dict[str, _Injected] = field(default_factory=dict)
    cuts: dict[str, list[int]] = field(default_factory=dict)
    digests: dict[tuple[Path, int, int], str] = field(default_factory=dict)

    def take_failure(self, path: str) -> _Injected | None:
        with self.lock:
            injected = self.failures.get(path)
            if injected is None:
                return None
            injected.times -= 1
            if injected.times <= 0:
                del self.failures[path]
            return injected

    def take_cut(self, path: str) -> int | None:
        with self.lock:
            cuts = self.cuts.get(path)
            if not cuts:
                return None
            after = cuts.pop(0)
            if not cuts:
                del self.cuts[path]
            return after

    def sha256(self, file: Path) -> str:
        stat = file.stat()
        key = (file, stat.st_size, stat.st_mtime_ns)
        with self.lock:
            known = self.digests.get(key)
        if known is None:
            digest = hashlib.sha256()
            with file.open("rb") as stream:
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
            known = digest.hexdigest()
            with self.lock:
                self.digests[key] = known
        return known


def commit_of(repo: str) -> str:
    """The fake commit sha (40 hex digits) a repository ``ORG/NAME`` is always at."""
    return hashlib.sha1(f"modelpool-fileserver:{repo}".encode()).hexdigest()


class _Unsatisfiable(Exception):
    pass


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single ``Range``, None for the whole file."""
    if header is None:
        return None
    match = _RANGE.match(header.strip())
    if match is None or match.groups() == ("", ""):
        return None  # not a form this server knows: the whole file, as RFC 9110 allows
    first, last = match.groups()
    if first == "":  # the last N bytes
        count = int(last)
        if count == 0 or size == 0:
            raise _Unsatisfiable
        return max(0, size - count), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or end < start:
        raise _Unsatisfiable
    return start, end


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "modelpool-fileserver"
    #: Idle keep-alive connections end on their own after this long.
    timeout = 30
    server: _Server
    _arrived: float = 0.0

    def log_message(self, format: str, *args: object) -> None:
        pass  # the request log is :meth:`FileServer.requests`

    def send_response(self, code: int, message: str | None = None) -> None:
        # Logged before the answer leaves: a client that got it finds it in the log.
        # (``send_error`` comes here too, for a request line that did not parse.)
        given = getattr(self, "headers", None)
        headers = {name.lower(): value for name, value in given.items()} if given else {}
        path = urlsplit(getattr(self, "path", "")).path
        arrived = self._arrived or time.monotonic()
        entry = LoggedRequest(self.command or "", path, arrived, code, headers)
        with self.server.state.lock:
            self.server.state.log.append(entry)
        super().send_response(code, message)

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, *, body: bool) -> None:
        state = self.server.state
        path = urlsplit(self.path).path
        self._arrived = time.monotonic()
        try:
            injected = state.take_failure(path)
            if injected is not None:
                self._error(injected.status, "injected failure", body, injected.headers)
                return
            resolve = _RESOLVE.match(path) if state.hub else None
            if resolve is not None:
                self._hub(resolve, body)
            else:
                self._file(self._under_root(unquote(path)), body, {}, path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _under_root(self, relative: str) -> Path | None:
        root = self.server.state.root.resolve()
        candidate = (root / relative.lstrip("/")).resolve()
        return candidate if candidate.is_relative_to(root) and candidate.is_file() else None

    def _hub(self, match: re.Match[str], body: bool) -> None:
        state = self.server.state
        org, name = unquote(match["org"]), unquote(match["repo"])
        revision, path = unquote(match["revision"]), unquote(match["path"])
        repo = f"{org}/{name}"
        if state.hub_token is not None:
            given = self.headers.get("Authorization")
            if given is None:
                self._error(401, "Repository not found", body, {"X-Error-Code": "RepoNotFound"})
                return
            if given != f"Bearer {state.hub_token}":
                message = "Invalid credentials in Authorization header"
                self._error(401, message, body, {"X-Error-Message": message})
                return
        if not (state.root / org / name).is_dir():
            self._error(404, "Repository not found", body, {"X-Error-Code": "RepoNotFound"})
            return
        if revision not in state.hub_revisions and revision != commit_of(repo):
            self._error(404, "Revision not found", body, {"X-Error-Code": "RevisionNotFound"})
            return
        file = self._under_root(f"{org}/{name}/{path}")
        if file is None:
            self._error(404, "Entry not found", body, {"X-Error-Code": "EntryNotFound"})
            return
        headers = {"X-Repo-Commit": commit_of(repo), "ETag": f'"{state.sha256(file)}"'}
        self._file(file, body, headers, match.string)

    def _file(self, file: Path | None, body: bool, headers: dict[str, str], path: str) -> None:
        if file is None:
            self._error(404, "no such file", body, {})
            return
        size = file.stat().st_size
        try:
            span = _byte_range(self.headers.get("Range"), size)
        except _Unsatisfiable:
            self._error(416, "range not satisfiable", body, {"Content-Range": f"bytes */{size}"})
            return
        first, last = span if span is not None else (0, size - 1)
        self.send_response(206 if span is not None else 200)
        headers.setdefault("ETag", f'"{size}-{file.stat().st_mtime_ns}"')
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(last - first + 1))
        if span is not None:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if body:
            self._send_bytes(file, first, last - first + 1, self.server.state.take_cut(path))

    def _send_bytes(self, file: Path, offset: int, count: int, cut: int | None) -> None:
        state = self.server.state
        started, sent = time.monotonic(), 0
        limit = count if cut is None else min(count, cut)
        with file.open("rb") as stream:
            stream.seek(offset)
            while sent < limit and not state.stopping.is_set():
                chunk = stream.read(min(CHUNK_SIZE, limit - sent))
                if not chunk:
                    break
                self.wfile.write(chunk)
                sent += len(chunk)
                rate = state.throttle
                if rate:
                    ahead = started + sent / rate - time.monotonic()
                    if ahead > 0:
                        state.stopping.wait(ahead)
        if sent < count:  # a cut (or a stop): the client sees the body end early
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _error(self, status: int, message: str, body: bool, headers: dict[str, str]) -> None:
        content = f"{status} {HTTPStatus(status).phrase}: {message}\n".encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if body:
            self.wfile.write(content)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: _State, tls: ssl.SSLContext | None) -> None:
        self.state = state
        self.tls = tls
        super().__init__(address, _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client going away (reset, broken pipe, TLS EOF) is what downloads do when cut or
        # done; anything else is a bug of this server and printed as the base class does.
        if not isinstance(sys.exception(), OSError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]

    def finish_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        # The TLS handshake runs here, in the connection's own thread, not in the accept loop.
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


class FileServer:
    """Serves ``root`` on a free loopback port while entered (``with FileServer(root) as s``)."""

    def __init__(
        self,
        root: Path,
        *,
        tls: tuple[Path, Path] | None = None,
        throttle: float | None = None,
        hub: bool = False,
        hub_token: str | None = None,
        hub_revisions: tuple[str, ...] = ("main",),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        """``tls``: (certificate, key) PEM files; ``throttle``: bytes per second of each body."""
        self._state = _State(root, hub, hub_token, frozenset(hub_revisions), throttle)
        self._host, self._port = host, port
        self._tls: ssl.SSLContext | None = None
        if tls is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(str(tls[0]), str(tls[1]))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http(s)://HOST:PORT`` (no slash): the files' base, and the Hub's endpoint."""
        if self._server is None:
            raise RuntimeError("the file server is not running")
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://{self._host}:{self._server.server_address[1]}"

    def url_of(self, relative: str) -> str:
        return f"{self.url}/{relative.lstrip('/')}"

    @property
    def throttle(self) -> float | None:
        return self._state.throttle

    @throttle.setter
    def throttle(self, bytes_per_second: float | None) -> None:
        self._state.throttle = bytes_per_second

    commit_of = staticmethod(commit_of)

    def requests(self, method: str | None = None) -> list[LoggedRequest]:
        """What was asked so far, in order (of one method when given)."""
        with self._state.lock:
            log = list(self._state.log)
        return [entry for entry in log if method is None or entry.method == method]

    def clear_requests(self) -> None:
        with self._state.lock:
            self._state.log.clear()

    def fail(
        self, path: str, status: int, times: int = 1, headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next ``times`` requests of ``path`` (a URL path: ``/models/m.gguf``) with
        ``status`` (and ``headers``, e.g. a ``Retry-After``)."""
        with self._state.lock:
            self._state.failures[path] = _Injected(status, times, dict(headers or {}))

    def cut(self, path: str, after: int, times: int = 1) -> None:
        """Close the connection after ``after`` bytes of the body, the next ``times`` GETs."""
        with self._state.lock:
            self._state.cuts.setdefault(path, []).extend([after] * times)

    def start(self) -> FileServer:
        self._state.stopping.clear()
        self._server = _Server((self._host, self._port), self._state, self._tls)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fileserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._state.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FileServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controlplane.envtest.fileserver")
    parser.add_argument("root", type=Path)
    parser.add_argument("--port", type=int, default=0, help="default: a free one")
    parser.add_argument("--hub", action="store_true", help="serve the Hub's download protocol too")
    parser.add_argument("--throttle", type=float, default=None, help="bytes per second")
    args = parser.parse_args(argv)
    server = FileServer(args.root, hub=args.hub, throttle=args.throttle, port=args.port)
    with server:
        print(server.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
