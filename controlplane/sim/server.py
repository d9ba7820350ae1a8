"""The simulator as a process: bind, say where, load the model, serve, and stop on SIGTERM.

The port is bound before anything else, so ``--port 0`` can be resolved and printed on stdout
(``listening on http://HOST:PORT``) while the model is still loading: that is what lets a test or
the node stand-in start many simulators and watch ``/health`` go from 503 to 200. On SIGTERM or
SIGINT the server stops accepting connections, lets in-flight responses (streams included) finish
for up to the embedded server's grace period, and returns, so the process exits 0.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import Callable

import anyio

# Re-exported: the router mode (controlplane.sim.router) binds and serves the same way, and the
# simulator's one way into the framework is this module (the import contract in pyproject.toml).
from controlplane.runtime.httpserver import bind as bind
from controlplane.runtime.httpserver import serve as serve
from controlplane.sim.app import build_app
from controlplane.sim.model import SimulatedModel
from controlplane.sim.settings import SimSettings

log = logging.getLogger(__name__)

#: The stdout line that tells a parent process where the simulator listens.
LISTENING_PREFIX = "listening on "


def base_url(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def print_line(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


async def run_simulator(
    settings: SimSettings, *, announce: Callable[[str], None] = print_line
) -> None:
    """Serve one simulated llama-server until SIGTERM or SIGINT."""
    model = SimulatedModel(settings)
    sock = bind(settings.host, settings.port)
    url = base_url(sock)
    try:
        async with anyio.create_task_group() as group:
            await group.start(serve, build_app(model), [sock])
            announce(f"{LISTENING_PREFIX}{url}")
            group.start_soon(_load, model, url)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("%s: stopping; in-flight completions may finish", signum.name)
                    break
            model.begin_shutdown()
            group.cancel_scope.cancel()
    finally:
        sock.close()


async def _load(model: SimulatedModel, url: str) -> None:
    await model.load()
    settings = model.settings
    log.info(
        "ready: model %s on %s (%d slot%s)",
        settings.model_name,
        url,
        settings.slots,
        "" if settings.slots == 1 else "s",
    )
