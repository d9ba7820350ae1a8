"""Every tunable of the router-proxy process in one frozen tree, each default a named constant.

:mod:`controlplane.router.command` builds a :class:`RouterProxySettings` from the flags; tests
build one directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from controlplane.probes.health import DEFAULT_HEALTH_TIMEOUT_SECONDS
from controlplane.router.activator import DEFAULT_MAX_HELD_REQUESTS
from controlplane.router.apikeyfiles import DEFAULT_RELOAD_INTERVAL_SECONDS
from controlplane.router.app import DEFAULT_MAX_BODY_BYTES
from controlplane.router.demand import (
    DEFAULT_ACTIVITY_WINDOW_SECONDS,
    DEFAULT_REPORT_DURATION_SECONDS,
    DEFAULT_REPORT_INTERVAL_SECONDS,
)
from controlplane.router.directready import DEFAULT_DIRECT_HEALTH_INTERVAL_SECONDS
from controlplane.router.heldstream import DEFAULT_HELD_STREAM_KEEPALIVE_SECONDS
from controlplane.router.lease import DEFAULT_LEASE_DURATION_SECONDS
from controlplane.router.routing import DEFAULT_MAX_JSON_DEPTH
from controlplane.router.standalone import DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS
from controlplane.router.stopplan import StopPlan
from controlplane.router.upstream import DEFAULT_MAX_ANSWER_BYTES, UpstreamTimeouts
from controlplane.runtime.requestlimits import (
    DEFAULT_BODY_READ_TIMEOUT_SECONDS,
    DEFAULT_HEAD_TIMEOUT_SECONDS,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEAD_BYTES,
    DEFAULT_MAX_HEADER_COUNT,
)

DEFAULT_BIND_ADDRESS = ("0.0.0.0", 8000)
#: The upstream clients the proxy can forward with (bench/README.md, "Data path", chose aiohttp).
UPSTREAM_CLIENTS = ("aiohttp", "httpx")
DEFAULT_UPSTREAM_CLIENT = "aiohttp"


@dataclass(frozen=True)
class RouterProxySettings:
    """Everything the proxy is told at start (flags and environment)."""

    #: The ModelRouter this proxy serves.
    router: str
    #: The router's namespace (``$POD_NAMESPACE``): the proxy's caches and preflight scope.
    namespace: str
    kubeconfig: Path | None = None
    #: Pool Lease holder identity; empty means :func:`controlplane.process.default_identity`.
    identity: str = ""
    bind_address: tuple[str, int] = DEFAULT_BIND_ADDRESS
    #: Where the preflight keeps its verdict (in a pod, an emptyDir).
    preflight_cache_dir: Path | None = None
    #: How long a pool Lease claim lasts unrenewed (renewed every third of it).
    lease_duration_seconds: int = DEFAULT_LEASE_DURATION_SECONDS
    #: Larger request bodies are refused with 413.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Requests held at once on this replica; beyond, 503 ``proxy_hold_full``.
    max_held_requests: int = DEFAULT_MAX_HELD_REQUESTS
    #: How long a request for an InferenceService scaled to zero (``spec.idleAfter``) is held.
    scale_from_zero_budget_seconds: float = DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS
    #: JSON bodies nested deeper are refused with 400.
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    #: A request head with more header lines, or more bytes, is refused with 431.
    max_header_count: int = DEFAULT_MAX_HEADER_COUNT
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    #: A request head not complete this long after its first byte is refused with 408.
    head_timeout_seconds: float = DEFAULT_HEAD_TIMEOUT_SECONDS
    #: Connections open at once; the one beyond is answered 503 and closed.
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    #: A request body with no byte for this long before it is complete is refused with 408.
    body_read_timeout_seconds: float = DEFAULT_BODY_READ_TIMEOUT_SECONDS
    #: What carries requests to members: aiohttp's pool (:mod:`controlplane.router.upstream`), or
    #: httpx's own transport, httpcore's pool (for comparison).
    upstream_client: str = DEFAULT_UPSTREAM_CLIENT
    #: A member answer longer than this is cut (502 when declared, else the stream's end).
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    #: The connect to a member, and each read of its answer (504 or the stream's end beyond).
    upstream_timeouts: UpstreamTimeouts = field(default_factory=UpstreamTimeouts)
    #: Log every 2xx answer's audit line at INFO (by default at DEBUG; errors are always INFO).
    audit_successes: bool = False
    #: The demand report (docs/modelpool.md, "Scheduling the slot") is written at most this often.
    demand_report_interval_seconds: float = DEFAULT_REPORT_INTERVAL_SECONDS
    #: A demand report not renewed for this long stops counting (a dead replica's demand).
    demand_report_duration_seconds: int = DEFAULT_REPORT_DURATION_SECONDS
    #: A member whose last request ended less than this long ago still has demand.
    activity_window_seconds: float = DEFAULT_ACTIVITY_WINDOW_SECONDS
    #: Seconds between the comments that keep a held streamed request open; 0: off
    #: (:mod:`controlplane.router.heldstream`).
    held_stream_keepalive_seconds: float = DEFAULT_HELD_STREAM_KEEPALIVE_SECONDS
    #: How often a swap's driver asks its granted target's starting pod ``/health`` itself, to
    #: forward at the first 200 rather than after the readiness probe; 0: off
    #: (:mod:`controlplane.router.directready`).
    direct_health_interval_seconds: float = DEFAULT_DIRECT_HEALTH_INTERVAL_SECONDS
    #: How long one such probe may take.
    direct_health_timeout_seconds: float = DEFAULT_HEALTH_TIMEOUT_SECONDS
    #: Where the accepted API keys are, one per file (the Secret's volume); None: no key asked.
    api_keys_dir: Path | None = None
    #: Seconds between two reads of ``api_keys_dir`` (rotation without a restart).
    api_keys_reload_seconds: float = DEFAULT_RELOAD_INTERVAL_SECONDS
    #: The stop's timeline (:mod:`controlplane.router.stopplan`): the pod's grace period, how
    #: long to keep accepting after SIGTERM, and the margin kept for the exit.
    stop_plan: StopPlan = field(default_factory=StopPlan)
