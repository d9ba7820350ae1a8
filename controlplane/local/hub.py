"""A local stand-in for the Hugging Face Hub, so the samples' ``hf://`` sources download locally.

The samples name real models on the Hub (``manifests/samples``), as a user's cluster would fetch
them. A local run (``make demo``, ``make dev``) reaches no Hub and must not download gigabytes:
so it serves, at the same ``ORG/REPO/PATH``, a small file of random bytes for each ``hf://`` file
the samples name, from a server speaking the Hub's download protocol
(:class:`~controlplane.envtest.fileserver.FileServer`), and the operator hands every fetcher its
address (``--fetch-env HF_ENDPOINT=...``, as a cluster would for a Hub mirror). The simulator
never reads its model file, so the bytes only have to be there, downloaded and verified as the
real ones would be.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import yaml

from controlplane.api.v1alpha1.modelsource import SourceError, SourceKind, parse_source
from controlplane.envtest.fileserver import FileServer

#: Size of each stand-in file: enough for a download to show progress, small enough to be quick.
STAND_IN_BYTES: Final = 4 * 1024 * 1024


def sample_hf_files(samples: Path) -> list[str]:
    """``ORG/REPO/PATH`` of every ``hf://`` file the InferenceServices in ``samples`` name."""
    found = []
    for manifest in sorted(samples.glob("*.yaml")):
        for document in yaml.safe_load_all(manifest.read_text()):
            if not isinstance(document, dict) or document.get("kind") != "InferenceService":
                continue
            model = (document.get("spec") or {}).get("model") or {}
            try:
                source = parse_source(str(model.get("source") or ""), model.get("sha256"))
            except SourceError:
                continue
            if source.kind is SourceKind.HF:
                found.append(f"{source.repo}/{source.path}")
    return found


@contextlib.contextmanager
def sample_hub(samples: Path, workdir: Path) -> Iterator[FileServer]:
    """A local Hub serving a random stand-in for each ``hf://`` file of the samples."""
    root = workdir / "hub"
    for relative in sample_hf_files(samples):
        file = root / relative
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(os.urandom(STAND_IN_BYTES))
    with FileServer(root, hub=True) as server:
        yield server
