"""Generated manifests on disk: write them, or say which committed ones no longer match.

Shared by the CRD and RBAC generators so that ``--check`` means the same thing for both: the
files in the repository are byte-for-byte what the code renders today.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def stale_files(directory: Path, files: Mapping[str, str]) -> list[str]:
    """Names whose committed content differs from ``files`` (missing ones included)."""
    return sorted(
        name
        for name, content in files.items()
        if not (directory / name).is_file() or (directory / name).read_text() != content
    )


def write_files(directory: Path, files: Mapping[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(content)


def write_or_check(directory: Path, files: Mapping[str, str], check: bool) -> int:
    """What every generator's ``main`` does: write ``files``, or with ``check`` write nothing and
    name each stale one; the exit code (1 when something is stale)."""
    if not check:
        write_files(directory, files)
        return 0
    stale = stale_files(directory, files)
    for name in stale:
        print(f"{directory / name} is out of date: run `make manifests`", file=sys.stderr)
    return 1 if stale else 0
