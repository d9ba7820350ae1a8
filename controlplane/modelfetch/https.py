"""``https://`` and ``http://`` sources: a resumable ``httpx`` download, hashed as it streams.

The bytes go to ``FILE.part`` beside the file; a cut connection resumes from the part's size with
``Range: bytes=N-`` (a part left by an earlier run too: its bytes are hashed again to carry the
digest on, which is cheaper than fetching them again). The sha256 is computed while the bytes
arrive, compared to ``--sha256`` when one is given, and only a matching file is renamed into place
(``os.replace``, atomic): a reader of the cache never sees a partial or unverified file.

A server that ignores ``Range`` (200 to a ranged request) restarts the part; one that answers 416
to the part's size had already sent it all. ``Accept-Encoding: identity`` is asked for, so the
bytes on disk and the offsets of ``Range`` are the file's own. Certificates: :mod:`.tls`; proxies:
``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` (httpx reads them).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import httpx

from controlplane.modelfetch.errors import (
    FetchError,
    Reason,
    digest_mismatch,
    disk_full,
    for_status,
    free_bytes,
    is_disk_full,
)
from controlplane.modelfetch.progress import ProgressReporter
from controlplane.modelfetch.retry import RetryPolicy, retrying
from controlplane.modelfetch.tls import ssl_context

PART_SUFFIX: Final = ".part"
CHUNK_SIZE: Final = 1 << 20
_CONTENT_RANGE = re.compile(r"^bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)$")


@dataclass(frozen=True, slots=True)
class Downloaded:
    path: Path
    size: int
    sha256: str


def part_path(target: Path) -> Path:
    return target.with_name(target.name + PART_SUFFIX)


class _Part:
    """The partial file, its size and the digest of its bytes so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.digest = hashlib.sha256()
        self.size = 0
        self._checked = 0
        self.total: int | None = None
        self._file: BinaryIO = path.open("ab+")
        self._file.seek(0)
        while chunk := self._file.read(CHUNK_SIZE):
            self.digest.update(chunk)
            self.size += len(chunk)
        self._checked = self.size

    def restart(self) -> None:
        self._file.seek(0)
        self._file.truncate()
        self.digest, self.size, self._checked = hashlib.sha256(), 0, 0

    def write(self, chunk: bytes) -> None:
        try:
            self._file.write(chunk)
        except OSError as err:
            if is_disk_full(err):
                self._raise_disk_full()
            raise
        self.digest.update(chunk)
        self.size += len(chunk)

    def progressed(self) -> bool:
        """Whether bytes arrived since the last call (the retry count starts again then)."""
        moved, self._checked = self.size > self._checked, self.size
        return moved

    def close(self) -> None:
        """Flush to the disk: the rename that follows must not publish bytes only in memory."""
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as err:
            if is_disk_full(err):
                self._raise_disk_full()
            raise
        finally:
            self._file.close()

    def release(self) -> None:
        """Keep what arrived for the next run; an empty part is no use to it."""
        self._file.close()
        if self.size == 0:
            self.path.unlink(missing_ok=True)

    def discard(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)

    def _raise_disk_full(self) -> None:
        needed = None if self.total is None else max(0, self.total - self.size)
        raise disk_full(self.path.parent, needed, free_bytes(self.path.parent))


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() else None


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) of a ``Content-Range``; None for what it does not say."""
    match = _CONTENT_RANGE.match((value or "").strip())
    if match is None:
        return None, None
    first, _, total = match.groups()
    return (int(first) if first else None), (int(total) if total != "*" else None)


def _connection_error(err: httpx.TransportError, url: str) -> FetchError:
    if isinstance(err, httpx.UnsupportedProtocol):
        return FetchError(Reason.INVALID, f"{url}: {err}")
    text = str(err) or type(err).__name__
    if isinstance(err, httpx.TimeoutException):
        return FetchError(Reason.UNREACHABLE, f"{url}: timed out ({type(err).__name__})")
    if "CERTIFICATE_VERIFY_FAILED" in text:
        text += " (a private CA: name its bundle in spec.model.caBundle)"
    return FetchError(Reason.UNREACHABLE, f"{url}: {text}")


def _attempt(client: httpx.Client, url: str, part: _Part, reporter: ProgressReporter) -> None:
    """One request: append what it sends to the part, or raise why it stopped."""
    headers = {"Range": f"bytes={part.size}-"} if part.size else {}
    try:
        with client.stream("GET", url, headers=headers) as response:
            _receive(response, url, part, reporter)
    except httpx.TransportError as err:
        raise _connection_error(err, url) from err
    except httpx.TooManyRedirects as err:
        raise FetchError(Reason.INVALID, f"{url}: {err}") from err


def _receive(response: httpx.Response, url: str, part: _Part, reporter: ProgressReporter) -> None:
    status = response.status_code
    first, total = _content_range(response.headers.get("Content-Range"))
    if status == 416 and part.size:
        if total == part.size:  # the part already held the whole file
            part.total = total
            return
        part.restart()
        raise FetchError(Reason.SERVER_ERROR, f"{url} refused to resume; starting again")
    if status not in (200, 206):
        raise for_status(status, url, _retry_after(response))
    if status == 206 and first != part.size:
        part.restart()
        raise FetchError(Reason.SERVER_ERROR, f"{url} resumed at the wrong offset ({first})")
    if status == 200:
        part.restart()
        length = response.headers.get("Content-Length", "")
        total = int(length) if length.isdigit() else None
    if response.headers.get("Content-Encoding", "identity").lower() != "identity":
        total = None  # the length is of the encoded body, not of the file
    part.total = total
    if total is not None:
        free = free_bytes(part.path.parent)
        if free is not None and free < total - part.size:
            raise disk_full(part.path.parent, total - part.size, free)
    reporter.start(total, part.size)
    # As they arrive (no chunk size): bytes buffered for a chunk would be lost to a cut.
    for chunk in response.iter_bytes():
        part.write(chunk)
        reporter.advance(len(chunk))
    if total is not None and part.size != total:
        raise FetchError(
            Reason.UNREACHABLE, f"{url}: the connection closed at {part.size} of {total} bytes"
        )


def download(
    url: str,
    target: Path,
    *,
    sha256: str | None,
    reporter: ProgressReporter,
    policy: RetryPolicy,
    connect_timeout: float,
    read_timeout: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Downloaded:
    """Download ``url`` to ``target`` (resuming its part), verified against ``sha256`` if given."""
    timeout = httpx.Timeout(read_timeout, connect=connect_timeout, pool=connect_timeout)
    part = _Part(part_path(target))
    try:
        with httpx.Client(
            verify=ssl_context(),
            timeout=timeout,
            follow_redirects=True,
            headers={"Accept-Encoding": "identity"},
        ) as client:
            retrying(
                lambda: _attempt(client, url, part, reporter),
                policy,
                progressed=part.progressed,
                sleep=sleep,
            )
    except BaseException:
        part.release()  # kept: the next run resumes from it
        raise
    digest, size = part.digest.hexdigest(), part.size
    if sha256 is not None and digest != sha256:
        part.discard()
        raise digest_mismatch(digest, sha256)
    part.close()
    try:
        os.replace(part.path, target)
    except OSError as err:
        if is_disk_full(err):
            raise disk_full(target.parent, size, free_bytes(target.parent)) from err
        raise
    return Downloaded(target, size, digest)
