"""The verdict cache: ALLOWED verdicts only, in memory and on disk, shared by processes.

Why: a fleet restarting during a control-plane stall should not need the stalled API server to
start, and a fleet restarting after one should not stampede it. Only ALLOWED is kept: a denial must
be seen live every time (someone may be fixing the RBAC right now), and caching it would turn a
fixed grant into a lingering outage.

Rules, in order:
- The key is the API server, the namespace, the identity and the digest of the permission set.
  Each key is one file named after the key's digest, and the file repeats the whole key, which is
  compared field by field on read: a renamed, copied or colliding file is foreign and ignored.
- An entry younger than :data:`FRESH_FOR` answers without any API call. An older one, up to
  :data:`GRACE`, is used only when the live check is INCONCLUSIVE, and then with a warning.
- A file that does not parse, has another format, another key, an outcome other than ALLOWED, a
  time in the future, another owner, or is writable by group or others is ignored with a warning.
  The cache is an optimisation: it is never trusted over doubt.
- Writes go to a temporary file in the same folder, are flushed to disk, then renamed over the
  entry (``os.replace`` is atomic). As every entry is a whole file of its own, there is no
  read-modify-write, so no lock is needed: concurrent writers each replace the file with a
  complete entry and readers see either the old or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import stat
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from cachetools import TTLCache

from controlplane.clock import SYSTEM_CLOCK, WallClock
from controlplane.preflight.errors import CacheEntryRejected

log = logging.getLogger("controlplane.preflight")

#: Seconds an ALLOWED verdict answers on its own.
FRESH_FOR = 3600.0
#: Seconds an ALLOWED verdict may still stand in for an INCONCLUSIVE live check.
GRACE = 24 * 3600.0
#: A cached time this far ahead of our clock is clock skew we tolerate; further is not trusted.
CLOCK_SKEW_TOLERANCE = 60.0
#: Entries kept in memory per process.
MEMORY_ENTRIES = 64
FORMAT = "modelpool.dev/preflight-verdict/v1"
CACHE_DIR_NAME = Path("modelpool-controlplane") / "preflight"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/modelpool-controlplane/preflight`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / CACHE_DIR_NAME


@dataclass(frozen=True, slots=True)
class CacheKey:
    """What a verdict is about: any field differing makes it another verdict."""

    server: str
    namespace: str
    identity: str
    permissions: str

    def digest(self) -> str:
        return hashlib.sha256(msgspec.json.encode(asdict(self), order="sorted")).hexdigest()


@dataclass(frozen=True, slots=True)
class CachedVerdict:
    """An ALLOWED verdict and the wall-clock time of the live check that produced it."""

    key: CacheKey
    checked_at: float

    def age(self, now: float) -> float:
        return max(0.0, now - self.checked_at)


@dataclass(frozen=True, slots=True)
class CacheLookup:
    """A usable entry (within the grace period) if any, and what was ignored on the way."""

    entry: CachedVerdict | None
    warnings: tuple[str, ...] = field(default=())


class VerdictCache:
    """ALLOWED verdicts in memory and, when ``directory`` is set, on disk."""

    def __init__(
        self,
        directory: Path | None,
        *,
        clock: WallClock = SYSTEM_CLOCK,
        fresh_for: float = FRESH_FOR,
        grace: float = GRACE,
    ) -> None:
        self.directory = directory
        self.clock = clock
        self.fresh_for = fresh_for
        self.grace = grace
        self._memory: TTLCache[str, CachedVerdict] = TTLCache(
            MEMORY_ENTRIES, ttl=grace, timer=clock.time
        )

    def path(self, key: CacheKey) -> Path | None:
        return None if self.directory is None else self.directory / f"{key.digest()}.json"

    def is_fresh(self, entry: CachedVerdict) -> bool:
        return entry.age(self.clock.time()) < self.fresh_for

    # -- reading ------------------------------------------------------------------------------

    def lookup(self, key: CacheKey) -> CacheLookup:
        """The newest entry for ``key`` still within the grace period, from memory or disk."""
        now = self.clock.time()
        remembered = self._memory.get(key.digest())
        if remembered is not None and self.is_fresh(remembered):
            return CacheLookup(remembered)
        warnings: list[str] = []
        stored: CachedVerdict | None = None
        path = self.path(key)
        if path is not None:
            try:
                stored = self._read(path, key, now)
            except CacheEntryRejected as err:
                warnings.append(f"ignoring preflight cache file {path}: {err}")
                log.warning("%s", warnings[-1])
        candidates = [e for e in (remembered, stored) if e is not None]
        best = max(candidates, key=lambda e: e.checked_at, default=None)
        if best is not None and best.age(now) >= self.grace:
            best = None
        if best is not None:
            self._memory[key.digest()] = best
        return CacheLookup(best, tuple(warnings))

    def _read(self, path: Path, key: CacheKey, now: float) -> CachedVerdict | None:
        try:
            with path.open("rb") as file:
                info = os.fstat(file.fileno())
                raw = file.read()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise CacheEntryRejected(f"unreadable: {err}") from err
        if info.st_uid != os.geteuid():
            raise CacheEntryRejected(f"owned by uid {info.st_uid}, not by this process's user")
        if stat.S_IMODE(info.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
            raise CacheEntryRejected("writable by group or others")
        return _decode(raw, key, now)

    # -- writing ------------------------------------------------------------------------------

    def store(self, key: CacheKey, checked_at: float) -> None:
        """Remember an ALLOWED verdict; a failure to write the file is logged, not raised."""
        entry = CachedVerdict(key, checked_at)
        self._memory[key.digest()] = entry
        path = self.path(key)
        if path is None:
            return
        try:
            _write_atomically(path, _encode(entry))
        except OSError as err:
            log.warning("could not write the preflight cache file %s: %s", path, err)

    def forget(self, key: CacheKey) -> None:
        """Drop any verdict for ``key`` (after a denial: a cached ALLOWED is now wrong)."""
        self._memory.pop(key.digest(), None)
        path = self.path(key)
        if path is not None:
            try:
                path.unlink(missing_ok=True)
            except OSError as err:
                log.warning("could not remove the preflight cache file %s: %s", path, err)


def _encode(entry: CachedVerdict) -> bytes:
    document = {
        "format": FORMAT,
        "key": asdict(entry.key),
        "outcome": "ALLOWED",
        "checkedAt": entry.checked_at,
    }
    return msgspec.json.format(msgspec.json.encode(document), indent=2)


def _decode(raw: bytes, key: CacheKey, now: float) -> CachedVerdict:
    try:
        document: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError as err:
        raise CacheEntryRejected(f"corrupt: {err}") from err
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CacheEntryRejected(f"not a {FORMAT} document")
    if document.get("key") != asdict(key):
        raise CacheEntryRejected("foreign: it records another server, namespace or identity")
    if document.get("outcome") != "ALLOWED":
        raise CacheEntryRejected(f"outcome {document.get('outcome')!r} is never cached")
    checked_at = document.get("checkedAt")
    if isinstance(checked_at, bool) or not isinstance(checked_at, int | float):
        raise CacheEntryRejected("no checkedAt time")
    if not math.isfinite(checked_at) or checked_at > now + CLOCK_SKEW_TOLERANCE:
        raise CacheEntryRejected(f"checkedAt {checked_at} is in the future")
    return CachedVerdict(key, float(checked_at))


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:  # mkstemp creates it 0600
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
