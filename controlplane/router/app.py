"""The OpenAI-compatible HTTP surface of the router-proxy (a thin ASGI app, starlette beside it).

``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/embeddings`` are proxied: the body is
read up to ``max_body_bytes`` (413 beyond, before it is all in memory) and validated (a JSON object
with the field its path requires), its ``model`` resolved to a route, and only then is the
activator asked for a ready upstream: bad input never moves the slot. A small complete answer (a
``content-length`` of at most :data:`WHOLE_ANSWER_MAX_BYTES`, not an event stream) is read whole
and sent as one response; anything else is streamed back as it comes (SSE included). The member's
in-flight count is held until its body is closed. Every answer is one
``modelpool_proxy_requests_total`` sample whose ``reason`` is the error code the proxy answered
with, or ``upstream`` for the member's own answer, and one audit line: at INFO for errors and
non-2xx answers, at DEBUG for 2xx ones unless ``audit_successes`` (``--audit-successes``) asks
for them at INFO. ``GET /v1/models`` lists the models, ``/healthz``, ``/readyz`` and ``/metrics``
serve probes and Prometheus.

**API keys** (``ProxyContext.api_keys``, :mod:`controlplane.router.apikeys`): when the router
asks for one, every ``/v1/`` request is checked first, before its body is read, a span is started
or anything is held; a refused one is answered 401 ``invalid_api_key`` and counted, and the
accepted key is not passed on to the member. Without keys the check is one attribute test.

*Why the proxied paths bypass starlette:* the proxy's requests/s is CPU-bound on one core, and
starlette's router, request object and per-response task group cost about a third of it
(bench/README.md, "Data path"). Those paths are one ASGI function that hands the method, URL,
headers and body bytes to the upstream client (:mod:`controlplane.router.upstream`: no client
layers, no request or response objects of a general HTTP client); starlette keeps the other
routes and the 404/405 answers. The routing table is rebuilt only when the caches it is read from
changed (``ProxyContext.generation``).

*Why one module of this size:* validation, routing, dispatch and the three shapes of an answer
(whole, streamed, an error) share one request's state and its span; what stands apart (the held
stream's keep-alive, the error bodies, the upstream client) has a module of its own.

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

import contextlib
import json
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from prometheus_client import make_asgi_app
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from controlplane.router import metrics
from controlplane.router.activator import Activator
from controlplane.router.apikeys import ApiKeys, Verdict, check, refusal
from controlplane.router.clientgone import unless_client_leaves
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
    upstream_error,
)
from controlplane.router.heldstream import (
    DEFAULT_HELD_STREAM_KEEPALIVE_SECONDS,
    error_event,
    serve_held_stream,
)
from controlplane.router.routing import (
    DEFAULT_MAX_JSON_DEPTH,
    Lookup,
    MemberPool,
    RoutingTable,
    no_pool,
    routing_table,
    validate_body,
)
from controlplane.router.routing import Route as BackendRoute
from controlplane.router.upstream import (
    DEFAULT_MAX_ANSWER_BYTES,
    Upstream,
    UpstreamAnswer,
    UpstreamFailure,
    bounded_chunks,
    check_declared,
    whole_events,
)
from controlplane.router.wakeups import Notifier
from controlplane.runtime.metrics import REGISTRY, FilteredRegistry
from controlplane.runtime.objects import ObjectView

log = logging.getLogger(__name__)
tracer = trace.get_tracer("controlplane.router")

PROXIED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
#: What an API key guards when the router asks for one: the OpenAI API (``/v1/models`` included);
#: ``/healthz``, ``/readyz`` and ``/metrics`` stay open to probes and scrapers.
API_PATH_PREFIX = "/v1/"
#: Request headers passed upstream (hop-by-hop and length headers are not).
FORWARDED_REQUEST_HEADERS = ("content-type", "accept", "authorization", "user-agent")
#: Without tracing the proxy is no hop of the trace: the client's context goes on as it came.
UNTRACED_REQUEST_HEADERS = (*FORWARDED_REQUEST_HEADERS, "traceparent", "tracestate")
FORWARDED_RESPONSE_HEADERS = ("content-type", "content-encoding", "cache-control")
#: The largest request body accepted by default: far above any prompt a context window holds,
#: far below the proxy's memory limit.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: How often a request that never reached a stopping pool member is dispatched again, and how
#: long each retry waits for the caches to change first.
UNSENT_RETRIES = 2
UNSENT_RETRY_WAIT_SECONDS = 1.0
#: A member's answer of at most this declared length (not an event stream) is read whole and sent
#: as one response; longer or unsized answers are streamed.
WHOLE_ANSWER_MAX_BYTES = 1024 * 1024


@dataclass
class ProxyContext:
    """What the app reads: the router object, lookups in the caches, readiness."""

    router: Callable[[], ObjectView | None]
    pools: Lookup
    isvcs: Lookup
    not_ready: Callable[[], list[str]]
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: JSON nested deeper is refused with 400 (``--max-json-depth``).
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    #: A member answer longer than this is cut: a 502 when it says so up front, else the end
    #: of its stream (``--max-answer-bytes``).
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    #: A number that changes whenever the router, a pool or an InferenceService in the caches
    #: does; None rebuilds the routing table on every request.
    generation: Callable[[], int] | None = None
    #: Log the audit line of 2xx answers at INFO (default DEBUG; the metric counts them anyway).
    audit_successes: bool = False
    #: Whether spans are exported (:func:`~controlplane.runtime.tracing.configure_tracing`);
    #: without, the proxied path makes no ``request`` or ``forward`` span at all (no-op spans
    #: and their context switches cost about a tenth of a request's CPU).
    tracing: bool = True
    #: Seconds between the comments that keep a held streamed request open; 0: no keep-alive
    #: (``--held-stream-keepalive``, :mod:`~controlplane.router.heldstream`).
    held_stream_keepalive: float = DEFAULT_HELD_STREAM_KEEPALIVE_SECONDS
    #: The API keys accepted now (``--api-keys-dir``, :mod:`~controlplane.router.apikeyfiles`);
    #: None: no key is asked for.
    api_keys: Callable[[], ApiKeys] | None = None
    #: Why ``/readyz`` fails while the replica stops (:mod:`~controlplane.router.drain`), None
    #: while it serves. Only the probe reads it: a stopping replica still relays and forwards.
    stopping: Callable[[], str | None] = lambda: None
    #: The pool whose claim on an InferenceService stands: an ``inferenceServiceRef`` backend
    #: naming a pool member is served through that pool (:mod:`~controlplane.router.routing`).
    member_pool: MemberPool = no_pool


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


def audit(
    model: str, status: int, reason: str, detail: str = "", *, successes_at_info: bool = False
) -> None:
    """One metric sample and one line per answer, by outcome reason: the line of a 2xx answer
    at DEBUG unless ``successes_at_info`` (at thousands of requests a second it is the
    counter's job; errors and non-2xx answers stay at INFO)."""
    metrics.PROXY_REQUESTS.labels(model, str(status), reason).inc()
    level = logging.INFO if successes_at_info or not 200 <= status < 300 else logging.DEBUG
    if log.isEnabledFor(level):
        log.log(
            level,
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


def _rewrites_error(status: int, headers: Mapping[str, str]) -> bool:
    """A member's error answer that is rewritten: 4xx/5xx, not an event stream, not too long."""
    if status < 400:
        return False
    if headers.get("content-type", "").startswith("text/event-stream"):
        return False
    length = headers.get("content-length")
    return length is None or not length.isdigit() or int(length) <= MEMBER_ERROR_MAX_BYTES


#: zlib's ``wbits`` by content-coding: the codings a member's error body is decoded from (the
#: rewritten answer carries no ``content-encoding``); any other is read as it came.
_ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 0}


def _decoded(body: bytes, encoding: str) -> bytes:
    """``body`` decoded from its ``content-encoding``, at most :data:`MEMBER_ERROR_MAX_BYTES`;
    undecodable or unknown encodings give it back unchanged."""
    wbits = _ZLIB_WBITS.get(encoding.strip().lower())
    if wbits is None:
        return body
    decoder = zlib.decompressobj(wbits if wbits else zlib.MAX_WBITS)  # deflate: zlib-wrapped
    try:
        return decoder.decompress(body, MEMBER_ERROR_MAX_BYTES)
    except zlib.error:
        if wbits:
            return body
        try:  # "deflate" is sometimes sent raw, without zlib's wrapper
            return zlib.decompressobj(-zlib.MAX_WBITS).decompress(body, MEMBER_ERROR_MAX_BYTES)
        except zlib.error:
            return body


async def _read_error_body(upstream: UpstreamAnswer) -> bytes:
    """The (decoded) body of a member's error, at most :data:`MEMBER_ERROR_MAX_BYTES`."""
    raw = await upstream.read(MEMBER_ERROR_MAX_BYTES)
    encoding = upstream.headers.get("content-encoding")
    return _decoded(raw, encoding) if encoding else raw


class ClientGone(Exception):
    """The client disconnected before it was answered (while its body was read, or while its
    request was held): nobody to answer."""


class AnswerCut(Exception):
    """A streamed answer that is not an event stream failed after its head was sent: the only
    honest signal left is to close the connection without the body's end, so the client sees an
    incomplete answer rather than a short one that looks whole. Raised out of the app, it is how
    uvicorn closes a response mid-body; :class:`_AnswerCutFilter` keeps it out of uvicorn's error
    log, since the proxy logged and counted it already."""


class _AnswerCutFilter(logging.Filter):
    """Drops uvicorn's "Exception in ASGI application" record for an :class:`AnswerCut`."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, AnswerCut)


_ANSWER_CUT_FILTER = _AnswerCutFilter()


async def read_body(headers: Mapping[str, str], receive: Receive, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise InvalidRequest(f"Content-Length must be a number of bytes, got {declared!r}")
        if int(declared) > limit:
            raise RequestTooLarge(f"The request body ({declared} bytes) exceeds {limit} bytes")
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        body += chunk
        if len(body) > limit:
            raise RequestTooLarge(f"The request body exceeds {limit} bytes")
        if not message.get("more_body", False):
            return body


def _whole(headers: Mapping[str, str]) -> bool:
    """A member's answer sent as one response: sized, small, not an event stream."""
    length = headers.get("content-length")
    if length is None or not length.isdigit() or int(length) > WHOLE_ANSWER_MAX_BYTES:
        return False
    return not headers.get("content-type", "").startswith("text/event-stream")


def _response_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [
        (name.encode(), value.encode("latin-1"))
        for name in FORWARDED_RESPONSE_HEADERS
        if (value := headers.get(name)) is not None
    ]


async def _send_whole(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _closing_when_stopping(send: Send, stopping: Callable[[], str | None]) -> Send:
    """``send`` that, once the replica stops (:mod:`~controlplane.router.drain`), marks every
    answer's head ``Connection: close``. The server closes a kept-alive connection after its
    answer when it stops; without the header a client may already have sent its next request on
    it and gets no answer at all (a held request answered 503 ``proxy_stopping`` was the common
    case: its client retries at once, on the same connection). With it the client opens a new
    connection, which the Service gives a replica that serves."""

    async def send_closing(message: Message) -> None:
        if message["type"] == "http.response.start" and stopping() is not None:
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send(message)

    return send_closing


class ProxyApp:
    """The router-proxy's ASGI app: the proxied paths handled here, the rest by starlette."""

    def __init__(self, context: ProxyContext, activator: Activator, upstream: Upstream) -> None:
        self.context = context
        self.activator = activator
        self.upstream = upstream
        self.routing = RoutingTable(
            context.router, context.pools, context.isvcs, context.member_pool
        )
        self._generation: int | None = None
        self.others = _starlette_app(context)
        self._api_keys = context.api_keys
        # The client's key is the proxy's to check, not the member's to see (or log).
        drop = ("authorization",) if context.api_keys is not None else ()
        self._forwarded = tuple(h for h in FORWARDED_REQUEST_HEADERS if h not in drop)
        self._untraced = tuple(h for h in UNTRACED_REQUEST_HEADERS if h not in drop)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http":
            send = _closing_when_stopping(send, self.context.stopping)
        if (
            self._api_keys is not None
            and path.startswith(API_PATH_PREFIX)
            and scope["type"] == "http"
        ):
            verdict = check(self._api_keys(), scope["headers"])
            if verdict is not Verdict.ACCEPTED:
                # Before the body is read, before any span or hold: a request without a key
                # never moves the slot, nor fills a trace backend.
                await _refuse(verdict, send)
                return
        if scope["type"] != "http" or path not in PROXIED_PATHS:
            await self.others(scope, receive, send)
        elif scope["method"] != "POST":
            err = MethodNotAllowed(f"{scope['method']} is not allowed on {path}", allow="POST")
            await _send_whole(send, err.status, *_json(err.body(), err.headers()))
        else:
            await self.proxy(scope, receive, send)

    async def proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One proxied request in its ``request`` span, from the client's trace context."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        if not self.context.tracing:
            with contextlib.suppress(ClientGone):
                await self._proxied(trace.INVALID_SPAN, path, headers, receive, send, scope)
            return
        attributes = {"http.request.method": "POST", "url.path": path, "http.route": path}
        with tracer.start_as_current_span(
            "request",
            context=propagate.extract(headers),
            kind=trace.SpanKind.SERVER,
            attributes=attributes,
        ) as span:
            try:
                await self._proxied(span, path, headers, receive, send, scope)
            except ClientGone:
                span.set_attribute("modelpool.reason", "client_gone")

    def _route(self, model: str | None) -> BackendRoute:
        generation = self.context.generation
        if generation is None:
            self.routing.invalidate()
        elif (current := generation()) != self._generation:
            self.routing.invalidate()
            self._generation = current
        return self.routing.resolve(model)

    async def _proxied(
        self,
        span: trace.Span,
        path: str,
        headers: dict[str, str],
        receive: Receive,
        send: Send,
        scope: Scope,
    ) -> None:
        context = self.context
        model = ""
        try:
            if reasons := context.not_ready():
                raise ProxyNotReady("the proxy is not ready: " + "; ".join(reasons))
            raw = await read_body(headers, receive, context.max_body_bytes)
            body = validate_body(raw, path, context.max_json_depth)
            route = self._route(body.get("model"))
            model = route.model
            span.set_attribute("modelpool.model", model)
            span.set_attribute("modelpool.member", route.member)
            span.set_attribute("modelpool.pool", route.pool or "")
            if self._keeps_alive(route, body):
                held, _ = await unless_client_leaves(
                    receive,
                    send,
                    lambda client: serve_held_stream(
                        client.send,
                        lambda: self._dispatch(path, headers, route, raw, self._hold),
                        member=route.member,
                        interval=context.held_stream_keepalive,
                        expected_in=lambda: self.activator.expected_in(
                            str(route.pool), route.member
                        ),
                        max_answer_bytes=context.max_answer_bytes,
                    ),
                )
                if held is None:
                    raise ClientGone
                status, reason = held
                span.set_attribute("modelpool.reason", reason)
                audit(
                    model, status, reason, "held stream", successes_at_info=context.audit_successes
                )
                return
            watched = partial(self._watched_hold, receive, send)
            upstream, url, release = await self._dispatch(path, headers, route, raw, watched)
        except ProxyError as err:
            await _error(err, model or "-")(scope, receive, send)
            return

        outcome = ["client_gone"]  # a streamed answer's reason, until its stream ends
        closed = False

        async def close() -> None:
            """Release the member's connection and in-flight count, and (a streamed answer's)
            audit, once: the stream's end and the response's background task both call it."""
            nonlocal closed
            if closed:
                return
            closed = True
            try:  # not shielded (heldstream.close_dispatched is): this runs on every request
                await upstream.aclose()
            finally:
                release()  # even if cancelled: a count never released keeps its member "active"
            if streaming:
                audit(model, status, outcome[0], successes_at_info=context.audit_successes)

        streaming = False
        status, answer_headers = upstream.status, upstream.headers
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("modelpool.reason", "upstream")
        rewrite = _rewrites_error(status, answer_headers)
        whole = rewrite or _whole(answer_headers)
        try:
            check_declared(upstream, context.max_answer_bytes)  # an error's too, whatever its size
            if whole:
                answer = await (_read_error_body(upstream) if rewrite else upstream.read())
        except UpstreamFailure as err:  # the member failed before we answered: one error
            await close()
            failed = upstream_error(route.member, url, err.kind, str(err))
            await _error(failed, model)(scope, receive, send)
            return
        if whole:
            await close()
            audit(model, status, "upstream", successes_at_info=context.audit_successes)
            if rewrite:
                kept = {k: v for k, v in answer_headers.items() if k == "cache-control"}
                encoded, answer = _json(member_error_body(answer, status), kept)
                await _send_whole(send, status, encoded, answer)
            else:
                await _send_whole(send, status, _response_headers(answer_headers), answer)
            return

        streaming = True
        events = answer_headers.get("content-type", "").startswith("text/event-stream")

        async def passthrough() -> AsyncIterator[bytes]:
            """The member's body as it comes; a failure after the head ends an event stream
            with one error event, and cuts any other body short (:class:`AnswerCut`)."""
            chunks = bounded_chunks(upstream, context.max_answer_bytes)
            try:
                async for chunk in whole_events(chunks) if events else chunks:
                    yield chunk
                outcome[0] = "upstream"
            except UpstreamFailure as err:
                failed = upstream_error(route.member, url, err.kind, str(err))
                outcome[0] = failed.code
                span.set_attribute("modelpool.reason", failed.code)
                log.info("%s: %s", "stream ended with an error" if events else "answer cut", failed)
                if not events:
                    raise AnswerCut(failed.message) from err
                yield error_event(failed.body())
            finally:
                await close()

        streamed = StreamingResponse(
            passthrough(),
            status_code=status,
            headers={k: v for k, v in answer_headers.items() if k in FORWARDED_RESPONSE_HEADERS},
            background=BackgroundTask(close),
        )
        await streamed(scope, receive, send)  # watches for the client leaving mid-stream

    def _keeps_alive(self, route: BackendRoute, body: Mapping[str, Any]) -> bool:
        """A streamed request for a pool member that is not ready, with keep-alive on: it is
        answered at once and kept open while held (:mod:`~controlplane.router.heldstream`)."""
        return (
            self.context.held_stream_keepalive > 0
            and route.pool is not None
            and body.get("stream") is True
            and self.activator.ready_url(route.pool, route.member) is None
        )

    async def _hold(self, route: BackendRoute) -> str:
        """The activator's hold for ``route``'s pool member, or its InferenceService scaled to
        zero (a held stream, watched whole)."""
        return await self.activator.hold(route.pool, route.member)

    async def _watched_hold(self, receive: Receive, send: Send, route: BackendRoute) -> str:
        """The activator's hold, ended when the client leaves (raises :class:`ClientGone`): a
        held request counts in this replica's demand report, and one nobody waits for must not
        (clientgone.py). Only a hold is watched: the listener costs a task, which the fast path
        (a ready member) does not pay."""
        url, _ = await unless_client_leaves(receive, send, lambda _: self._hold(route))
        if url is None:
            raise ClientGone
        return url

    async def _dispatch(
        self,
        path: str,
        headers: dict[str, str],
        route: BackendRoute,
        raw: bytes,
        hold: Callable[[BackendRoute], Awaitable[str]],
    ) -> tuple[UpstreamAnswer, str, Callable[[], None]]:
        """The member's answer, the URL that gave it, and the in-flight release to call when
        its body is closed; ``hold`` waits for a pool member that is not ready.

        A pool member whose connection failed before any answer began, with what the upstream
        client calls :class:`~controlplane.router.upstream.ConnectFailed` (refused; or a
        kept-alive connection the member had closed as it stopped, found closed when the request
        was written) or :class:`~controlplane.router.upstream.ConnectTimedOut` (a full backlog,
        or this loop stalled past the bound as thousands of held requests were released at
        once: nothing was written either way) is stopping or swamped, and its endpoint
        is leaving the caches: the stand-in, like a kubelet, stops the process right after the
        endpoint update, and the proxy's watch may see that update a few ms later. The request
        goes back to the activator (which may hold it for the swap under way), after the caches'
        next change if they still name the same address, at most :data:`UNSENT_RETRIES` times.
        Such a request was not taken by the member, except in the rare case of a connection lost
        while it waited for the answer's head, where a completion is computed twice: no state
        changes either way.
        """
        attempts = 0
        while True:
            url = self.activator.ready_upstream(route) or await hold(route)
            release = self.activator.inflight.track(route.member)
            if self.activator.closed_to(route):  # counted first, then checked: the fence
                release()
                continue  # held again (the hold answers no address the pool drains)
            try:
                return await self._forward(path, headers, route, url, raw), url, release
            except UpstreamError as err:
                release()
                cause = err.__cause__
                unsent = isinstance(cause, UpstreamFailure) and cause.unsent
                if route.pool is None or not unsent or attempts >= UNSENT_RETRIES:
                    raise
            except BaseException:  # cancelled (its client left) or unforeseen: it counts no more
                release()
                raise
            attempts += 1
            log.info("%s at %s took no request (stopping?); asking again", route.member, url)
            change = self.activator.notifier.snapshot()
            if self.activator.ready_url(route.pool, route.member) == url:  # caches not caught up
                await Notifier.wait(change, UNSENT_RETRY_WAIT_SECONDS)

    async def _forward(
        self, path: str, headers: dict[str, str], route: BackendRoute, url: str, raw: bytes
    ) -> UpstreamAnswer:
        """The member's answer (its head), in a ``forward`` span whose context it carries;
        without tracing, no span, and the client's own trace context is passed on as it came."""
        full = url + path
        if not self.context.tracing:
            sent = {k: v for k, v in headers.items() if k in self._untraced}
            return await self._send(route, url, full, sent, raw)
        attributes = {
            "http.request.method": "POST",
            "url.full": full,
            "server.address": urlsplit(url).hostname or "",
            "modelpool.member": route.member,
            "modelpool.pool": route.pool or "",
        }
        with tracer.start_as_current_span(
            "forward", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            sent = {k: v for k, v in headers.items() if k in self._forwarded}
            propagate.inject(sent)  # the member's request carries the forward span's context
            try:
                upstream = await self._send(route, url, full, sent, raw)
            except UpstreamError as err:
                span.set_status(trace.StatusCode.ERROR, type(err.__cause__).__name__)
                raise
            span.set_attribute("http.response.status_code", upstream.status)
            if upstream.status >= 500:
                span.set_status(trace.StatusCode.ERROR, str(upstream.status))
            return upstream

    async def _send(
        self, route: BackendRoute, url: str, full: str, headers: dict[str, str], raw: bytes
    ) -> UpstreamAnswer:
        try:
            return await self.upstream.request("POST", full, headers, raw)
        except UpstreamFailure as err:
            raise upstream_error(route.member, url, err.kind, str(err)) from err


async def _refuse(verdict: Verdict, send: Send) -> None:
    """The 401 for a request without an accepted key, audited (its model is not read)."""
    err = refusal(verdict)
    audit("-", err.status, err.code, err.message)
    await _send_whole(send, err.status, *_json(err.body(), err.headers()))


def _json(body: Any, headers: Mapping[str, str]) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Headers and bytes of a JSON answer, for :func:`_send_whole`."""
    encoded = [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()]
    encoded.append((b"content-type", b"application/json"))
    return encoded, json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def build_app(context: ProxyContext, activator: Activator, upstream: Upstream) -> ProxyApp:
    """The proxy app; ``upstream`` carries requests to members (closed by its owner)."""
    logging.getLogger("uvicorn.error").addFilter(_ANSWER_CUT_FILTER)  # once: a set, by identity
    return ProxyApp(context, activator, upstream)


def _starlette_app(context: ProxyContext) -> Starlette:
    """The routes that are not proxied: models, probes, metrics, and 404/405 in the proxy's
    error shape."""

    async def models(_: Request) -> Response:
        router = context.router()
        table = routing_table(router, context.pools, context.isvcs) if router else {}
        data = [{"id": name, "object": "model", "owned_by": "modelpool"} for name in sorted(table)]
        return JSONResponse({"object": "list", "data": data})

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        reasons = context.not_ready()
        if (stopping := context.stopping()) is not None:
            reasons = [*reasons, stopping]
        if reasons:
            return JSONResponse({"ready": False, "reasons": reasons}, status_code=503)
        return PlainTextResponse("ok")

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", _MetricsEndpoint(), methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    # No 307 from "/healthz/" to "/healthz": starlette builds its location from the client's own
    # Host header, and a path the proxy does not serve is a 404 in its shape, as any other.
    app.router.redirect_slashes = False
    return app
