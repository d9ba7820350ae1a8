"""The fuzzers' seed inputs: raw bytes, one case per file, under ``tests/fuzz/corpus/``.

``requests/`` holds client requests (as sent on the wire) and ``answers/`` member answers (as a
member sends them); both are mutated byte by byte (:mod:`tests.fuzz.mutations`). A case the long
run found is kept by adding its bytes here as a file (docs/fuzzing.md).
"""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"


def seeds(kind: str) -> list[bytes]:
    """The seeds of ``kind`` (``requests`` or ``answers``), sorted by file name."""
    files = sorted(path for path in (CORPUS / kind).iterdir() if path.is_file())
    if not files:
        raise FileNotFoundError(f"no seeds in {CORPUS / kind}")
    return [path.read_bytes() for path in files]
