"""``controlplane router-proxy``: flags, settings, and exit codes (77 when the preflight is DENIED,
78 when the API keys' folder cannot be read).

The same three parts as every subcommand: ``add_arguments``, ``settings_from``, ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import anyio

from controlplane.cliargs import (
    directory,
    first_error,
    host_port,
    positive_float,
    positive_int,
    seconds,
)
from controlplane.preflight import EXIT_DENIED, PreflightDenied
from controlplane.probes.health import DEFAULT_HEALTH_TIMEOUT_SECONDS
from controlplane.router.activator import DEFAULT_MAX_HELD_REQUESTS
from controlplane.router.apikeyfiles import DEFAULT_RELOAD_INTERVAL_SECONDS, ApiKeyDirError
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
from controlplane.router.settings import (
    DEFAULT_BIND_ADDRESS,
    DEFAULT_UPSTREAM_CLIENT,
    UPSTREAM_CLIENTS,
    RouterProxySettings,
)
from controlplane.router.standalone import DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS
from controlplane.router.stopplan import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_SHUTDOWN_DELAY_SECONDS,
    DEFAULT_SHUTDOWN_MARGIN_SECONDS,
    StopPlan,
)
from controlplane.router.upstream import DEFAULT_MAX_ANSWER_BYTES, UpstreamTimeouts
from controlplane.runtime.requestlimits import (
    DEFAULT_BODY_READ_TIMEOUT_SECONDS,
    DEFAULT_HEAD_TIMEOUT_SECONDS,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEAD_BYTES,
    DEFAULT_MAX_HEADER_COUNT,
)

#: The API keys' folder could not be read at start (sysexits' ``EX_CONFIG``, as the preflight's).
EXIT_CONFIG = 78


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--router", required=True, help="the ModelRouter this proxy serves")
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="the router's namespace ($POD_NAMESPACE)",
    )
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument("--identity", default="", help="Lease holder identity ($POD_NAME)")
    parser.add_argument(
        "--bind-address", type=host_port, default=DEFAULT_BIND_ADDRESS, help="host:port to serve on"
    )
    parser.add_argument("--preflight-cache-dir", type=Path, default=None)
    parser.add_argument(
        "--lease-duration-seconds",
        type=positive_int,
        default=DEFAULT_LEASE_DURATION_SECONDS,
        help="how long a pool Lease claim lasts unrenewed; renewed every third of it",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        help="larger request bodies are refused with 413",
    )
    parser.add_argument(
        "--max-header-count",
        type=positive_int,
        default=DEFAULT_MAX_HEADER_COUNT,
        help="a request head with more header lines is refused with 431 "
        f"(default {DEFAULT_MAX_HEADER_COUNT})",
    )
    parser.add_argument(
        "--max-head-bytes",
        type=positive_int,
        default=DEFAULT_MAX_HEAD_BYTES,
        help="a request head larger than this (target, header names and values) is refused with "
        f"431 (default {DEFAULT_MAX_HEAD_BYTES})",
    )
    parser.add_argument(
        "--head-timeout",
        type=positive_float,
        default=DEFAULT_HEAD_TIMEOUT_SECONDS,
        help="seconds: a request head not complete this long after the connection or its first "
        f"byte is refused with 408 and closed (default {DEFAULT_HEAD_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=positive_int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="connections this replica keeps open at once; the one beyond is answered 503 "
        f"proxy_connections_full with Retry-After and closed (default {DEFAULT_MAX_CONNECTIONS})",
    )
    parser.add_argument(
        "--body-read-timeout",
        type=positive_float,
        default=DEFAULT_BODY_READ_TIMEOUT_SECONDS,
        help="seconds: a request body with no byte for this long before it is complete is "
        f"refused with 408 and closed (default {DEFAULT_BODY_READ_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--max-held-requests",
        type=positive_int,
        default=DEFAULT_MAX_HELD_REQUESTS,
        help="requests this replica holds at once for members not ready; beyond, 503 "
        f"proxy_hold_full with Retry-After (default {DEFAULT_MAX_HELD_REQUESTS})",
    )
    parser.add_argument(
        "--scale-from-zero-budget",
        type=positive_float,
        default=DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS,
        help="seconds a request for an InferenceService scaled to zero (spec.idleAfter) is held "
        "while it comes back; beyond, 503 with Retry-After "
        f"(default {DEFAULT_SCALE_FROM_ZERO_BUDGET_SECONDS:g})",
    )
    parser.add_argument(
        "--max-json-depth",
        type=positive_int,
        default=DEFAULT_MAX_JSON_DEPTH,
        help="JSON bodies nested deeper (arrays and objects) are refused with 400 "
        f"(default {DEFAULT_MAX_JSON_DEPTH})",
    )
    parser.add_argument(
        "--max-answer-bytes",
        type=positive_int,
        default=DEFAULT_MAX_ANSWER_BYTES,
        help="a member answer longer than this is cut: 502 upstream_answer_too_large when its "
        "length says so up front, else a last error event (event streams) or a closed "
        f"connection (default {DEFAULT_MAX_ANSWER_BYTES})",
    )
    parser.add_argument(
        "--upstream-connect-timeout",
        type=positive_float,
        default=UpstreamTimeouts.connect,
        help="seconds: a TCP connect to a member that takes longer is 502 upstream_error "
        f"(default {UpstreamTimeouts.connect:g})",
    )
    parser.add_argument(
        "--upstream-read-timeout",
        type=positive_float,
        default=UpstreamTimeouts.read,
        help="seconds: a member that sends nothing for this long is 504 upstream_timeout before "
        "its answer's head, a last error event or a closed connection after it (default "
        f"{UpstreamTimeouts.read:g})",
    )
    parser.add_argument(
        "--upstream-client",
        choices=UPSTREAM_CLIENTS,
        default=DEFAULT_UPSTREAM_CLIENT,
        help="what forwards requests to members (aiohttp is the faster; httpx for comparison)",
    )
    parser.add_argument(
        "--demand-report-interval",
        type=positive_float,
        default=DEFAULT_REPORT_INTERVAL_SECONDS,
        help="seconds: this replica's demand report (held requests per member, for the pool's "
        f"scheduler) is written at most this often (default {DEFAULT_REPORT_INTERVAL_SECONDS:g})",
    )
    parser.add_argument(
        "--demand-report-duration",
        type=positive_int,
        default=DEFAULT_REPORT_DURATION_SECONDS,
        help="seconds a demand report counts unrenewed; renewed every third of it while there is "
        f"demand (default {DEFAULT_REPORT_DURATION_SECONDS})",
    )
    parser.add_argument(
        "--activity-window",
        type=positive_float,
        default=DEFAULT_ACTIVITY_WINDOW_SECONDS,
        help="seconds after its last request ends that a member still has demand (a client "
        f"looping back to back) (default {DEFAULT_ACTIVITY_WINDOW_SECONDS:g})",
    )
    parser.add_argument(
        "--held-stream-keepalive",
        type=seconds,
        default=DEFAULT_HELD_STREAM_KEEPALIVE_SECONDS,
        help="seconds: a streamed request held for a pool member is answered 200 at once and kept "
        "open with an SSE comment this often, saying when its member is expected; its errors "
        "then come as a last data event, not a 503 (default "
        f"{DEFAULT_HELD_STREAM_KEEPALIVE_SECONDS:g}: off)",
    )
    parser.add_argument(
        "--api-keys-dir",
        type=directory,
        default=None,
        help="a folder of accepted API keys, one per file (a Secret's volume): every /v1/ request "
        "must then carry one as 'Authorization: Bearer KEY', else 401 invalid_api_key "
        "(default: none, no key asked for)",
    )
    parser.add_argument(
        "--api-keys-reload-interval",
        type=positive_float,
        default=DEFAULT_RELOAD_INTERVAL_SECONDS,
        help="seconds between two reads of --api-keys-dir: keys added or removed there are "
        f"accepted or refused without a restart (default {DEFAULT_RELOAD_INTERVAL_SECONDS:g})",
    )
    parser.add_argument(
        "--direct-health-interval",
        type=seconds,
        default=DEFAULT_DIRECT_HEALTH_INTERVAL_SECONDS,
        help="seconds: how often a swap's driver asks the pod the pool granted /health itself "
        "and forwards its held requests at the first 200, before the readiness probe, the "
        f"EndpointSlice and the pool's status say so (default "
        f"{DEFAULT_DIRECT_HEALTH_INTERVAL_SECONDS:g}; 0: off, wait for them)",
    )
    parser.add_argument(
        "--direct-health-timeout",
        type=positive_float,
        default=DEFAULT_HEALTH_TIMEOUT_SECONDS,
        help="seconds one such /health probe may take; beyond, it counts as not yet "
        f"(default {DEFAULT_HEALTH_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--termination-grace-period",
        type=seconds,
        default=DEFAULT_GRACE_SECONDS,
        help="seconds: the pod's terminationGracePeriodSeconds (the operator passes the "
        "ModelRouter's spec.proxy.terminationGracePeriodSeconds); on SIGTERM the streams in "
        "flight are relayed to their end within it, less --shutdown-margin "
        f"(default {DEFAULT_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "--shutdown-delay",
        type=seconds,
        default=DEFAULT_SHUTDOWN_DELAY_SECONDS,
        help="seconds a stopping proxy keeps accepting after SIGTERM, not Ready, while the "
        "endpoints drop it (what a preStop sleep would do) "
        f"(default {DEFAULT_SHUTDOWN_DELAY_SECONDS:g})",
    )
    parser.add_argument(
        "--shutdown-margin",
        type=seconds,
        default=DEFAULT_SHUTDOWN_MARGIN_SECONDS,
        help="seconds of the grace period kept for the exit after the last relay is cut, so the "
        f"process exits before SIGKILL (default {DEFAULT_SHUTDOWN_MARGIN_SECONDS:g})",
    )
    parser.add_argument(
        "--audit-successes",
        action="store_true",
        help="log each 2xx answer's audit line at INFO (default DEBUG; errors are always INFO)",
    )


def settings_from(args: argparse.Namespace) -> RouterProxySettings:
    return RouterProxySettings(
        router=args.router,
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        identity=args.identity,
        bind_address=args.bind_address,
        preflight_cache_dir=args.preflight_cache_dir,
        lease_duration_seconds=args.lease_duration_seconds,
        max_body_bytes=args.max_body_bytes,
        max_json_depth=args.max_json_depth,
        max_held_requests=args.max_held_requests,
        scale_from_zero_budget_seconds=args.scale_from_zero_budget,
        max_header_count=args.max_header_count,
        max_head_bytes=args.max_head_bytes,
        head_timeout_seconds=args.head_timeout,
        body_read_timeout_seconds=args.body_read_timeout,
        max_connections=args.max_connections,
        upstream_client=args.upstream_client,
        max_answer_bytes=args.max_answer_bytes,
        upstream_timeouts=UpstreamTimeouts(
            connect=args.upstream_connect_timeout, read=args.upstream_read_timeout
        ),
        audit_successes=args.audit_successes,
        demand_report_interval_seconds=args.demand_report_interval,
        demand_report_duration_seconds=args.demand_report_duration,
        activity_window_seconds=args.activity_window,
        held_stream_keepalive_seconds=args.held_stream_keepalive,
        api_keys_dir=args.api_keys_dir,
        api_keys_reload_seconds=args.api_keys_reload_interval,
        direct_health_interval_seconds=args.direct_health_interval,
        direct_health_timeout_seconds=args.direct_health_timeout,
        stop_plan=StopPlan(
            grace=args.termination_grace_period,
            delay=args.shutdown_delay,
            margin=args.shutdown_margin,
        ),
    )


def event_loop_options() -> dict[str, bool]:
    """uvloop when it can be imported: the proxy's per-request cost is mostly event-loop and
    socket work (bench/README.md, "Data path"). uvicorn picks httptools by itself the same way."""
    try:
        importlib.import_module("uvloop")
    except ImportError:
        return {"use_uvloop": False}
    return {"use_uvloop": True}


def run(args: argparse.Namespace) -> int:
    """Run the OpenAI-compatible router-proxy with its pool activator."""
    from controlplane.router.process import run_router_proxy

    code = 0
    try:
        anyio.run(run_router_proxy, settings_from(args), backend_options=event_loop_options())
    except* PreflightDenied as denied:
        print(f"error: {first_error(denied)}", file=sys.stderr)
        code = EXIT_DENIED
    except* ApiKeyDirError as unreadable:
        print(f"error: {first_error(unreadable)}", file=sys.stderr)
        code = EXIT_CONFIG
    return code
