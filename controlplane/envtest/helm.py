"""Finding the Helm binary that ``hack/build-helm.sh`` builds from its Go module.

Nothing here builds or downloads: a missing binary is an error that says how to build it, never
a silent skip (the chart's tests fail without it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from controlplane.envtest.binaries import cache_root, find_executable

#: The Helm release ``hack/build-helm.sh`` builds (kept in step with that script).
HELM_VERSION: Final = "v4.3.2"
#: An executable to use instead of the cached build.
HELM_BINARY_VARIABLE: Final = "HELM_BINARY"


def find_helm() -> Path:
    """``$HELM_BINARY``, else the cached build; raises :class:`BinaryNotFoundError` naming the
    command that builds it."""
    cached = cache_root() / "bin" / f"helm-{HELM_VERSION}" / "helm"
    return find_executable(
        HELM_BINARY_VARIABLE, cached, "helm binary", "run `make helm-bin` (hack/build-helm.sh)"
    )
