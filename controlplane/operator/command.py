"""``controlplane operator``: flags, settings, and exit codes (77 when the preflight is DENIED).

Every subcommand's ``command.py`` has the same three parts: ``add_arguments(parser)``,
``settings_from(args)`` (the parsed flags as the component's frozen settings dataclass) and
``run(args) -> int``, which imports the process itself only when it runs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import anyio

from controlplane.api.v1alpha1.podtemplate import ENV_NAME_PATTERN
from controlplane.cliargs import first_error, host_port_or_off, positive_float
from controlplane.controllers.inferenceservice.network import (
    DEFAULT_OPERATOR_POD_LABELS,
    MemberNetworkPolicy,
    parse_labels,
)
from controlplane.controllers.inferenceservice.weights import DEFAULT_MODEL_CACHE_PATH
from controlplane.controllers.modelcache.desired import (
    DEFAULT_INTERVAL as DEFAULT_MODEL_CACHE_COLLECT_INTERVAL,
)
from controlplane.controllers.modelcache.desired import (
    DEFAULT_MAX_BYTES as DEFAULT_MODEL_CACHE_MAX_BYTES,
)
from controlplane.controllers.modelcache.desired import (
    DEFAULT_NAMESPACE as DEFAULT_MODEL_CACHE_COLLECT_NAMESPACE,
)
from controlplane.controllers.modelcache.desired import (
    DEFAULT_RETENTION_SECONDS as DEFAULT_MODEL_CACHE_RETENTION,
)
from controlplane.controllers.modelpool.slotruntime import (
    DEFAULT_POLL_SECONDS as DEFAULT_SLOT_SERVER_POLL_SECONDS,
)
from controlplane.controllers.modelpool.slotruntime import (
    DEFAULT_WAIT_SECONDS as DEFAULT_SLOT_SERVER_WAIT_SECONDS,
)
from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.modelcache.command import byte_count, seconds
from controlplane.operator.settings import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_PROBE_ADDRESS,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    LEADER_ELECTION_ID,
    OperatorSettings,
)
from controlplane.preflight import EXIT_DENIED, PreflightDenied


def env_pair(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (an environment variable for the fetchers)."""
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(ENV_NAME_PATTERN, name):
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with a valid variable name: {text!r}"
        )
    return name, value


def true_or_false(text: str) -> bool:
    """``true`` or ``false`` (what a Helm value renders to)."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def pod_labels(text: str) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE[,KEY=VALUE...]``: labels a pod carries."""
    try:
        return parse_labels(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def namespace_name(text: str) -> str:
    """A namespace's name (an RFC 1123 label)."""
    try:
        MemberNetworkPolicy(allow_namespaces=(text,))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", OPERATOR_NAMESPACE),
        help="the operator's own namespace: its Lease and preflight scope ($POD_NAMESPACE)",
    )
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument("--identity", default="", help="leader-election identity ($POD_NAME)")
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--leader-election-id", default=LEADER_ELECTION_ID)
    parser.add_argument(
        "--leader-elect-lease-duration",
        type=positive_float,
        default=DEFAULT_LEASE_DURATION,
        metavar="SECONDS",
        help="how long a standby waits on an unrenewed Lease before taking it "
        f"(default {DEFAULT_LEASE_DURATION:g})",
    )
    parser.add_argument(
        "--leader-elect-renew-deadline",
        type=positive_float,
        default=DEFAULT_RENEW_DEADLINE,
        metavar="SECONDS",
        help="how long the leader keeps trying to renew before it stops leading; its writes are "
        f"fenced past it (default {DEFAULT_RENEW_DEADLINE:g}, below the lease duration)",
    )
    parser.add_argument(
        "--leader-elect-retry-period",
        type=positive_float,
        default=DEFAULT_RETRY_PERIOD,
        metavar="SECONDS",
        help="how often the leader renews and a standby retries "
        f"(default {DEFAULT_RETRY_PERIOD:g})",
    )
    parser.add_argument(
        "--health-probe-bind-address", type=host_port_or_off, default=DEFAULT_PROBE_ADDRESS
    )
    parser.add_argument(
        "--metrics-bind-address", type=host_port_or_off, default=DEFAULT_METRICS_ADDRESS
    )
    parser.add_argument("--preflight-cache-dir", type=Path, default=None)
    parser.add_argument(
        "--proxy-image",
        default=os.environ.get("MODELPOOL_PROXY_IMAGE", ""),
        help="image of a proxy whose ModelRouter names none ($MODELPOOL_PROXY_IMAGE; "
        "default: the operator's own, read from its Pod)",
    )
    parser.add_argument(
        "--fetch-env",
        type=env_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment every weights fetcher gets, before the InferenceService's own "
        "spec.pod.env (e.g. HF_ENDPOINT of a Hub mirror, HTTPS_PROXY); repeatable",
    )
    parser.add_argument(
        "--member-network-policies",
        type=true_or_false,
        default=True,
        metavar="true|false",
        help="write a NetworkPolicy per InferenceService admitting only router-proxies, the "
        "operator and --member-network-policy-allow-namespace on the member's port; false "
        "deletes the ones written (default true; docs/network.md)",
    )
    parser.add_argument(
        "--member-network-policy-operator-labels",
        type=pod_labels,
        default=DEFAULT_OPERATOR_POD_LABELS,
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="labels of the operator's own pods, which members admit from --namespace (default "
        + ",".join(f"{k}={v}" for k, v in DEFAULT_OPERATOR_POD_LABELS)
        + ")",
    )
    parser.add_argument(
        "--member-network-policy-allow-namespace",
        type=namespace_name,
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="a namespace whose every pod may reach members' ports, e.g. a metrics scraper's; "
        "repeatable (default none)",
    )
    parser.add_argument(
        "--model-cache-path",
        default=DEFAULT_MODEL_CACHE_PATH,
        help="node folder (a hostPath) that downloaded weights are cached in, shared by every "
        f"member on the node (default {DEFAULT_MODEL_CACHE_PATH})",
    )
    parser.add_argument(
        "--model-cache-collect-interval",
        type=seconds,
        default=DEFAULT_MODEL_CACHE_COLLECT_INTERVAL,
        metavar="SECONDS",
        help="every how many seconds each Ready node's model cache is collected by a Job (also "
        "at once, and again after the retention, when a file stops being named); 0 turns the "
        f"collection off (default {DEFAULT_MODEL_CACHE_COLLECT_INTERVAL:g})",
    )
    parser.add_argument(
        "--model-cache-retention",
        type=seconds,
        default=DEFAULT_MODEL_CACHE_RETENTION,
        metavar="SECONDS",
        help="how long a cached file no InferenceService names may stay unused on a node "
        f"before the collection removes it (default {DEFAULT_MODEL_CACHE_RETENTION:g})",
    )
    parser.add_argument(
        "--model-cache-max-bytes",
        type=byte_count,
        default=DEFAULT_MODEL_CACHE_MAX_BYTES,
        metavar="N",
        help="each node cache's size cap: over it, unnamed files go least recently used first "
        "(named files never; default 0: no cap)",
    )
    parser.add_argument(
        "--model-cache-collect-namespace",
        type=namespace_name,
        default=DEFAULT_MODEL_CACHE_COLLECT_NAMESPACE,
        metavar="NAMESPACE",
        help="where the collection Jobs run; it must admit privileged pods (hostPath), which "
        "the operator's own namespace does not "
        f"(default {DEFAULT_MODEL_CACHE_COLLECT_NAMESPACE}, created by the manifests and chart)",
    )
    parser.add_argument(
        "--slot-server-poll",
        type=positive_float,
        default=DEFAULT_SLOT_SERVER_POLL_SECONDS,
        help="how often a pool with a slot server reads its /models while a load or an unload "
        f"is under way (it has no watch; default {DEFAULT_SLOT_SERVER_POLL_SECONDS:g}s)",
    )
    parser.add_argument(
        "--slot-server-wait",
        type=positive_float,
        default=DEFAULT_SLOT_SERVER_WAIT_SECONDS,
        help="how long a pool that sent its slot server a load or an unload reads /models every "
        "10 ms for its effect before it falls back to --slot-server-poll "
        f"(default {DEFAULT_SLOT_SERVER_WAIT_SECONDS:g}s)",
    )
    parser.add_argument(
        "--fetch-image",
        default=os.environ.get("MODELPOOL_FETCH_IMAGE", ""),
        help="image that downloads weights (controlplane fetch-model; $MODELPOOL_FETCH_IMAGE; "
        "default: the operator's own, read from its Pod)",
    )


def settings_from(args: argparse.Namespace) -> OperatorSettings:
    return OperatorSettings(
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        identity=args.identity,
        leader_elect=args.leader_elect,
        leader_election_id=args.leader_election_id,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        probe_address=args.health_probe_bind_address,
        metrics_address=args.metrics_bind_address,
        preflight_cache_dir=args.preflight_cache_dir,
        proxy_image=args.proxy_image,
        pod_name=os.environ.get("POD_NAME", ""),
        model_cache_path=args.model_cache_path,
        model_cache_collect_interval=args.model_cache_collect_interval,
        model_cache_retention=args.model_cache_retention,
        model_cache_max_bytes=args.model_cache_max_bytes,
        model_cache_collect_namespace=args.model_cache_collect_namespace,
        fetch_image=args.fetch_image,
        slot_server_poll_seconds=args.slot_server_poll,
        slot_server_wait_seconds=args.slot_server_wait,
        fetch_env=tuple(args.fetch_env),
        member_network_policies=args.member_network_policies,
        member_network_policy_operator_labels=args.member_network_policy_operator_labels,
        member_network_policy_allow_namespaces=tuple(args.member_network_policy_allow_namespace),
    )


def run(args: argparse.Namespace) -> int:
    """Run the operator: a leader-elected manager gated by the RBAC preflight."""
    from controlplane.operator.process import run_operator
    from controlplane.runtime.leaderelection import LeadershipLost

    code = 0
    try:
        anyio.run(run_operator, settings_from(args))
    except* PreflightDenied as denied:
        print(f"error: {first_error(denied)}", file=sys.stderr)
        code = EXIT_DENIED
    except* LeadershipLost as lost:
        print(f"error: {first_error(lost)}", file=sys.stderr)
        code = 1
    return code
