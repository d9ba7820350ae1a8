"""``controlplane preflight``: the preflight as a command, for init containers and humans.

Exit codes follow sysexits: 0 ALLOWED, 77 (EX_NOPERM) DENIED, 75 (EX_TEMPFAIL) INCONCLUSIVE,
and 78 (EX_CONFIG) when no API server configuration can be loaded at all.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import anyio

from controlplane.preflight.backoff import DEFAULT_POLICY, BackoffPolicy
from controlplane.preflight.cache import VerdictCache, default_cache_dir
from controlplane.preflight.permissions import Component
from controlplane.preflight.runner import Preflight
from controlplane.runtime.config import ClientConfig

EXIT_CONFIG = 78
#: Where a pod finds its own namespace.
SERVICE_ACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_namespace() -> str | None:
    """``$POD_NAMESPACE``, else the pod's ServiceAccount namespace, else None."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--component", required=True, choices=[c.value for c in Component], type=str
    )
    parser.add_argument(
        "--namespace",
        default=default_namespace(),
        help="the component's own namespace (default: $POD_NAMESPACE or the pod's namespace)",
    )
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"verdict cache folder (default: {default_cache_dir()}; in a pod, an emptyDir)",
    )
    parser.add_argument(
        "--retry-budget",
        type=float,
        default=DEFAULT_POLICY.budget,
        help="seconds to keep retrying unanswered reviews",
    )


def run(args: argparse.Namespace) -> int:
    """Run the preflight once; print the verdict; exit 0, 77 or 75."""
    if not args.namespace:
        print("error: --namespace is required outside a pod", file=sys.stderr)
        return EXIT_CONFIG
    try:
        config = ClientConfig.load(args.kubeconfig)
    except Exception as err:  # the kubernetes package raises many kinds of config errors
        print(f"error: no usable API server configuration: {err}", file=sys.stderr)
        return EXIT_CONFIG
    policy = BackoffPolicy(DEFAULT_POLICY.base_delay, DEFAULT_POLICY.max_delay, args.retry_budget)
    preflight = Preflight(
        config,
        Component(args.component),
        args.namespace,
        cache=VerdictCache(args.cache_dir or default_cache_dir()),
        policy=policy,
    )
    verdict = anyio.run(preflight.run)
    for warning in verdict.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(verdict.message, file=sys.stdout if verdict.allowed else sys.stderr)
    return verdict.exit_code
