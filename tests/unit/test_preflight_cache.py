"""The verdict cache on disk: untrusted files are ignored with a warning; writers never collide."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from controlplane.preflight.cache import (
    FORMAT,
    GRACE,
    CacheKey,
    VerdictCache,
    default_cache_dir,
)
from controlplane.preflight.testing import FakeClock

KEY = CacheKey("https://a:6443", "team-a", "identity-1", "perms-1")


def _document(checked_at: object, outcome: str = "ALLOWED", **key_fields: str) -> bytes:
    key = {"server": KEY.server, "namespace": KEY.namespace}
    key |= {"identity": KEY.identity, "permissions": KEY.permissions}
    key |= key_fields
    return msgspec.json.encode(
        {"format": FORMAT, "key": key, "outcome": outcome, "checkedAt": checked_at}
    )


def fresh_cache(directory: Path, clock: FakeClock | None = None) -> VerdictCache:
    return VerdictCache(directory, clock=clock or FakeClock())


def test_a_stored_verdict_is_read_back_by_another_process_s_cache(tmp_path: Path) -> None:
    clock = FakeClock()
    fresh_cache(tmp_path, clock).store(KEY, clock.time())
    found = fresh_cache(tmp_path, clock).lookup(KEY)
    assert found.entry is not None
    assert found.entry.checked_at == clock.time()
    assert found.warnings == ()
    [path] = tmp_path.glob("*.json")
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "corrupt"),
        (b"", "corrupt"),
        (b"[1, 2]", "not a"),
        (msgspec.json.encode({"format": "something/else", "key": {}}), "not a"),
        (_document(1.0, namespace="team-b"), "foreign"),
        (_document(1.0, identity="identity-2"), "foreign"),
    ],
)
def test_corrupt_or_foreign_files_are_ignored_with_a_warning(
    tmp_path: Path, content: bytes, why: str
) -> None:
    cache = fresh_cache(tmp_path)
    path = cache.path(KEY)
    assert path is not None
    path.write_bytes(content)
    path.chmod(0o600)
    found = cache.lookup(KEY)
    assert found.entry is None
    assert len(found.warnings) == 1
    assert why in found.warnings[0]
    assert str(path) in found.warnings[0]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (_document(1.0, outcome="DENIED"), "never cached"),
        (_document("yesterday"), "no checkedAt"),
        (_document(True), "no checkedAt"),
        (_document(FakeClock().time() + 3600), "in the future"),
    ],
)
def test_entries_that_cannot_be_trusted_are_ignored(
    tmp_path: Path, content: bytes, why: str
) -> None:
    cache = fresh_cache(tmp_path)
    path = cache.path(KEY)
    assert path is not None
    path.write_bytes(content)
    path.chmod(0o600)
    found = cache.lookup(KEY)
    assert found.entry is None
    assert why in found.warnings[0]


def test_a_well_formed_file_is_accepted_so_the_rejections_above_are_about_content(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    cache = fresh_cache(tmp_path, clock)
    path = cache.path(KEY)
    assert path is not None
    path.write_bytes(_document(clock.time() - 10))
    path.chmod(0o600)
    assert cache.lookup(KEY).entry is not None


def test_a_file_others_could_have_written_is_not_trusted(tmp_path: Path) -> None:
    clock = FakeClock()
    fresh_cache(tmp_path, clock).store(KEY, clock.time())
    path = fresh_cache(tmp_path).path(KEY)
    assert path is not None
    path.chmod(0o666)
    found = fresh_cache(tmp_path, clock).lookup(KEY)
    assert found.entry is None
    assert "writable by group or others" in found.warnings[0]


def test_entries_past_grace_are_not_returned(tmp_path: Path) -> None:
    clock = FakeClock()
    cache = fresh_cache(tmp_path, clock)
    cache.store(KEY, clock.time())
    clock.advance(GRACE + 1)
    assert cache.lookup(KEY).entry is None
    assert fresh_cache(tmp_path, clock).lookup(KEY).entry is None


def test_memory_only_cache_works_without_a_folder() -> None:
    clock = FakeClock()
    cache = VerdictCache(None, clock=clock)
    cache.store(KEY, clock.time())
    assert cache.lookup(KEY).entry is not None
    cache.forget(KEY)
    assert cache.lookup(KEY).entry is None


def test_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "modelpool-controlplane" / "preflight"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "modelpool-controlplane" / "preflight"


# -- two processes at once ------------------------------------------------------------------

ROUNDS = 300


def _shared_time(base: float, worker: int, round_: int) -> float:
    return base + round_ + worker / 10


def _writer(
    directory: str, worker: int, base: float, start: multiprocessing.synchronize.Event
) -> None:
    shared = CacheKey("https://a:6443", "shared", "identity", "perms")
    own = CacheKey("https://a:6443", f"own-{worker}", "identity", "perms")
    cache = VerdictCache(Path(directory))
    start.wait()
    for round_ in range(ROUNDS):
        cache.store(shared, _shared_time(base, worker, round_))
        cache.store(own, base + round_)


def _reader(directory: str, start: multiprocessing.synchronize.Event, rejected: Any) -> None:
    shared = CacheKey("https://a:6443", "shared", "identity", "perms")
    start.wait()
    for _ in range(ROUNDS * 2):
        found = VerdictCache(Path(directory)).lookup(shared)
        if found.warnings:
            rejected.value += 1


def test_processes_writing_at_once_leave_only_whole_entries(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    base = time.time() - 600  # recent: within grace of the real clock the processes read
    rejected = context.Value("i", 0)
    writers = [
        context.Process(target=_writer, args=(str(tmp_path), w, base, start)) for w in (1, 2)
    ]
    reader = context.Process(target=_reader, args=(str(tmp_path), start, rejected))
    for process in (*writers, reader):
        process.start()
    start.set()
    for process in (*writers, reader):
        process.join(timeout=120)
        assert process.exitcode == 0
    # A reader running alongside never saw a torn or partial file.
    assert rejected.value == 0
    # Each process's own entry survived the other's writes (no lost update).
    cache = VerdictCache(tmp_path)
    for worker in (1, 2):
        own = CacheKey("https://a:6443", f"own-{worker}", "identity", "perms")
        entry = cache.lookup(own).entry
        assert entry is not None
        assert entry.checked_at == base + ROUNDS - 1
    # The shared entry is whole and is one of the last values one of them wrote.
    shared = cache.lookup(CacheKey("https://a:6443", "shared", "identity", "perms"))
    assert shared.warnings == ()
    assert shared.entry is not None
    assert shared.entry.checked_at in {_shared_time(base, w, ROUNDS - 1) for w in (1, 2)}
    # No temporary file is left behind.
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json"] * 3
