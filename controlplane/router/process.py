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
from collections.abc import Callable
from typing import Any

import anyio

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.api.v1alpha1.activation import POOL_LABEL
from controlplane.api.v1alpha1.membership import claiming_pool
from controlplane.preflight import Component
from controlplane.probes.health import HealthProbe
from controlplane.process import default_identity, gate_on_preflight
from controlplane.router.activator import Activator
from controlplane.router.apikeyfiles import ApiKeyFiles
from controlplane.router.apikeys import ApiKeys
from controlplane.router.app import ProxyContext, build_app
from controlplane.router.demand import DemandReporter, LocalDemand, PoolLeases, admission_ack
from controlplane.router.directready import DirectReady
from controlplane.router.drain import ProxyDrain
from controlplane.router.errors import request_refusal
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.routing import routed_pools
from controlplane.router.settings import UPSTREAM_CLIENTS, RouterProxySettings
from controlplane.router.upstream import AiohttpUpstream, Upstream, UpstreamTimeouts
from controlplane.router.wakeups import Notifier
from controlplane.runtime.cache import Store
from controlplane.runtime.coalescing import http_protocol
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.endpoints import member_urls, starting_urls
from controlplane.runtime.httpserver import StopRequest, bind, serve
from controlplane.runtime.informer import DeletedFinalStateUnknown, Informer
from controlplane.runtime.manager import Manager, ManagerOptions
from controlplane.runtime.objects import Object, ObjectView
from controlplane.runtime.requestlimits import RequestLimits, guarded_protocol
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


class _Count:
    """An informer handler that counts changes (the routing table's generation)."""

    def __init__(self) -> None:
        self.changes = 0

    def on_add(self, obj: Object, initial: bool) -> None:
        self.changes += 1

    def on_update(self, old: Object, new: Object) -> None:
        self.changes += 1

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        self.changes += 1


class CacheView:
    """Reads of the proxy's namespace from the informer caches.

    The router, pools and InferenceServices are handed out read-only (``ObjectView``) and
    decoded once per resourceVersion: every proxied request reads them (routing, the resident
    check), and a store read decodes a fresh copy each time.
    """

    def __init__(
        self,
        namespace: str,
        router: str,
        routers: Informer,
        pools: Informer,
        isvcs: Informer,
        slices: Informer,
        leases: Informer | None = None,
    ) -> None:
        self.namespace = namespace
        self.router_name = router
        self._routers, self._pools, self._isvcs, self._slices = routers, pools, isvcs, slices
        self._leases = leases
        self._lease_changes = _Count()
        if leases is not None:
            leases.add_handler(self._lease_changes)
        self._pool_leases: dict[str, tuple[int, list[ObjectView]]] = {}
        self._decoded: dict[tuple[int, str], tuple[str, ObjectView]] = {}
        self._changes = _Count()
        for informer in (routers, pools, isvcs):
            informer.add_handler(self._changes)
        self._slice_changes = _Count()
        slices.add_handler(self._slice_changes)
        self._urls: dict[tuple[str, str], tuple[int, list[str]]] = {}
        self._member_pools: dict[str, tuple[int, str | None]] = {}

    def generation(self) -> int:
        """Changes whenever the router, a pool or an InferenceService in the caches does."""
        return self._changes.changes

    def _read(self, informer: Informer, name: str) -> ObjectView | None:
        key = f"{self.namespace}/{name}"
        version = informer.store.resource_version(key)
        if version is None:
            return None
        memo = (id(informer), key)
        known = self._decoded.get(memo)
        if known is not None and known[0] == version:
            return known[1]
        obj = informer.store.get(key)
        if obj is None:
            return None
        self._decoded[memo] = (version, obj)
        return obj

    def router(self) -> ObjectView | None:
        return self._read(self._routers, self.router_name)

    def pool(self, name: str) -> ObjectView | None:
        return self._read(self._pools, name)

    def isvc(self, name: str) -> ObjectView | None:
        return self._read(self._isvcs, name)

    def member_pool(self, member: str) -> str | None:
        """The pool whose claim on ``member`` stands, None when no pool lists it
        (:func:`~controlplane.api.v1alpha1.membership.claiming_pool`), judged once per change of
        the caches: the demand reporter asks at every report."""
        generation = self._changes.changes
        known = self._member_pools.get(member)
        if known is not None and known[0] == generation:
            return known[1]
        holder = claiming_pool(self._pools.store.objects(), member)
        self._member_pools[member] = (generation, holder)
        return holder

    def pool_leases(self, pool: str) -> list[ObjectView]:
        """The Leases labelled with ``pool`` (its intent, every replica's demand report), decoded
        once per change of the Lease cache: the fast path asks on every request."""
        if self._leases is None:
            return []
        generation = self._lease_changes.changes
        known = self._pool_leases.get(pool)
        if known is not None and known[0] == generation:
            return known[1]
        found: list[ObjectView] = [
            lease
            for lease in self._leases.store.objects()
            if ((lease.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL) == pool
        ]
        self._pool_leases[pool] = (generation, found)
        return found

    def member_urls(self, member: str) -> list[str]:
        """By index, through the one function the pool controller uses too; kept until an
        EndpointSlice changes (the handler runs as the store changes, before any other read)."""
        return self._slice_urls(member_urls, member)

    def member_starting_urls(self, member: str) -> list[str]:
        """The member's listed pods that are neither ready nor terminating, kept the same way
        (a held request asks while its swap's driver has found the member up)."""
        return self._slice_urls(starting_urls, member)

    def _slice_urls(self, read: Callable[[Store, str, str], list[str]], member: str) -> list[str]:
        generation = self._slice_changes.changes
        key = (read.__name__, member)
        known = self._urls.get(key)
        if known is not None and known[0] == generation:
            return list(known[1])
        urls = read(self._slices.store, self.namespace, member)
        self._urls[key] = (generation, urls)
        return list(urls)


class ProxyServer:
    """The HTTP server as a manager runnable, on a socket bound before the manager starts;
    :meth:`drain` stops it gracefully with a bound of its caller's choosing."""

    needs_leader_election = False

    def __init__(
        self, app: Any, sock: socket.socket, upstream: Upstream, limits: RequestLimits | None = None
    ) -> None:
        self.app, self.sock, self.upstream = app, sock, upstream
        self.limits = limits or RequestLimits()
        self._stop = StopRequest()
        self._ended = anyio.Event()

    async def drain(self, timeout: float) -> None:
        """Stop listening now, relay what is in flight for up to ``timeout`` seconds (then cut
        it), and return once the server has stopped."""
        self._stop.request(timeout)
        await self._ended.wait()

    async def start(self) -> None:
        try:
            await self._serve()
        finally:
            self._ended.set()

    async def _serve(self) -> None:
        try:
            host, port = self.sock.getsockname()[:2]
            log.info("router-proxy listening on http://%s:%d", host, port)
            # Its own audit line, not uvicorn's access log; and it reads no client address, so
            # uvicorn's X-Forwarded-For rewriting would be per-request work for nothing.
            # Each answer's head and body leave in one write (controlplane.runtime.coalescing),
            # and how each request arrives is bounded (controlplane.runtime.requestlimits).
            protocol = http_protocol()
            if not isinstance(protocol, str):  # no httptools: uvicorn's own parser, unguarded
                protocol = guarded_protocol(protocol, self.limits, request_refusal)
            await serve(
                self.app,
                [self.sock],
                stop=self._stop,
                access_log=False,
                proxy_headers=False,
                http=protocol,
            )
        finally:
            await self.upstream.aclose()


def _upstream(client: str, timeouts: UpstreamTimeouts) -> Upstream:
    """aiohttp's pool, or (for comparison) httpx's own transport, imported only then: the proxy's
    data path does not go through httpx."""
    if client == "aiohttp":
        return AiohttpUpstream(timeouts)
    if client != "httpx":
        known = ", ".join(UPSTREAM_CLIENTS)
        raise ValueError(f"unknown upstream client {client!r}; known: {known}")
    import httpx

    from controlplane.router.upstream_httpx import HttpxUpstream

    return HttpxUpstream(httpx.AsyncHTTPTransport(trust_env=False), timeouts)


def _api_keys(manager: Manager, settings: RouterProxySettings) -> Callable[[], ApiKeys] | None:
    """The keys of ``--api-keys-dir``, re-read by a runnable of the manager; None without."""
    if settings.api_keys_dir is None:
        return None
    files = ApiKeyFiles(settings.api_keys_dir, settings.api_keys_reload_seconds)
    manager.add(files)
    return files.current


def _direct_ready(settings: RouterProxySettings) -> DirectReady | None:
    """The swap driver's own ``/health`` probe of its target, unless turned off (interval 0)."""
    if settings.direct_health_interval_seconds <= 0:
        return None
    probe = HealthProbe(timeout=settings.direct_health_timeout_seconds)
    return DirectReady(probe, settings.direct_health_interval_seconds)


def build_router_proxy(
    settings: RouterProxySettings, *, tracing: bool = True
) -> tuple[Manager, Activator, ProxyDrain]:
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
    for informer in (routers, pools, isvcs, slices):
        informer.add_handler(_Wake(notifier))
    view = CacheView(ns, settings.router, routers, pools, isvcs, slices, leases)
    coordinator = LeaseCoordinator(
        manager.client, ns, identity, duration=settings.lease_duration_seconds
    )
    pool_leases = PoolLeases(identity)
    leases.add_handler(pool_leases)
    local = LocalDemand()
    activator = Activator(
        view,
        coordinator,
        ns,
        notifier=notifier,
        local=local,
        leases=pool_leases,
        activity_window=settings.activity_window_seconds,
        max_held=settings.max_held_requests,
        scale_from_zero_budget=settings.scale_from_zero_budget_seconds,
        tracing=tracing,
        direct_ready=_direct_ready(settings),
    )
    # A Lease change (the pool's intent, any replica's demand report: one every few seconds
    # per replica) wakes the swap drivers only; a driver whose target it makes ready ends its
    # swap and wakes the held requests (Activator._backstop says why not all of them).
    leases.add_handler(_Wake(activator.progress))
    manager.add(activator)
    reporter = DemandReporter(
        manager.client,
        ns,
        identity,
        local,
        activator.inflight,
        interval=settings.demand_report_interval_seconds,
        duration=settings.demand_report_duration_seconds,
        activity_window=settings.activity_window_seconds,
        routed=lambda: routed_pools(view.router(), view.member_pool),
        acknowledgement=lambda pool: admission_ack(view.pool(pool), activator.inflight),
        wake=activator.progress.snapshot,
        on_live=notifier.notify,
    )
    # The fenced drain (docs/design.md): we admit to a pool only while the pool can see us.
    activator.admission.reported = reporter.live
    manager.add(reporter)

    gate_on_preflight(
        manager,
        config,
        Component.ROUTER_PROXY,
        ns,
        cache_dir=settings.preflight_cache_dir,
    )
    upstream = _upstream(settings.upstream_client, settings.upstream_timeouts)
    sock = bind(*settings.bind_address)
    limits = RequestLimits(
        settings.max_header_count,
        settings.max_head_bytes,
        settings.head_timeout_seconds,
        settings.body_read_timeout_seconds,
        settings.max_connections,
    )
    server = ProxyServer(None, sock, upstream, limits)
    drain = ProxyDrain(settings.stop_plan, activator.stop, server.drain)
    context = ProxyContext(
        view.router,
        view.pool,
        view.isvc,
        manager.not_ready_reasons,
        settings.max_body_bytes,
        max_json_depth=settings.max_json_depth,
        max_answer_bytes=settings.max_answer_bytes,
        generation=view.generation,
        audit_successes=settings.audit_successes,
        tracing=tracing,
        held_stream_keepalive=settings.held_stream_keepalive_seconds,
        api_keys=_api_keys(manager, settings),
        stopping=drain.not_ready,
        member_pool=view.member_pool,
    )
    server.app = build_app(context, activator, upstream)
    # Its drain returns before the manager cancels the rest: the DemandReporter outlives every
    # relay (controlplane/router/drain.py says why).
    manager.add(server)
    log.info("router-proxy %s for router %s/%s", identity, ns, settings.router)
    return manager, activator, drain


async def run_router_proxy(settings: RouterProxySettings) -> None:
    """Run until SIGTERM, then drain (:mod:`controlplane.router.drain`); raises
    ``PreflightDenied`` (inside a group) on a DENIED preflight."""
    tracing = configure_tracing("modelpool-router-proxy")
    manager, _, drain = build_router_proxy(settings, tracing=tracing)
    await manager.run_until_signal(before_shutdown=drain.run)
