"""A real kube-apiserver + etcd (+ kube-controller-manager) on loopback, for tests and dev."""

from controlplane.envtest.binaries import Binaries, find_binaries
from controlplane.envtest.controlplane import ControlPlane
from controlplane.envtest.errors import (
    BinaryNotFoundError,
    EnvtestError,
    PortInUseError,
    ProcessFailedError,
)

__all__ = [
    "Binaries",
    "BinaryNotFoundError",
    "ControlPlane",
    "EnvtestError",
    "PortInUseError",
    "ProcessFailedError",
    "find_binaries",
]
