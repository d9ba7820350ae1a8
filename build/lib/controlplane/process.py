"""What every long-running process shares: who it is, and the RBAC preflight as its gate.

The operator (``controlplane/operator/``) and the router-proxy (``controlplane/router/``) each run
a :class:`~controlplane.runtime.Manager`; both need a per-replica identity (a leader-election
holder, a pool Lease holder) and both are gated by the RBAC preflight in the same way
(docs/preflight.md): the first check and its background re-checks run as a manager runnable, a
DENIED verdict stops the process (exit 77), and until a verdict is ALLOWED ``/readyz`` says why.
Written once, here.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import anyio

from controlplane.preflight import Component, PreflightGate, Verdict, run_preflight
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.manager import Manager

#: The readiness check the preflight gate adds to a process's ``/readyz``.
PREFLIGHT_READINESS_CHECK = "rbac-preflight"


def default_identity() -> str:
    """The pod's name where it is known (unique per replica), else host name plus a random id."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


class PreflightRunner:
    """Runs the gate's first check, and its background re-checks, as a manager runnable."""

    needs_leader_election = False

    def __init__(self, gate: PreflightGate) -> None:
        self.gate = gate

    async def start(self) -> None:
        async with anyio.create_task_group() as group:
            await self.gate.start(group)  # raises PreflightDenied: the manager, and process, stop


def gate_on_preflight(
    manager: Manager,
    config: ClientConfig,
    component: Component,
    namespace: str,
    *,
    cache_dir: Path | None = None,
    hold_start: bool = False,
) -> PreflightGate:
    """Check ``component``'s permissions in ``namespace`` as part of ``manager``'s run.

    The gate runs as a runnable and reports in ``/readyz``; with ``hold_start`` the manager also
    waits for an ALLOWED verdict before it campaigns for leadership and starts controllers.
    """

    async def check() -> Verdict:
        return await run_preflight(config, component, namespace, cache_dir=cache_dir)

    gate = PreflightGate(check)
    manager.add(PreflightRunner(gate))
    manager.add_readiness_check(
        PREFLIGHT_READINESS_CHECK, lambda: None if gate.ready else gate.readiness()[1]
    )
    if hold_start:
        manager.add_start_gate(gate.wait_ready)
    return gate
