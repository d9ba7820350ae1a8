"""Finding the control-plane binaries.

The suite never downloads anything: binaries come from the envtest conventions a user may already
have set (``KUBEBUILDER_ASSETS``, ``TEST_ASSET_*``) or from the cache that
``hack/build-controlplane.sh`` fills. A missing binary is an error that says how to get it, never
a silent skip.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from controlplane.envtest.errors import BinaryNotFoundError

#: Environment variable naming one binary each, as controller-runtime's envtest reads them.
ASSET_VARIABLES = {
    "etcd": "TEST_ASSET_ETCD",
    "kube-apiserver": "TEST_ASSET_KUBE_APISERVER",
    "kube-controller-manager": "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
    "kubectl": "TEST_ASSET_KUBECTL",
}


def cache_root() -> Path:
    """The folder ``hack/build-controlplane.sh`` builds into (kept in step with that script)."""
    if root := os.environ.get("CONTROLPLANE_CACHE"):
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "modelpool-controlplane"


@dataclass(frozen=True)
class Binaries:
    """Paths of the executables one control plane runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path | None
    kubectl: Path | None


def find_executable(variable: str, cached: Path, what: str, hint: str) -> Path:
    """``$variable`` when set (it must be an executable), else the cached build at ``cached``;
    raises :class:`BinaryNotFoundError` naming ``what`` is missing and ``hint`` (how to build
    it). Shared by every tool the hack/ scripts build into the cache, so none skips silently."""
    if explicit := os.environ.get(variable):
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise BinaryNotFoundError(f"{variable}={explicit} is not an executable file")
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    raise BinaryNotFoundError(f"no {what} at {cached}: {hint}")


def _candidate_folders() -> list[Path]:
    folders: list[Path] = []
    if assets := os.environ.get("KUBEBUILDER_ASSETS"):
        folders.append(Path(assets))
    built = cache_root() / "bin"
    if built.is_dir():
        # Newest build first, so a version bump is picked up without configuration.
        folders.extend(sorted(built.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True))
    return folders


def _locate(name: str, folders: list[Path]) -> Path | None:
    if explicit := os.environ.get(ASSET_VARIABLES[name]):
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BinaryNotFoundError(
                f"{ASSET_VARIABLES[name]}={explicit} is not an executable file"
            )
        return path
    for folder in folders:
        path = folder / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def find_binaries() -> Binaries:
    """Locate etcd and kube-apiserver (required) and the optional controller manager and kubectl."""
    folders = _candidate_folders()
    found = {name: _locate(name, folders) for name in ASSET_VARIABLES}
    missing = [name for name in ("etcd", "kube-apiserver") if found[name] is None]
    if missing:
        searched = ", ".join(str(f) for f in folders) or "(no folder)"
        raise BinaryNotFoundError(
            f"control-plane binaries not found: {', '.join(missing)}; searched {searched}. "
            "Run `make controlplane-bins` (builds them from Go modules) or set KUBEBUILDER_ASSETS "
            "to a folder holding etcd and kube-apiserver."
        )
    etcd, apiserver = found["etcd"], found["kube-apiserver"]
    assert etcd is not None
    assert apiserver is not None
    return Binaries(
        etcd=etcd,
        kube_apiserver=apiserver,
        kube_controller_manager=found["kube-controller-manager"],
        kubectl=found["kubectl"],
    )
