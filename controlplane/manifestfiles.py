"""Generated manifests on disk: write them, or say which committed ones no longer match.

Shared by the CRD and RBAC generators so that ``--check`` means the same thing for both: the
files in the repository are byte-for-byte what the code renders today.
"""

from __future__ import annotations

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
