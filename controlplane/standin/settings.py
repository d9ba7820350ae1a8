"""Every knob of the node stand-in and its default (``controlplane sim-node`` flags)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

#: Each simulator's model load: short, so tests and the demo see Creating then Ready quickly.
DEFAULT_LOAD_SECONDS: Final = 0.5
DEFAULT_TOKEN_SECONDS: Final = 0.02
#: How often a running simulator is re-checked (the kubelet's sync loop).
DEFAULT_RESYNC_SECONDS: Final = 2.0
#: How often a starting simulator's ``/health`` is polled until it answers 200 (and a running
#: init container or Job container is looked at).
DEFAULT_STARTING_POLL_SECONDS: Final = 0.2
#: A crashing container's back-off: the first restart at once, then this, doubling up to the cap
#: (a kubelet's are 10 s and 300 s; shorter here, so a local run recovers within a test).
DEFAULT_BACKOFF_SECONDS: Final = 1.0
DEFAULT_MAX_BACKOFF_SECONDS: Final = 20.0


@dataclass
class NodeSettings:
    """How the stand-in runs."""

    #: Play the node in this namespace only; None means every namespace.
    namespace: str | None = None
    #: Passed to every simulator: how long ``/health`` answers 503 (the "model load").
    load_seconds: float = DEFAULT_LOAD_SECONDS
    token_seconds: float = DEFAULT_TOKEN_SECONDS
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    starting_poll_seconds: float = DEFAULT_STARTING_POLL_SECONDS
    #: Also play router-proxy Deployments (``--router-proxies``): their pods as
    #: ``controlplane router-proxy`` processes, their Services at one local address each. Off by
    #: default: e2e tests that run their own proxies want no others.
    router_proxies: bool = False
    #: A crashing container's restart back-off: the first restart at once, then this, doubling
    #: up to :attr:`max_backoff_seconds`.
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    max_backoff_seconds: float = DEFAULT_MAX_BACKOFF_SECONDS
    #: Where each container's log goes (``NAMESPACE_POD.log`` for a pod's first container,
    #: ``containers/NAMESPACE_POD_CONTAINER.log`` for the others), the proxies' credentials, the
    #: node's disk (:attr:`host_root`) and the claims' folders (:attr:`pvc_root`).
    log_dir: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "modelpool-sim-node"
    )
    #: The real llama.cpp ``llama-server`` (``--llama-server PATH``). Given one, the stand-in runs
    #: it, not a simulator, for every member whose ``--model`` is a GGUF file on this machine,
    #: with the member's arguments (``--host``/``--port`` rewritten to a loopback port of the
    #: stand-in's choosing, ``--threads 1`` unless given). None: every member is a simulator.
    llama_server: Path | None = None
    #: On a graceful exit, delete the pods whose simulators were stopped (the node leaves and
    #: takes its pods along), so namespaces can be deleted afterwards.
    delete_pods_on_exit: bool = True

    @property
    def host_root(self) -> Path:
        """The node's disk: a pod's hostPath volume ``/P`` is the folder ``host_root/P``."""
        return self.log_dir / "hostpath"

    @property
    def pvc_root(self) -> Path:
        """The claims: a pod's ``persistentVolumeClaim`` CLAIM is ``pvc_root/NAMESPACE/CLAIM``."""
        return self.log_dir / "pvc"

    def scratch(self, namespace: str, pod: str) -> Path:
        """A pod's own folder: its emptyDirs, termination messages, any path of a container
        not under a volume (gone with the pod as far as anything reads it)."""
        return self.log_dir / "pods" / f"{namespace}_{pod}"
