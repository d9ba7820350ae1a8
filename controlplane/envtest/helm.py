"""Finding the Helm binary that ``hack/build-helm.sh`` builds from its Go module.

Nothing here builds or downloads: a missing binary is an error that says how to build it, never
a silent skip (the chart's tests fail without it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from controlplane.envtest.binaries import cache_root
from controlplane.envtest.errors import BinaryNotFoundError

#: The Helm release ``hack/build-helm.sh`` builds (kept in step with that script).
HELM_VERSION: Final = "v4.3.2"
#: An executable to use instead of the cached build.
HELM_BINARY_VARIABLE: Final = "HELM_BINARY"


def find_helm() -> Path:
    """``$HELM_BINARY``, else the cached build; raises :class:`BinaryNotFoundError` naming the
    command that builds it."""
    if explicit := os.environ.get(HELM_BINARY_VARIABLE):
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise BinaryNotFoundError(f"{HELM_BINARY_VARIABLE}={explicit} is not an executable file")
    path = cache_root() / "bin" / f"helm-{HELM_VERSION}" / "helm"
    if path.is_file() and os.access(path, os.X_OK):
        return path
    raise BinaryNotFoundError(f"no helm binary at {path}: run `make helm-bin` (hack/build-helm.sh)")
