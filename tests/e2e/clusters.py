"""The clusters the e2e suite can run against: local (built here), kind, or any kubeconfig.

Every mode yields a :class:`TestCluster`; tests use only what it offers, so the same suite runs
unchanged on all three.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from controlplane.envtest import ControlPlane
from controlplane.runtime.config import ClientConfig


@dataclass
class TestCluster:
    """One API server the suite talks to, with an admin identity."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    mode: str
    admin_kubeconfig: Path
    local: ControlPlane | None = None

    def admin_config(self) -> ClientConfig:
        return ClientConfig.from_kubeconfig(self.admin_kubeconfig)

    def logs(self) -> dict[str, Path]:
        return self.local.logs() if self.local is not None else {}


#: ConfigMaps bypass the API server's watch cache, so a test can force ``410 Gone`` on a watch by
#: compacting etcd (a cached resource would serve old versions from memory for a while).
UNCACHED_WATCH_ARGS = ("--watch-cache-sizes=configmaps#0",)


def start_local() -> TestCluster:
    """etcd + kube-apiserver + kube-controller-manager built from Go modules (``hack/``)."""
    plane = ControlPlane(with_controller_manager=True, extra_apiserver_args=UNCACHED_WATCH_ARGS)
    plane.start()
    return TestCluster("local", plane.admin_kubeconfig, plane)


def docker_unavailable_reason() -> str | None:
    """Why kind cannot run here, or None when a Docker engine answers."""
    if shutil.which("docker") is None:
        return "kind needs Docker and there is no docker binary"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        why = probe.stderr.strip()[:200]
        return f"kind needs a running Docker engine: `docker info` failed: {why}"
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
