"""One run of the fetcher: the fast path, the lock, the download, the digest, the marker.

1. The source is parsed (:func:`controlplane.api.v1alpha1.modelsource.parse_source`, the same
   rules as the API server's); the file's place is ``DEST/<file_in_cache>``.
2. A marker that vouches for the file (:mod:`.marker`) ends the run at once: no lock, no network,
   no hashing, no ``httpx`` nor ``huggingface_hub`` imported. This is a member's start once its
   node has the file; it is the file's use (:func:`.marker.touch_marker`), which keeps the node
   cache's collection from removing it (:mod:`controlplane.modelcache`).
3. Otherwise the cache entry is locked (``DEST/.modelpool.lock``, ``filelock``): two pods of one
   node fetching the same file at once download it once; the second finds the first's marker.
4. The file is downloaded (:mod:`.https`, :mod:`.hub`), its digest compared to ``--sha256``, a
   mismatch deletes it, a match gets its marker.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from controlplane.api.v1alpha1.modelsource import (
    ParsedSource,
    SourceError,
    SourceKind,
    parse_source,
)
from controlplane.modelfetch.errors import (
    FetchError,
    Reason,
    digest_mismatch,
    disk_full,
    free_bytes,
    is_disk_full,
)
from controlplane.modelfetch.marker import (
    read_marker,
    remove_marker,
    touch_marker,
    verified,
    write_marker,
)
from controlplane.modelfetch.progress import Done, ProgressReporter
from controlplane.modelfetch.retry import DEFAULT_DELAY, DEFAULT_RETRIES, RetryPolicy

log = logging.getLogger("controlplane.modelfetch")

LOCK_NAME: Final = ".modelpool.lock"
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
DEFAULT_READ_TIMEOUT: Final = 60.0
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """What one run is told (the flags of ``controlplane fetch-model``)."""

    source: str
    dest: Path
    sha256: str | None = None
    retries: int = DEFAULT_RETRIES
    retry_delay: float = DEFAULT_DELAY
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(retries=self.retries, initial_delay=self.retry_delay)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def parsed_source(settings: FetchSettings) -> tuple[ParsedSource, str | None]:
    """The parsed source and the wanted digest (lower case), or :class:`FetchError` Invalid."""
    sha256 = settings.sha256
    if sha256 is not None and not _SHA256.match(sha256):
        raise FetchError(Reason.INVALID, f"--sha256 must be 64 hexadecimal digits: {sha256!r}")
    sha256 = sha256.lower() if sha256 else None
    try:
        parsed = parse_source(settings.source, sha256)
    except SourceError as err:
        raise FetchError(Reason.INVALID, str(err)) from err
    if not parsed.fetched:
        raise FetchError(
            Reason.INVALID,
            f"a {parsed.kind.value} source is read where it is, not downloaded: "
            f"{settings.source!r}",
        )
    return parsed, sha256


def canonical_source(parsed: ParsedSource) -> str:
    """The source as its marker records it: one spelling per file, so that
    ``hf://o/r/f`` and ``hf://o/r/f@main`` (one cache entry) vouch for each other."""
    if parsed.kind is SourceKind.HF:
        return f"hf://{parsed.repo}/{parsed.path}@{parsed.revision}"
    return parsed.raw


def fetch(settings: FetchSettings, reporter: ProgressReporter) -> Done:
    """Make ``DEST/<file>`` the verified file of the source; what the final record says."""
    parsed, sha256 = parsed_source(settings)
    target = settings.dest / parsed.file_in_cache
    marker = verified(target, canonical_source(parsed), sha256)
    if marker is not None:
        touch_marker(target)
        return Done(marker.size, marker.sha256, str(target), downloaded=False)
    try:
        settings.dest.mkdir(parents=True, exist_ok=True)
        return _fetch_locked(settings, parsed, sha256, target, reporter)
    except OSError as err:
        if is_disk_full(err):
            total, done = reporter.bytes_total, reporter.bytes_done
            needed = None if total is None else total - done
            raise disk_full(settings.dest, needed, free_bytes(settings.dest)) from err
        raise


def _fetch_locked(
    settings: FetchSettings,
    parsed: ParsedSource,
    sha256: str | None,
    target: Path,
    reporter: ProgressReporter,
) -> Done:
    from filelock import FileLock, Timeout

    lock = FileLock(settings.dest / LOCK_NAME)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("another fetch of %s is running: waiting for it", settings.dest)
        lock.acquire()
    try:
        # The other fetch may have finished while this one waited.
        marker = verified(target, canonical_source(parsed), sha256)
        if marker is not None:
            touch_marker(target)
            return Done(marker.size, marker.sha256, str(target), downloaded=False)
        if parsed.kind is SourceKind.HF:
            return _fetch_hub(settings, parsed, sha256, target, reporter)
        return _fetch_url(settings, parsed, sha256, target, reporter)
    finally:
        lock.release()


def _fetch_url(
    settings: FetchSettings,
    parsed: ParsedSource,
    sha256: str | None,
    target: Path,
    reporter: ProgressReporter,
) -> Done:
    if target.is_file() and _stale(target, sha256):
        target.unlink()
        remove_marker(target)
    elif target.is_file() and sha256 is not None and sha256_of(target) == sha256:
        # A file without its marker (a run stopped between rename and marker): its digest says
        # whether it is the one asked for, for the price of reading it once.
        marker = write_marker(target, canonical_source(parsed), sha256)
        return Done(marker.size, sha256, str(target), downloaded=False)
    from controlplane.modelfetch import https

    result = https.download(
        parsed.path,
        target,
        sha256=sha256,
        reporter=reporter,
        policy=settings.policy,
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
    )
    marker = write_marker(target, canonical_source(parsed), result.sha256)
    return Done(marker.size, result.sha256, str(target), downloaded=True)


def _stale(target: Path, sha256: str | None) -> bool:
    """Whether the file's own marker says it is not the file asked for (another digest)."""
    marker = read_marker(target)
    if marker is None or sha256 is None or marker.sha256 == sha256:
        return False
    stat = target.stat()
    return (marker.size, marker.mtime_ns) == (stat.st_size, stat.st_mtime_ns)


def _fetch_hub(
    settings: FetchSettings,
    parsed: ParsedSource,
    sha256: str | None,
    target: Path,
    reporter: ProgressReporter,
) -> Done:
    from controlplane.modelfetch import hub

    assert parsed.repo is not None
    assert parsed.revision is not None
    if target.is_file() and _stale(target, sha256):
        target.unlink()
    remove_marker(target)
    path, downloaded = hub.download(
        parsed.repo,
        parsed.path,
        parsed.revision,
        settings.dest,
        reporter=reporter,
        policy=settings.policy,
        read_timeout=settings.read_timeout,
    )
    digest = sha256_of(path)
    if sha256 is not None and digest != sha256:
        path.unlink(missing_ok=True)
        raise digest_mismatch(digest, sha256)
    marker = write_marker(path, canonical_source(parsed), digest)
    return Done(marker.size, digest, str(path), downloaded=downloaded)
