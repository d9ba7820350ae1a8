"""``controlplane collect-model-cache`` on a real folder: what is listed, what is removed with
it, what is never touched (named files, files outside the layout, links, a running fetch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controlplane.cli import build_parser
from controlplane.modelcache.command import collect
from controlplane.modelcache.disk import list_cache, remove
from controlplane.modelcache.rule import Policy, decide
from controlplane.modelfetch.fetch import LOCK_NAME
from controlplane.modelfetch.marker import marker_path, write_marker

NOW = 2_000_000_000.0
DAY = 86_400.0
A = "https/0123456789abcdef/a.gguf"
B = "http/fedcba9876543210/b.gguf"
HUB = "hf/org/repo/main/sub/h.gguf"


def cached(cache: Path, relative: str, size: int = 100, used: float = NOW - 2 * DAY) -> Path:
    """A verified file of the fetcher's layout, last used at ``used``."""
    file = cache / relative
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(b"x" * size)
    write_marker(file, f"source of {relative}", "0" * 64)
    os.utime(marker_path(file), (used, used))
    return file


def run(
    cache: Path, *keep: str, retention: float = DAY, max_bytes: int = 0
) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    collect(cache, keep, Policy(retention, max_bytes), now=NOW, emit=records.append)
    return records


def removed(records: list[dict[str, object]]) -> list[str]:
    return [str(r["path"]) for r in records if r["event"] == "removed"]


def test_the_listing_reads_the_layout_and_last_use_from_the_marker(tmp_path: Path) -> None:
    cached(tmp_path, A, 100, NOW - 5)
    cached(tmp_path, HUB, 30, NOW - 7)
    (tmp_path / "hf/org/repo/main/.cache/huggingface").mkdir(parents=True)
    (tmp_path / "hf/org/repo/main/.cache/huggingface/x.metadata").write_text("bookkeeping")
    part = tmp_path / "http/fedcba9876543210/b.gguf.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"p" * 7)
    (tmp_path / "elsewhere.gguf").write_bytes(b"not ours")
    listed = {item.entry.path: item.entry for item in list_cache(tmp_path)}
    assert sorted(listed) == sorted([A, HUB, B]), "a part whose file never came is listed as it"
    assert listed[A].size == 100
    assert listed[A].last_used == pytest.approx(NOW - 5)
    assert listed[HUB].size == 30
    assert listed[B].size == 7


def test_unnamed_files_go_with_their_markers_parts_locks_and_folders(tmp_path: Path) -> None:
    a = cached(tmp_path, A)
    (a.parent / LOCK_NAME).write_text("")
    (a.parent / "a.gguf.part").write_bytes(b"left")
    hub = cached(tmp_path, HUB)
    (tmp_path / "hf/org/repo/main/.cache/huggingface").mkdir(parents=True)
    records = run(tmp_path)
    assert sorted(removed(records)) == sorted([A, HUB])
    assert not (tmp_path / "https/0123456789abcdef").exists()
    assert not hub.parent.exists()
    assert not (tmp_path / "hf").exists(), "empty folders pruned"
    assert tmp_path.is_dir(), "the cache folder itself stays"
    summary = records[-1]
    assert summary["event"] == "summary"
    assert (summary["files"], summary["removedFiles"], summary["removedBytes"]) == (2, 2, 200)


def test_a_named_file_stays_and_so_does_its_folder(tmp_path: Path) -> None:
    a = cached(tmp_path, A, used=NOW - 100 * DAY)
    other = cached(tmp_path, "hf/org/repo/main/other.gguf")
    hub = cached(tmp_path, HUB)
    records = run(tmp_path, A, HUB, retention=0, max_bytes=1)
    assert removed(records) == ["hf/org/repo/main/other.gguf"]
    assert a.read_bytes()
    assert marker_path(a).exists()
    assert hub.exists()
    assert not other.exists()
    assert records[-1]["overCap"] is True, "named files alone over the cap: said, not removed"


def test_a_named_folder_is_kept_even_empty(tmp_path: Path) -> None:
    """A member's pod mounts its entry folder before its fetch writes into it."""
    stale = cached(tmp_path, "https/0123456789abcdef/old.gguf")
    run(tmp_path, A)
    assert not stale.exists()
    assert stale.parent.is_dir()


def test_the_cap_takes_the_least_recently_used_unnamed_file_first(tmp_path: Path) -> None:
    cached(tmp_path, A, 100, NOW - 30)
    cached(tmp_path, B, 100, NOW - 10)
    cached(tmp_path, HUB, 100, NOW - 50)
    records = run(tmp_path, HUB, max_bytes=250)
    assert removed(records) == [A]
    assert [r["why"] for r in records if r["event"] == "removed"] == ["OverCap"]


def test_links_and_files_outside_the_layout_are_never_touched(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    outside = tmp_path / "outside"
    victim = cached(outside, "https/0123456789abcdef/a.gguf")
    (cache / "https").mkdir(parents=True)
    (cache / "https/aaaaaaaaaaaaaaaa").symlink_to(victim.parent)
    (cache / "hf").symlink_to(outside / "https")
    stray = cache / "stray.gguf"
    stray.write_bytes(b"someone's")
    os.utime(stray, (0, 0))
    entry = cache / "https/bbbbbbbbbbbbbbbb"
    entry.mkdir()
    (entry / "link.gguf").symlink_to(victim)
    assert run(cache, retention=0)[-1]["files"] == 0
    assert victim.exists()
    assert marker_path(victim).exists()
    assert stray.exists()


def test_a_folder_whose_fetch_runs_is_skipped_whole(tmp_path: Path) -> None:
    """The fetcher's lock, held by another process, keeps the collector out of the folder."""
    a = cached(tmp_path, A)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from filelock import FileLock; lock = FileLock(sys.argv[1]); "
         "lock.acquire(); print('held', flush=True); sys.stdin.read()",
         str(a.parent / LOCK_NAME)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        records = run(tmp_path, retention=0)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    assert [(r["event"], r["path"], r.get("reason")) for r in records[:-1]] == [
        ("skipped", A, "FetchInProgress")
    ]
    assert a.exists()
    assert removed(run(tmp_path, retention=0)) == [A], "the next run, lock free, removes it"


def test_a_file_used_after_it_was_listed_stays(tmp_path: Path) -> None:
    a = cached(tmp_path, A)
    listed = list_cache(tmp_path)
    decision = decide((item.entry for item in listed), (), NOW, Policy(0))
    os.utime(marker_path(a))  # a pod started from it meanwhile
    (outcome,) = remove(tmp_path, decision.removals, listed, ())
    assert (outcome.removed, outcome.reason) == (False, "UsedMeanwhile")
    assert a.exists()


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "collect-model-cache", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_console_script_prints_a_record_per_file_and_a_summary(tmp_path: Path) -> None:
    cached(tmp_path, A, used=time.time() - 120)
    cached(tmp_path, B, used=time.time() - 120)
    done = _command("--cache-dir", str(tmp_path), "--keep", B, "--retention", "60")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["event"] for r in records] == ["removed", "summary"]
    assert records[0]["path"] == A
    assert records[0]["why"] == "Unused"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--keep", "../../etc/passwd"], "relative to the cache"),
        (["--keep", "/var/lib/x/https/0123456789abcdef/a"], "relative to the cache"),
        (["--keep", "https/0123456789abcdef"], "relative to the cache"),
        (["--keep", "models/a.gguf"], "relative to the cache"),
        (["--retention", "-1"], "seconds >= 0"),
        (["--retention", "nan"], "seconds >= 0"),
        (["--max-bytes", "-5"], "0: no cap"),
    ],
)
def test_bad_input_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser("collect-model-cache").parse_args(
            ["collect-model-cache", "--cache-dir", str(tmp_path), *args]
        )
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_cache_folder_is_refused(tmp_path: Path) -> None:
    done = _command("--cache-dir", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert "is not a folder" in done.stderr
