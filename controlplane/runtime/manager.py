"""The manager: shared caches, controllers and other runnables, leader election, probes, metrics.

Start-up order follows controller-runtime: the probe/metrics server first, then every informer,
then the runnables that do not need leadership (event recorders); once every cache has synced the
manager is ready, campaigns for leadership if configured, and only then starts the leader-only
runnables (controllers). Losing the Lease stops those at once and makes :meth:`run` raise
:class:`LeadershipLost`, so the process exits non-zero and its replacement starts clean.

With leader election, :attr:`Manager.client` is **fenced**: every write through it is first
checked with the elector (:meth:`~controlplane.runtime.leaderelection.LeaderElector.write_refusal`)
and refused with :class:`~controlplane.runtime.errors.NotLeading` once the last renewal is older
than the renew deadline on our clock, so a leader paused past its Lease writes nothing when it
wakes. Writes before the campaign (the preflight's reviews) pass; the elector renews through the
unfenced client.

:meth:`run_until_signal` turns SIGTERM/SIGINT into a graceful stop: controllers finish the
reconciles in flight (bounded by ``drain_timeout``), then everything is cancelled and the Lease is
released so a successor takes over without waiting for it to expire.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import anyio
import msgspec
from prometheus_client import disable_created_metrics, make_asgi_app

from controlplane.runtime import controller_metrics
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.controller import DRAIN_TIMEOUT, Controller, Reconciler
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.httpserver import bind, serve
from controlplane.runtime.informer import Informer, InformerSettings
from controlplane.runtime.leaderelection import LeaderElectionConfig, LeaderElector, LeadershipLost
from controlplane.runtime.metrics import REGISTRY
from controlplane.runtime.resources import Resource

log = logging.getLogger(__name__)

#: A readiness check returns None when ready, or a short reason why not.
ReadinessCheck = Callable[[], str | None]
Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class Runnable(Protocol):
    """Anything the manager runs: ``start`` runs until cancelled."""

    needs_leader_election: bool

    async def start(self) -> None: ...


@dataclass
class ManagerOptions:
    """Where to serve probes and metrics (port 0 picks one; None disables) and how to lead."""

    name: str
    leader_election: LeaderElectionConfig | None = None
    probe_address: tuple[str, int] | None = ("0.0.0.0", 8081)
    metrics_address: tuple[str, int] | None = ("0.0.0.0", 8080)
    drain_timeout: float = DRAIN_TIMEOUT


class Manager:
    """Owns one API client and everything that runs on it."""

    def __init__(self, config: ClientConfig, options: ManagerOptions) -> None:
        self.options = options
        self._own_client = KubeClient(config)
        #: What runnables write through: fenced by the Lease when leader election is on.
        self.client = (
            self._own_client.fenced(self._fence)
            if options.leader_election is not None
            else self._own_client
        )
        self._informers: dict[tuple[Any, ...], Informer] = {}
        #: Informers not seen synced yet. An informer never unsyncs, so once this is empty
        #: ``caches_synced`` (read on every proxied request) costs nothing.
        self._unsynced: list[Informer] = []
        self._runnables: list[Runnable] = []
        self._controllers: list[Controller] = []
        self._readiness: dict[str, ReadinessCheck] = {}
        self._start_gates: list[Callable[[], Awaitable[object]]] = []
        self._group: anyio.abc.TaskGroup | None = None
        self.elector: LeaderElector | None = None
        #: Bound addresses once serving, e.g. ``{"probe": ("127.0.0.1", 8081)}``.
        self.addresses: dict[str, tuple[str, int]] = {}
        self.serving = anyio.Event()

    # -- wiring ----------------------------------------------------------------------------------

    def informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        settings: InformerSettings | None = None,
    ) -> Informer:
        """The shared informer for this resource and scope (created on first use)."""
        key = (resource, namespace, label_selector)
        if key not in self._informers:
            informer = Informer(
                self.client, resource, namespace, label_selector=label_selector, settings=settings
            )
            self._informers[key] = informer
            self._unsynced.append(informer)
            if self._group is not None:  # added while running: start it now
                self._group.start_soon(informer.run)
        return self._informers[key]

    def add(self, runnable: Runnable) -> None:
        self._runnables.append(runnable)
        if isinstance(runnable, Controller):
            self._controllers.append(runnable)

    def new_controller(self, name: str, reconciler: Reconciler, **options: Any) -> Controller:
        controller = Controller(name, reconciler, **options)
        self.add(controller)
        return controller

    def event_recorder(self, controller: str, instance: str) -> EventRecorder:
        recorder = EventRecorder(self.client, controller, instance)
        self.add(recorder)
        return recorder

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        self._readiness[name] = check

    def add_start_gate(self, gate: Callable[[], Awaitable[object]]) -> None:
        """Await ``gate`` after the caches sync and before campaigning or starting controllers.

        A gate that raises stops the manager: a process must not lead, let alone reconcile,
        before it knows it may (the RBAC preflight is such a gate).
        """
        self._start_gates.append(gate)

    # -- state -----------------------------------------------------------------------------------

    @property
    def caches_synced(self) -> bool:
        if self._unsynced:
            self._unsynced = [i for i in self._unsynced if not i.has_synced]
        return not self._unsynced

    def not_ready_reasons(self) -> list[str]:
        reasons = [] if self.caches_synced else ["caches not synced"]
        for name, check in self._readiness.items():
            if (why := check()) is not None:
                reasons.append(f"{name}: {why}")
        return reasons

    # -- running ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled; raises :class:`LeadershipLost` if the Lease is lost."""
        try:
            with _unwrap_leadership_lost():
                await self._run()
        finally:
            self._group = None

    async def _run(self) -> None:
        async with self._own_client, anyio.create_task_group() as group:
            self._group = group
            await self._serve_probes(group)
            for informer in self._informers.values():
                group.start_soon(informer.run)
            for runnable in self._runnables:
                if not runnable.needs_leader_election:
                    group.start_soon(runnable.start)
            for informer in list(self._informers.values()):
                await informer.wait_for_sync()
            log.info("manager %s: caches synced", self.options.name)
            for gate in self._start_gates:
                await gate()
            await self._lead()
            group.cancel_scope.cancel()

    async def _lead(self) -> None:
        election = self.options.leader_election
        if election is None:
            await self._run_leader_runnables()
            return
        gauge = controller_metrics.LEADER_ELECTION_MASTER_STATUS.labels(election.lease_name)
        gauge.set(0)
        self.elector = LeaderElector(
            self._own_client, election, on_change=lambda leading: gauge.set(1 if leading else 0)
        )
        await self.elector.run(self._run_leader_runnables)

    def _fence(self, method: str, path: str) -> None:
        """The write guard of :attr:`client`: before the campaign every write passes (nothing
        that leads runs yet); from then on, only while the elector holds the Lease."""
        if self.elector is not None:
            self.elector.write_refusal(method, path)

    async def _run_leader_runnables(self) -> None:
        """Start the leader-only runnables, then lead until cancelled (as controller-runtime's
        manager does: a runnable that returns does not end the manager)."""
        async with anyio.create_task_group() as group:
            for runnable in self._runnables:
                if runnable.needs_leader_election:
                    group.start_soon(runnable.start)
            await anyio.sleep_forever()

    async def shutdown(self) -> None:
        """Graceful stop: drain controllers (bounded), then cancel everything."""
        log.info("manager %s: shutting down", self.options.name)
        with anyio.move_on_after(self.options.drain_timeout):
            async with anyio.create_task_group() as group:
                for controller in self._controllers:
                    group.start_soon(controller.drain, self.options.drain_timeout)
        if self._group is not None:
            self._group.cancel_scope.cancel()

    async def run_until_signal(
        self, before_shutdown: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """:meth:`run`, stopping gracefully on SIGTERM or SIGINT. ``before_shutdown`` is awaited
        first, while every runnable still runs: a process that drains itself (the router-proxy
        relays its streams to their end, :mod:`controlplane.router.drain`) stops its own parts in
        its own order there, and what it leaves running is stopped after, all at once."""
        with _unwrap_leadership_lost(), anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:

                async def on_signal() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                        async for signum in signals:
                            log.info("received %s", signal.Signals(signum).name)
                            if before_shutdown is not None:
                                await before_shutdown()
                            await self.shutdown()
                            return

                group.start_soon(on_signal)
                await self.run()
                scope.cancel()

    # -- probes and metrics ----------------------------------------------------------------------

    async def _serve_probes(self, group: anyio.abc.TaskGroup) -> None:
        wanted = {"probe": self.options.probe_address, "metrics": self.options.metrics_address}
        sockets = {role: bind(*address) for role, address in wanted.items() if address}
        if not sockets:
            return
        for role, sock in sockets.items():
            host, port = sock.getsockname()[:2]
            self.addresses[role] = (host, port)
        await group.start(partial(serve, self._app, list(sockets.values())))
        self.serving.set()

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path == "/metrics":
            await _METRICS_APP(scope, receive, send)
        elif path == "/healthz":
            await _respond(send, 200, b"ok")
        elif path == "/readyz":
            reasons = self.not_ready_reasons()
            if reasons:
                await _respond(send, 503, msgspec.json.encode({"ready": False, "reasons": reasons}))
            else:
                await _respond(send, 200, b"ok")
        else:
            await _respond(send, 404, b"not found")


# controller-runtime exposes no ``*_created`` series; dashboards written for it expect none.
disable_created_metrics()  # type: ignore[no-untyped-call]
_METRICS_APP = make_asgi_app(registry=REGISTRY)


@contextlib.contextmanager
def _unwrap_leadership_lost() -> Iterator[None]:
    """Task groups wrap errors in groups; a lost Lease is raised as itself for the caller."""
    try:
        yield
    except BaseExceptionGroup as group_error:
        lost = group_error.subgroup(LeadershipLost)
        if lost is None:
            raise
        first: BaseException = lost
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None


async def _respond(send: Send, status: int, body: bytes) -> None:
    content_type = b"application/json" if body.startswith(b"{") else b"text/plain"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
