"""The real router-proxy app on a real loopback socket, wired to fake caches and one member.

Everything a client's bytes pass through in production is here: uvicorn's httptools protocol,
the coalescing transport, the request limits (small timeouts, so a fuzzed request left incomplete
is cut in a fraction of a second), the app's validation and routing, the activator's fast path
and the aiohttp upstream client. Only the cluster is fake (:mod:`tests.unit.router_fakes`): every
model a request can name routes to a member that is ready, so no request is ever held, and every
5xx a client sees is the proxy's own failure or the fake member's doing (the test decides which).
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from controlplane.router.activator import Activator
from controlplane.router.app import ProxyContext, build_app
from controlplane.router.errors import request_refusal
from controlplane.router.lease import LeaseCoordinator
from controlplane.router.upstream import AiohttpUpstream, UpstreamTimeouts
from controlplane.runtime.coalescing import http_protocol
from controlplane.runtime.httpserver import bind, serve
from controlplane.runtime.requestlimits import RequestLimits, guarded_protocol
from tests.unit.router_fakes import FakeApi, FakeView

#: Models a request may name: a non-pooled backend and a pool's (resident, ready) member.
SOLO_MODEL = "solo"
POOLED_MODEL = "llama"
MODELS = (SOLO_MODEL, POOLED_MODEL)

#: Small, so that an incomplete fuzzed request or an idle connection costs the run little.
FUZZ_LIMITS = RequestLimits(
    max_header_count=100,
    max_head_bytes=16 * 1024,
    head_timeout=0.3,
    body_read_timeout=0.3,
    max_connections=256,
)
#: uvicorn's idle keep-alive, in seconds (a fuzzed request's answer may leave a connection open).
KEEP_ALIVE_SECONDS = 0.3


def _router() -> dict[str, Any]:
    return {
        "spec": {
            "backends": [
                {"name": SOLO_MODEL, "inferenceServiceRef": {"name": "solo-isvc"}},
                {"name": "gpu", "poolRef": {"name": "gpu-0"}},
            ],
            "defaultBackend": "gpu",
        }
    }


def fake_view(member_url: str) -> FakeView:
    """Caches in which both backends are served by ``member_url``, ready."""
    view = FakeView()
    view.pools["gpu-0"] = {
        "spec": {"members": [{"inferenceServiceRef": {"name": "a"}}], "default": "a"},
        "status": {"residentMember": "a"},
    }
    view.isvcs["a"] = {"spec": {"model": {"name": POOLED_MODEL}}, "status": {"phase": "Ready"}}
    view.urls["a"] = [member_url]
    view.urls["solo-isvc"] = [member_url]
    return view


@dataclass
class ProxyOptions:
    """What differs between the fuzzers' proxies."""

    max_body_bytes: int = 64 * 1024
    max_answer_bytes: int = 64 * 1024
    timeouts: UpstreamTimeouts = field(
        default_factory=lambda: UpstreamTimeouts(connect=1.0, read=5.0)
    )
    tracing: bool = True


def proxy_app(member_url: str, options: ProxyOptions) -> tuple[Any, AiohttpUpstream]:
    """The app and the upstream client it sends with (closed by whoever serves the app)."""
    view = fake_view(member_url)
    router = _router()
    activator = Activator(view, LeaseCoordinator(FakeApi(), "ns", "fuzz"), "ns")
    context = ProxyContext(
        lambda: router,
        view.pool,
        view.isvc,
        lambda: [],
        max_body_bytes=options.max_body_bytes,
        max_answer_bytes=options.max_answer_bytes,
        tracing=options.tracing,
        held_stream_keepalive=0,
    )
    upstream = AiohttpUpstream(options.timeouts)
    return build_app(context, activator, upstream), upstream


def limited_protocol() -> type[Any]:
    """The protocol the router-proxy serves with (process.py): coalescing, then limited."""
    base = http_protocol()
    assert not isinstance(base, str), "httptools is a dependency: the protocol must be ours"
    return guarded_protocol(base, FUZZ_LIMITS, request_refusal)


async def serve_proxy(member_url: str, options: ProxyOptions, ready: Callable[[int], None]) -> None:
    """Serve the proxy on a free loopback port (told to ``ready``) until cancelled."""
    app, upstream = proxy_app(member_url, options)
    sock: socket.socket = bind("127.0.0.1", 0)
    ready(sock.getsockname()[1])
    run: Callable[..., Awaitable[None]] = functools.partial(
        serve,
        app,
        [sock],
        http=limited_protocol(),
        access_log=False,
        proxy_headers=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    try:
        await run()
    finally:
        await upstream.aclose()
