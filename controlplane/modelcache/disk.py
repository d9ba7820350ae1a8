"""The node cache on disk: its entries as the rule sees them, and their removal under the
fetcher's lock.

**What is listed.** Only the fetcher's layout (docs/inferenceservice.md, "Model weights"): the
entry folders ``CACHE/https/<16 hex>``, ``CACHE/http/<16 hex>`` and ``CACHE/hf/ORG/REPO/REVISION``,
and in each the files the fetcher put there. A file's last use is its marker's modification time
(:func:`controlplane.modelfetch.marker.touch_marker`), or the file's own when it has no marker. A
partial download (``FILE.part``) whose file never arrived is listed under the file's path, so
that a named source keeps its part (the next fetch resumes it) and an unnamed one loses it.
Anything else in the cache folder is never listed, so never removed; symbolic links are never
followed (a link is not a file of ours, and following one could reach outside the cache).

**Removal** happens per entry folder, holding the fetcher's own lock
(:data:`controlplane.modelfetch.fetch.LOCK_NAME`, taken without waiting): a folder whose fetch is
running is skipped, this round, whole. Under the lock a file whose marker was touched since it was
listed (a pod started from it meanwhile) is skipped too. A removed file takes its marker and its
partial download along. A folder left with no file, and not the folder of a named path (a pod's
mounted folder must stay, even empty: the kubelet bind-mounted it), is removed whole, with the
Hub client's bookkeeping (``.cache/``) and the lock file (unlinked while held: the lock library
retries a lock whose file was unlinked), and then its empty parents up to the cache folder.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from controlplane.modelcache.rule import CacheEntry, Removal
from controlplane.modelfetch.fetch import LOCK_NAME
from controlplane.modelfetch.https import PART_SUFFIX
from controlplane.modelfetch.marker import MARKER_SUFFIX, marker_path

#: The cache's top folders (the fetched source kinds) and the depth of their entry folders.
ENTRY_DEPTH: Final = {"https": 2, "http": 2, "hf": 4}


@dataclass(frozen=True, slots=True)
class Listed:
    """An entry, and where it is on disk."""

    entry: CacheEntry
    #: The entry folder: the fetcher's ``--dest``, which holds its lock.
    folder: Path
    #: The file itself, or its partial download when only that is there.
    file: Path
    #: The modification time the last use was read from (ns), to see a use made meanwhile.
    used_ns: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one chosen entry: ``removed``, or skipped and why."""

    removal: Removal
    removed: bool
    reason: str = ""


def entry_folder(path: str) -> str | None:
    """The entry folder (relative to the cache) of a relative path, or None outside the layout."""
    parts = PurePosixPath(path).parts
    depth = ENTRY_DEPTH.get(parts[0]) if parts else None
    if depth is None or len(parts) <= depth:
        return None
    return "/".join(parts[:depth])


def _real_dirs(folder: Path) -> Iterator[Path]:
    """Sub-folders that are folders, never links to one, in name order."""
    try:
        with os.scandir(folder) as found:
            names = sorted(e.name for e in found if e.is_dir(follow_symlinks=False))
    except OSError:
        return
    for name in names:
        yield folder / name


def entry_folders(cache_dir: Path) -> Iterator[Path]:
    """Every entry folder of the layout under ``cache_dir``."""
    for kind, depth in ENTRY_DEPTH.items():
        level = [cache_dir / kind] if (cache_dir / kind).is_dir() else []
        if level and (cache_dir / kind).is_symlink():
            continue
        for _ in range(depth - 1):
            level = [sub for folder in level for sub in _real_dirs(folder)]
        yield from level


def _is_bookkeeping(name: str) -> bool:
    return name == LOCK_NAME or name.endswith(MARKER_SUFFIX) or f"{MARKER_SUFFIX}." in name


def folder_entries(cache_dir: Path, folder: Path) -> Iterator[Listed]:
    """The entries of one entry folder (its hidden sub-folders are the Hub client's, skipped)."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = Path(root)
        for name in sorted(files):
            if _is_bookkeeping(name):
                continue
            path = here / name
            try:
                found = path.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(found.st_mode):
                continue
            target = path
            if name.endswith(PART_SUFFIX):
                target = here / name.removesuffix(PART_SUFFIX)
                if target.exists() or not target.name:
                    continue  # the file's own partial: it goes with the file
                used_ns = found.st_mtime_ns
            else:
                used_ns = _used_ns(path, found.st_mtime_ns)
            relative = target.relative_to(cache_dir).as_posix()
            entry = CacheEntry(relative, found.st_size, used_ns / 1e9)
            yield Listed(entry, folder, path, used_ns)


def _used_ns(file: Path, own_ns: int) -> int:
    try:
        return marker_path(file).lstat().st_mtime_ns
    except OSError:
        return own_ns


def list_cache(cache_dir: Path) -> list[Listed]:
    """Every entry of the cache, by path."""
    listed = [e for folder in entry_folders(cache_dir) for e in folder_entries(cache_dir, folder)]
    return sorted(listed, key=lambda item: item.entry.path)


def named_folders(named: Collection[str]) -> set[str]:
    return {folder for path in named if (folder := entry_folder(path)) is not None}


def remove(
    cache_dir: Path,
    removals: Sequence[Removal],
    listed: Collection[Listed],
    named: Collection[str],
) -> Iterator[Outcome]:
    """Remove the chosen entries, folder by folder under the fetcher's lock (module docstring)."""
    from filelock import FileLock, Timeout

    where = {item.entry.path: item for item in listed}
    keep_folders = {cache_dir / folder for folder in named_folders(named)}
    by_folder: dict[Path, list[Removal]] = {}
    for removal in removals:
        by_folder.setdefault(where[removal.entry.path].folder, []).append(removal)
    for folder, chosen in by_folder.items():
        lock = FileLock(folder / LOCK_NAME)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            yield from (Outcome(removal, False, "FetchInProgress") for removal in chosen)
            continue
        try:
            for removal in chosen:
                yield _remove_one(where[removal.entry.path], removal)
            wipe = folder not in keep_folders and not any(folder_entries(cache_dir, folder))
            if wipe:
                _wipe(folder)
        finally:
            lock.release()
        if wipe:
            _prune(folder, cache_dir)


def _remove_one(item: Listed, removal: Removal) -> Outcome:
    """One file with its marker and partial, unless it was used since it was listed."""
    file = item.file.with_name(item.file.name.removesuffix(PART_SUFFIX))
    try:
        now_ns = (
            _used_ns(file, file.lstat().st_mtime_ns)
            if file.exists()
            else item.file.lstat().st_mtime_ns
        )
    except OSError:
        return Outcome(removal, False, "Gone")
    if now_ns != item.used_ns:
        return Outcome(removal, False, "UsedMeanwhile")
    for path in (file, marker_path(file), file.with_name(file.name + PART_SUFFIX)):
        path.unlink(missing_ok=True)
    return Outcome(removal, True)


def _wipe(folder: Path) -> None:
    """Everything left in an entry folder that holds no file (bookkeeping, the lock last)."""
    for child in sorted(folder.iterdir()):
        if child.name == LOCK_NAME:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink(missing_ok=True)
    (folder / LOCK_NAME).unlink(missing_ok=True)


def _prune(folder: Path, cache_dir: Path) -> None:
    """Remove ``folder`` and its parents while empty, stopping below ``cache_dir``."""
    current = folder
    while current != cache_dir and cache_dir in current.parents:
        try:
            current.rmdir()
        except OSError:
            return  # not empty (another fetch began), or gone: either way, stop
        current = current.parent
