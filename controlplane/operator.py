"""The operator process: one leader-elected manager, gated by the RBAC preflight.

Start-up, in order: probes and metrics serve at once (``/readyz`` says why it is not ready yet);
the preflight checks every permission the operator's controllers declare, so a missing grant
stops the process at start with a message naming it (exit 77), and a control plane that does not
answer leaves it not-ready while the preflight keeps retrying in the background; only an ALLOWED
verdict lets the manager campaign for leadership and start controllers.

The controllers (InferenceService, ModelPool, ModelRouter) register in :func:`build_manager` as
they land; today it runs all three.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio

from controlplane.controllers.inferenceservice import setup_inference_service_controller
from controlplane.controllers.modelpool import setup_model_pool_controller
from controlplane.controllers.modelrouter import setup_model_router_controller
from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.preflight import Component, PreflightGate, Verdict, run_preflight
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.leaderelection import LeaderElectionConfig
from controlplane.runtime.manager import Manager, ManagerOptions
from controlplane.runtime.tracing import configure_tracing

log = logging.getLogger(__name__)

LEADER_ELECTION_ID = "modelpool-operator"
DEFAULT_PROBE_ADDRESS = ("0.0.0.0", 8081)
DEFAULT_METRICS_ADDRESS = ("0.0.0.0", 8080)


def default_identity() -> str:
    """The pod's name where it is known (unique per replica), else host name plus a random id."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass
class OperatorSettings:
    """Everything the operator process is told at start (flags and environment)."""

    namespace: str = OPERATOR_NAMESPACE
    kubeconfig: Path | None = None
    identity: str = ""
    leader_elect: bool = True
    leader_election_id: str = LEADER_ELECTION_ID
    probe_address: tuple[str, int] | None = DEFAULT_PROBE_ADDRESS
    metrics_address: tuple[str, int] | None = DEFAULT_METRICS_ADDRESS
    preflight_cache_dir: Path | None = None


class PreflightRunner:
    """Runs the gate's first check, and its background re-checks, as a manager runnable."""

    needs_leader_election = False

    def __init__(self, gate: PreflightGate) -> None:
        self.gate = gate

    async def start(self) -> None:
        async with anyio.create_task_group() as group:
            await self.gate.start(group)  # raises PreflightDenied: the manager, and process, stop


def build_manager(settings: OperatorSettings) -> tuple[Manager, PreflightGate]:
    config = ClientConfig.load(settings.kubeconfig)
    identity = settings.identity or default_identity()
    election = (
        LeaderElectionConfig(settings.leader_election_id, settings.namespace, identity)
        if settings.leader_elect
        else None
    )
    manager = Manager(
        config,
        ManagerOptions(
            name="modelpool-operator",
            leader_election=election,
            probe_address=settings.probe_address,
            metrics_address=settings.metrics_address,
        ),
    )

    async def check() -> Verdict:
        return await run_preflight(
            config, Component.OPERATOR, settings.namespace, cache_dir=settings.preflight_cache_dir
        )

    gate = PreflightGate(check)
    manager.add(PreflightRunner(gate))
    manager.add_readiness_check(
        "rbac-preflight", lambda: None if gate.ready else gate.readiness()[1]
    )
    manager.add_start_gate(gate.wait_ready)
    # Controllers register here, each with the informers it reads.
    setup_inference_service_controller(manager, identity)
    setup_model_pool_controller(manager, identity)
    setup_model_router_controller(manager, identity)
    return manager, gate


async def run_operator(settings: OperatorSettings) -> None:
    """Run until SIGTERM; raises ``PreflightDenied`` or ``LeadershipLost`` (inside groups)."""
    configure_tracing("modelpool-operator")
    manager, _ = build_manager(settings)
    log.info("operator starting in namespace %s", settings.namespace)
    await manager.run_until_signal()
