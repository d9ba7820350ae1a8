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
#: How often a starting simulator's ``/health`` is polled until it answers 200.
DEFAULT_STARTING_POLL_SECONDS: Final = 0.2


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
    #: Where each pod's process log goes (``NAMESPACE_POD.log``), and the proxies' credentials.
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
