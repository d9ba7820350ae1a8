"""Controllers: level-triggered reconcilers fed by informers through a rate-limited work queue.

One user-facing method, as in controller-runtime: ``reconcile(request) -> Result``. A request is
only a key (``namespace/name``); the reconciler reads current state from the cache, so events
that pile up while a key waits collapse into one reconcile.

Outcomes: a returned :class:`Result` with ``requeue_after`` re-adds the key after that delay (and
forgets its backoff); ``requeue`` re-adds it rate-limited; an exception is logged, counted and
re-added rate-limited (the worker survives); a :class:`TerminalError` is logged and counted (in
``controller_runtime_reconcile_errors_total`` too, as in controller-runtime) but not retried,
since retrying cannot help; a write refused because the namespace is being deleted
(:class:`~controlplane.runtime.errors.NamespaceTerminating`) ends the reconcile quietly, as a
success; success forgets the key's backoff.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from opentelemetry import context as otel_context
from opentelemetry import trace

from controlplane.runtime import controller_metrics as metrics
from controlplane.runtime.cache import Object
from controlplane.runtime.errors import NamespaceTerminating
from controlplane.runtime.informer import DeletedFinalStateUnknown, Informer
from controlplane.runtime.metrics import workqueue_metrics_provider
from controlplane.runtime.resources import Resource
from controlplane.runtime.workqueue import QueueShutDown, RateLimitingQueue
from controlplane.runtime.workqueue.ratelimiters import RateLimiter

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.runtime.controller")

#: How long a draining controller waits for in-flight reconciles on graceful shutdown.
DRAIN_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """What to reconcile: a namespace (``""`` for cluster-scoped objects) and a name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def for_object(cls, obj: Mapping[str, Any]) -> Request:
        meta = obj["metadata"]
        # Queued requests outlive the decoded object: share one copy of each namespace string.
        return cls(sys.intern(meta.get("namespace") or ""), meta["name"])


@dataclass(frozen=True, slots=True)
class Result:
    """What to do with the key after a successful reconcile."""

    requeue: bool = False
    requeue_after: float | None = None


class Reconciler(Protocol):
    async def reconcile(self, request: Request) -> Result: ...


class TraceParentSource(Protocol):
    """Optional, on a reconciler: the trace a reconcile of ``request`` belongs to.

    A reconcile is a root span unless the work it does was asked for by someone who is being
    traced: the pool controller acts on an activator's intent, which carries the trace context
    of the request that wrote it. The controller asks before it starts the ``reconcile`` span,
    so the span is a child in that trace (its ``modelpool``-specific spans then nest under it).
    None: a root span, as before.
    """

    def trace_parent(self, request: Request) -> otel_context.Context | None: ...


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix (bad spec, missing prerequisite by design)."""


# -- event predicates --------------------------------------------------------------------------


class Predicate(Protocol):
    """Filters events before they reach the queue (all of a watch's predicates must agree)."""

    def create(self, obj: Object) -> bool: ...

    def update(self, old: Object, new: Object) -> bool: ...

    def delete(self, obj: Object) -> bool: ...


class GenerationChanged:
    """Pass updates only when ``metadata.generation`` moved (spec changes, not status writes)."""

    def create(self, obj: Object) -> bool:
        return True

    def update(self, old: Object, new: Object) -> bool:
        return bool(old["metadata"].get("generation") != new["metadata"].get("generation"))

    def delete(self, obj: Object) -> bool:
        return True


# -- mapping events to requests ----------------------------------------------------------------

MapFunc = Callable[[Object], Iterable[Request]]


def enqueue_object(obj: Object) -> Iterable[Request]:
    """The object itself (``for_``)."""
    return (Request.for_object(obj),)


def enqueue_controller_owner(owner_api_group: str, owner_kind: str) -> MapFunc:
    """The object's controlling owner of the given kind (``owns``)."""

    def owners(obj: Object) -> Iterable[Request]:
        meta = obj["metadata"]
        for ref in meta.get("ownerReferences") or ():
            group = ref.get("apiVersion", "").rpartition("/")[0]
            if ref.get("controller") and ref.get("kind") == owner_kind and group == owner_api_group:
                return (Request(meta.get("namespace") or "", ref["name"]),)
        return ()

    return owners


class _EnqueueHandler:
    """Turns an informer's events into queue adds through a map function and predicates."""

    def __init__(
        self,
        queue: RateLimitingQueue[Request],
        map_fn: MapFunc,
        predicates: Sequence[Predicate],
    ) -> None:
        self._queue = queue
        self._map = map_fn
        self._predicates = predicates

    def _add_all(self, *objects: Object) -> None:
        for obj in objects:
            for request in self._map(obj):
                self._queue.add(request)

    def on_add(self, obj: Object, initial: bool) -> None:
        if all(p.create(obj) for p in self._predicates):
            self._add_all(obj)

    def on_update(self, old: Object, new: Object) -> None:
        if all(p.update(old, new) for p in self._predicates):
            self._add_all(old, new)  # an owner change must reach both owners

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        final = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        if all(p.delete(final) for p in self._predicates):
            self._add_all(final)


# -- the controller ----------------------------------------------------------------------------


class Controller:
    """Runs ``max_concurrent_reconciles`` workers over one queue; a key is never in two at once."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter[Request] | None = None,
    ) -> None:
        if max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")
        self.name = name
        self.reconciler = reconciler
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.queue: RateLimitingQueue[Request] = RateLimitingQueue(
            rate_limiter, name=name, metrics_provider=workqueue_metrics_provider()
        )
        self._informers: list[Informer] = []
        self._primary: Resource | None = None
        self.needs_leader_election = True

    def for_(self, informer: Informer, *predicates: Predicate) -> Controller:
        """The primary resource: each of its events reconciles the object itself."""
        self._primary = informer.resource
        return self.watches(informer, enqueue_object, *predicates)

    def owns(self, informer: Informer, *predicates: Predicate) -> Controller:
        """A resource this controller creates: its events reconcile the controlling owner."""
        if self._primary is None:
            raise ValueError(f"controller {self.name}: call for_() before owns()")
        mapper = enqueue_controller_owner(self._primary.group, self._primary.kind)
        return self.watches(informer, mapper, *predicates)

    def watches(self, informer: Informer, map_fn: MapFunc, *predicates: Predicate) -> Controller:
        """Any resource, mapped to the requests it should trigger by ``map_fn``."""
        informer.add_handler(_EnqueueHandler(self.queue, map_fn, predicates))
        self._informers.append(informer)
        return self

    async def start(self) -> None:
        """Wait for the watched caches, then process the queue until cancelled or drained."""
        for informer in self._informers:
            await informer.wait_for_sync()
        metrics.MAX_CONCURRENT_RECONCILES.labels(self.name).set(self.max_concurrent_reconciles)
        log.info("controller %s: starting %d workers", self.name, self.max_concurrent_reconciles)
        try:
            async with anyio.create_task_group() as group:
                for _ in range(self.max_concurrent_reconciles):
                    group.start_soon(self._worker)
        finally:
            self.queue.shut_down()

    async def drain(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Graceful stop: take no new keys, let in-flight reconciles finish (bounded)."""
        with anyio.move_on_after(timeout):
            await self.queue.shut_down_with_drain()
        self.queue.shut_down()

    async def _worker(self) -> None:
        while True:
            try:
                request = await self.queue.get()
            except QueueShutDown:
                return
            metrics.ACTIVE_WORKERS.labels(self.name).inc()
            try:
                await self._reconcile(request)
            finally:
                metrics.ACTIVE_WORKERS.labels(self.name).dec()
                self.queue.done(request)

    async def _reconcile(self, request: Request) -> None:
        started = time.perf_counter()
        source = getattr(self.reconciler, "trace_parent", None)
        parent = source(request) if source is not None else None
        attributes = {
            "controller": self.name,
            "key": str(request),
            "k8s.namespace.name": request.namespace,
        }
        with tracer.start_as_current_span(
            "reconcile", context=parent, attributes=attributes
        ) as span:
            try:
                result = await self.reconciler.reconcile(request)
            except NamespaceTerminating as err:
                # The request's namespace is being deleted: its objects go with it, so this is
                # neither a failure nor worth a retry (as controller-runtime users check the cause).
                outcome = "success"
                log.debug("controller %s: %s: namespace terminating: %s", self.name, request, err)
                self.queue.forget(request)
            except TerminalError as err:
                outcome = "error"
                # As controller-runtime: the error counter counts both kinds, this one terminal.
                metrics.RECONCILE_ERRORS.labels(self.name).inc()
                metrics.TERMINAL_RECONCILE_ERRORS.labels(self.name).inc()
                span.record_exception(err)
                log.error("controller %s: %s: terminal error: %s", self.name, request, err)
                self.queue.forget(request)
            except Exception as err:
                outcome = "error"
                metrics.RECONCILE_ERRORS.labels(self.name).inc()
                log.exception("controller %s: %s: reconcile failed; will retry", self.name, request)
                span.record_exception(err)
                self.queue.add_rate_limited(request)
            else:
                if result.requeue_after is not None and result.requeue_after > 0:
                    outcome = "requeue_after"
                    self.queue.forget(request)
                    self.queue.add_after(request, result.requeue_after)
                elif result.requeue:
                    outcome = "requeue"
                    self.queue.add_rate_limited(request)
                else:
                    outcome = "success"
                    self.queue.forget(request)
            span.set_attribute("result", outcome)
        metrics.RECONCILE_TOTAL.labels(self.name, outcome).inc()
        metrics.RECONCILE_TIME.labels(self.name).observe(time.perf_counter() - started)
