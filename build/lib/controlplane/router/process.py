"""The router-proxy process: caches, the activator and the HTTP server, gated by the preflight.

A :class:`~controlplane.runtime.manager.Manager` without leader election (every replica serves)
holds informers for the proxy's ModelRouter, ModelPools, InferenceServices, EndpointSlices and
Leases in its namespace; every cache event wakes the activator's waiters. The HTTP server binds at
start and answers ``/healthz`` at once; ``/readyz`` (and proxying) waits for the caches and for
an ALLOWED RBAC preflight (``Component.ROUTER_PROXY``, through :mod:`controlplane.process`, as
the operator's). A DENIED preflight stops the process. Flags: :mod:`controlplane.router.command`.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import httpx

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.api.v1alpha1.activation import POOL_LABEL
from controlplane.preflight import Component
from controlplane.process import default_identity, gate_on_preflight
from controlplane.router.activator import Activator, Notifier
from controlplane.router.app import (
    UPSTREAM_TIMEOUT,
    ProxyContext,
    build_app,
)
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.settings import RouterProxySettings
from controlplane.router.upstream import AiohttpTransport
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.endpoints import member_urls
from controlplane.runtime.httpserver import bind, serve
from controlplane.runtime.informer import DeletedFinalStateUnknown, Informer
from controlplane.runtime.manager import Manager, ManagerOptions
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import ENDPOINT_SLICES, LEASES
from controlplane.runtime.tracing import configure_tracing

log = logging.getLogger(__name__)


class _Wake:
    """An informer handler that wakes the activator's waiters on every change."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier

    def on_add(self, obj: Object, initial: bool) -> None:
        self.notifier.notify()

    def on_update(self, old: Object, new: Object) -> None:
        self.notifier.notify()

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        self.notifier.notify()


class CacheView:
    """Reads of the proxy's namespace from the informer caches."""

    def __init__(
        self,
        namespace: str,
        router: str,
        routers: Informer,
        pools: Informer,
        isvcs: Informer,
        slices: Informer,
    ) -> None:
        self.namespace = namespace
        self.router_name = router
        self._routers, self._pools, self._isvcs, self._slices = routers, pools, isvcs, slices

    def router(self) -> Object | None:
        return self._routers.store.get(f"{self.namespace}/{self.router_name}")

    def pool(self, name: str) -> Object | None:
        return self._pools.store.get(f"{self.namespace}/{name}")

    def isvc(self, name: str) -> Object | None:
        return self._isvcs.store.get(f"{self.namespace}/{name}")

    def member_urls(self, member: str) -> list[str]:
        """By index, through the one function the pool controller uses too."""
        return member_urls(self._slices.store, self.namespace, member)


class ProxyServer:
    """The HTTP server as a manager runnable, on a socket bound before the manager starts."""

    needs_leader_election = False

    def __init__(self, app: Any, sock: socket.socket, http: httpx.AsyncClient) -> None:
        self.app, self.sock, self.http = app, sock, http

    async def start(self) -> None:
        async with self.http:
            host, port = self.sock.getsockname()[:2]
            log.info("router-proxy listening on http://%s:%d", host, port)
            await serve(self.app, [self.sock])


def build_router_proxy(settings: RouterProxySettings) -> tuple[Manager, Activator]:
    config = ClientConfig.load(settings.kubeconfig)
    identity = settings.identity or default_identity()
    ns = settings.namespace
    manager = Manager(
        config,
        ManagerOptions(
            name="router-proxy", leader_election=None, probe_address=None, metrics_address=None
        ),
    )
    routers = manager.informer(ModelRouter.resource(), ns)
    pools = manager.informer(ModelPool.resource(), ns)
    isvcs = manager.informer(InferenceService.resource(), ns)
    slices = manager.informer(ENDPOINT_SLICES, ns)
    leases = manager.informer(LEASES, ns, label_selector=POOL_LABEL)
    notifier = Notifier()
    for informer in (routers, pools, isvcs, slices, leases):
        informer.add_handler(_Wake(notifier))
    view = CacheView(ns, settings.router, routers, pools, isvcs, slices)
    coordinator = LeaseCoordinator(
        manager.client, ns, identity, duration=settings.lease_duration_seconds
    )
    activator = Activator(view, coordinator, manager.client, ns, notifier=notifier)
    manager.add(activator)

    gate_on_preflight(
        manager,
        config,
        Component.ROUTER_PROXY,
        ns,
        cache_dir=settings.preflight_cache_dir,
    )
    context = ProxyContext(
        view.router, view.pool, view.isvc, manager.not_ready_reasons, settings.max_body_bytes
    )
    transport = AiohttpTransport() if settings.upstream_client == "aiohttp" else None
    http = httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT, trust_env=False, transport=transport)
    sock = bind(*settings.bind_address)
    manager.add(ProxyServer(build_app(context, activator, http), sock, http))
    log.info("router-proxy %s for router %s/%s", identity, ns, settings.router)
    return manager, activator


async def run_router_proxy(settings: RouterProxySettings) -> None:
    """Run until SIGTERM; raises ``PreflightDenied`` (inside a group) on a DENIED preflight."""
    configure_tracing("modelpool-router-proxy")
    manager, _ = build_router_proxy(settings)
    await manager.run_until_signal()
