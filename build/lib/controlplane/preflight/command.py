"""``controlplane preflight``: the preflight as a command, for init containers and humans.

Exit codes follow sysexits: 0 ALLOWED, 77 (EX_NOPERM) DENIED, 75 (EX_TEMPFAIL) INCONCLUSIVE,
and 78 (EX_CONFIG) when no API server configuration can be loaded at all.

The same three parts as every subcommand: ``add_arguments``, ``settings_from`` (the flags as a
frozen :class:`PreflightSettings`) and ``run``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
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


@dataclass(frozen=True)
class PreflightSettings:
    """What one preflight run is told (flags and environment)."""

    component: Component
    #: The component's own namespace; None outside a pod when no flag gave one.
    namespace: str | None
    kubeconfig: Path | None = None
    #: Verdict cache folder; None means :func:`default_cache_dir`.
    cache_dir: Path | None = None
    #: Seconds to keep retrying unanswered reviews.
    retry_budget: float = DEFAULT_POLICY.budget


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


def settings_from(args: argparse.Namespace) -> PreflightSettings:
    return PreflightSettings(
        component=Component(args.component),
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        cache_dir=args.cache_dir,
        retry_budget=args.retry_budget,
    )


def run(args: argparse.Namespace) -> int:
    """Run the preflight once; print the verdict; exit 0, 77 or 75."""
    settings = settings_from(args)
    if not settings.namespace:
        print("error: --namespace is required outside a pod", file=sys.stderr)
        return EXIT_CONFIG
    try:
        config = ClientConfig.load(settings.kubeconfig)
    except Exception as err:  # the kubernetes package raises many kinds of config errors
        print(f"error: no usable API server configuration: {err}", file=sys.stderr)
        return EXIT_CONFIG
    policy = BackoffPolicy(
        DEFAULT_POLICY.base_delay, DEFAULT_POLICY.max_delay, settings.retry_budget
    )
    preflight = Preflight(
        config,
        settings.component,
        settings.namespace,
        cache=VerdictCache(settings.cache_dir or default_cache_dir()),
        policy=policy,
    )
    verdict = anyio.run(preflight.run)
    for warning in verdict.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(verdict.message, file=sys.stdout if verdict.allowed else sys.stderr)
    return verdict.exit_code
