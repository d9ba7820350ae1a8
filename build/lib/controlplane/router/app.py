"""The OpenAI-compatible HTTP surface of the router-proxy (starlette).

``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/embeddings`` are proxied: the body is
read up to ``max_body_bytes`` (413 beyond, before it is all in memory) and validated (a JSON object
with the field its path requires), its ``model`` resolved to a route, and only then is the
activator asked for a ready upstream: bad input never moves the slot. The upstream response is
streamed back as it comes (SSE included), the member's in-flight count held until the body is
closed. Every answer is one audit line and one ``modelpool_proxy_requests_total`` sample whose
``reason`` is the error code the proxy answered with, or ``upstream`` for the member's own answer.
``GET /v1/models`` lists the models, ``/healthz``, ``/readyz`` and ``/metrics`` serve probes and
Prometheus.

**Spans** (OpenTelemetry HTTP semantic conventions): each proxied request is a ``request``
span (kind SERVER) started from the request's W3C ``traceparent``, with
``http.request.method``, ``url.path``, ``http.response.status_code`` and the outcome reason
(``modelpool.reason``, the audit reason); under it the activator's ``hold`` (only when the
member was not ready) and the ``forward`` span (kind CLIENT: ``url.full``, the member, its
status), whose context is injected into the member's request so the member's spans join too.

Errors have one shape, ``{"error": {"message", "type", "code"}}`` with a string ``code``: the
proxy's own (:mod:`controlplane.router.errors`), an unknown path (404 ``not_found``) or method
(405 ``method_not_allowed`` with ``Allow``), and a member's non-streamed 4xx/5xx answer, whose
body is rewritten by :func:`~controlplane.router.errors.member_error_body`. 2xx bodies and event
streams pass untouched.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
from opentelemetry import propagate, trace
from prometheus_client import make_asgi_app
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from controlplane.router import metrics
from controlplane.router.activator import Activator
from controlplane.router.errors import (
    MEMBER_ERROR_MAX_BYTES,
    InvalidRequest,
    MethodNotAllowed,
    PathNotFound,
    ProxyError,
    ProxyNotReady,
    RequestTooLarge,
    UpstreamError,
    member_error_body,
)
from controlplane.router.routing import Lookup, resolve, routing_table, validate_body
from controlplane.router.routing import Route as BackendRoute
from controlplane.runtime.metrics import REGISTRY, FilteredRegistry
from controlplane.runtime.objects import ObjectView

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.router")

#: Upstream timeouts: a cold member is the activator's business, so connecting is quick, but a
#: long generation may pause between tokens.
UPSTREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=10.0)
PROXIED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
#: Request headers passed upstream (hop-by-hop and length headers are not).
FORWARDED_REQUEST_HEADERS = ("content-type", "accept", "authorization", "user-agent")
FORWARDED_RESPONSE_HEADERS = ("content-type", "content-encoding", "cache-control")
#: The largest request body accepted by default: far above any prompt a context window holds,
#: far below the proxy's memory limit.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


@dataclass
class ProxyContext:
    """What the app reads: the router object, lookups in the caches, readiness."""

    router: Callable[[], ObjectView | None]
    pools: Lookup
    isvcs: Lookup
    not_ready: Callable[[], list[str]]
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


#: Families the proxy does not expose: it runs no controller and no leader election, but shares
#: the framework's registry with what defines them.
UNUSED_METRIC_PREFIXES = ("controller_runtime_", "leader_election_")


class _MetricsEndpoint:
    """Prometheus' ASGI app as a class, so starlette passes the raw ASGI call through; serves
    the framework's registry without :data:`UNUSED_METRIC_PREFIXES`."""

    def __init__(self) -> None:
        view = FilteredRegistry(REGISTRY, UNUSED_METRIC_PREFIXES)
        self._app = make_asgi_app(registry=view)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def audit(model: str, status: int, reason: str, detail: str = "") -> None:
    """One line and one metric sample per answer, by outcome reason."""
    metrics.PROXY_REQUESTS.labels(model, str(status), reason).inc()
    log.info(
        "request answered: model=%s status=%d reason=%s%s",
        model,
        status,
        reason,
        f" ({detail})" if detail else "",
    )


def _error(err: ProxyError, model: str) -> Response:
    audit(model, err.status, err.code, err.message)
    span = trace.get_current_span()
    span.set_attribute("http.response.status_code", err.status)
    span.set_attribute("modelpool.reason", err.code)
    if err.status >= 500:
        span.set_status(trace.StatusCode.ERROR, err.message)
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers())


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 and 405 (and any other ``HTTPException``) in the proxy's shape."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    err: ProxyError
    if exc.status_code == 404:
        err = PathNotFound(f"no route for {path}")
    elif exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", "")
        err = MethodNotAllowed(f"{request.method} is not allowed on {path}", allow=allow)
    else:  # the routes raise no other; kept in shape all the same
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        body = {"error": {"message": exc.detail, "type": kind, "code": "http_error"}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers())


def _rewrites_error(upstream: httpx.Response) -> bool:
    """A member's error answer that is rewritten: 4xx/5xx, not an event stream, not too long."""
    if upstream.status_code < 400:
        return False
    if upstream.headers.get("content-type", "").startswith("text/event-stream"):
        return False
    length = upstream.headers.get("content-length")
    return length is None or not length.isdigit() or int(length) <= MEMBER_ERROR_MAX_BYTES


async def _read_error_body(upstream: httpx.Response) -> bytes:
    """The (decoded) body of a member's error, at most :data:`MEMBER_ERROR_MAX_BYTES`."""
    body = bytearray()
    async for chunk in upstream.aiter_bytes():
        body += chunk
        if len(body) >= MEMBER_ERROR_MAX_BYTES:
            break
    return bytes(body[:MEMBER_ERROR_MAX_BYTES])


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise InvalidRequest(f"Content-Length must be a number of bytes, got {declared!r}")
        if int(declared) > limit:
            raise RequestTooLarge(f"The request body ({declared} bytes) exceeds {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestTooLarge(f"The request body exceeds {limit} bytes")
    return bytes(body)


def build_app(context: ProxyContext, activator: Activator, http: httpx.AsyncClient) -> Starlette:
    async def proxy(request: Request) -> Response:
        parent = propagate.extract(dict(request.headers))
        attributes = {
            "http.request.method": request.method,
            "url.path": request.url.path,
            "http.route": request.url.path,
        }
        with tracer.start_as_current_span(
            "request", context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
        ):
            return await proxied(request)

    async def forward(
        request: Request, route: BackendRoute, url: str, raw: bytes
    ) -> httpx.Response:
        """The member's response (streamed), in a ``forward`` span whose context it carries."""
        full = url + request.url.path
        attributes = {
            "http.request.method": "POST",
            "url.full": full,
            "server.address": httpx.URL(url).host,
            "modelpool.member": route.member,
            "modelpool.pool": route.pool or "",
        }
        with tracer.start_as_current_span(
            "forward", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            headers = {k: v for k, v in request.headers.items() if k in FORWARDED_REQUEST_HEADERS}
            propagate.inject(headers)  # the member's request carries the forward span's context
            try:
                upstream = await http.send(
                    http.build_request("POST", full, content=raw, headers=headers), stream=True
                )
            except httpx.HTTPError as err:
                span.set_status(trace.StatusCode.ERROR, type(err).__name__)
                raise UpstreamError(f"{route.member} at {url}: {err}") from err
            span.set_attribute("http.response.status_code", upstream.status_code)
            if upstream.status_code >= 500:
                span.set_status(trace.StatusCode.ERROR, str(upstream.status_code))
            return upstream

    async def proxied(request: Request) -> Response:
        span = trace.get_current_span()
        model = ""
        try:
            if reasons := context.not_ready():
                raise ProxyNotReady("the proxy is not ready: " + "; ".join(reasons))
            raw = await read_body(request, context.max_body_bytes)
            body = validate_body(raw, request.url.path)
            router = context.router()
            if router is None:
                raise ProxyNotReady("the ModelRouter is not found")
            requested = body.get("model")
            route = resolve(requested, router, context.pools, context.isvcs)
            model = route.model
            span.set_attribute("modelpool.model", model)
            span.set_attribute("modelpool.member", route.member)
            span.set_attribute("modelpool.pool", route.pool or "")
            url = await activator.upstream(route)
            release = activator.inflight.track(route.member)
            try:
                upstream = await forward(request, route, url, raw)
            except UpstreamError:
                release()
                raise
        except ProxyError as err:
            return _error(err, model or "-")

        async def close() -> None:
            await upstream.aclose()
            release()

        async def passthrough() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await close()

        audit(model, upstream.status_code, "upstream")
        span.set_attribute("http.response.status_code", upstream.status_code)
        span.set_attribute("modelpool.reason", "upstream")
        if _rewrites_error(upstream):
            try:
                raw_error = await _read_error_body(upstream)
            finally:
                await close()
            return JSONResponse(
                member_error_body(raw_error, upstream.status_code),
                status_code=upstream.status_code,
                headers={k: v for k, v in upstream.headers.items() if k == "cache-control"},
            )
        return StreamingResponse(
            passthrough(),
            status_code=upstream.status_code,
            headers={k: v for k, v in upstream.headers.items() if k in FORWARDED_RESPONSE_HEADERS},
            background=BackgroundTask(close),
        )

    async def models(_: Request) -> Response:
        router = context.router()
        table = routing_table(router, context.pools, context.isvcs) if router else {}
        data = [{"id": name, "object": "model", "owned_by": "modelpool"} for name in sorted(table)]
        return JSONResponse({"object": "list", "data": data})

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        reasons = context.not_ready()
        if reasons:
            return JSONResponse({"ready": False, "reasons": reasons}, status_code=503)
        return PlainTextResponse("ok")

    routes = [Route(path, proxy, methods=["POST"]) for path in PROXIED_PATHS]
    routes += [
        Route("/v1/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", _MetricsEndpoint(), methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
