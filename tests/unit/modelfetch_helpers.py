"""Helpers of the fetcher's tests: model files, a private CA, and one ``fetch-model`` run.

A run is ``controlplane.modelfetch.command.main`` in this process (fast: no interpreter to
start), its stdout parsed back into records with the operator's own parser.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane.envtest.pki import CertificateAuthority
from controlplane.modelfetch.command import main
from controlplane.modelfetch.progress import Done, Progress, ProgressRecord, parse_line

#: Tests wait milliseconds between retries, not seconds.
FAST_RETRIES = ("--retry-delay", "0.01")


def model_file(folder: Path, relative: str, size: int, seed: int = 0) -> tuple[Path, str]:
    """A file of ``size`` random bytes (the same for the same seed) and its sha256."""
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class TlsFiles:
    ca_bundle: Path
    cert: Path
    key: Path


def tls_files(folder: Path) -> TlsFiles:
    """A fresh CA (its bundle, for ``SSL_CERT_FILE``) and a loopback serving pair it signed."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("modelfetch-test-ca")
    bundle = folder / "ca.crt"
    bundle.write_bytes(ca.cert_pem)
    cert, key = ca.serving_pair().write(folder, "server")
    return TlsFiles(bundle, cert, key)


@dataclass(frozen=True)
class Run:
    code: int
    records: list[ProgressRecord]
    stdout_lines: list[str]
    stderr: str
    termination: str | None

    @property
    def done(self) -> Done:
        last = self.records[-1]
        assert isinstance(last, Done), self.stdout_lines
        return last

    @property
    def progress(self) -> list[Progress]:
        return [record for record in self.records if isinstance(record, Progress)]


def fetch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, source: str, dest: Path, *args: str
) -> Run:
    """One ``fetch-model`` run; its exit code, records, stderr and termination message."""
    capsys.readouterr()
    termination = tmp_path / "termination-log"
    termination.unlink(missing_ok=True)
    code = main(
        [
            "--source",
            source,
            "--dest",
            str(dest),
            "--termination-log",
            str(termination),
            *FAST_RETRIES,
            *args,
        ]
    )
    out = capsys.readouterr()
    lines = out.out.splitlines()
    records = [record for line in lines if (record := parse_line(line)) is not None]
    assert len(records) == len(lines), f"stdout carries only records: {lines}"
    text = termination.read_text() if termination.exists() else None
    return Run(code, records, lines, out.err, text)
