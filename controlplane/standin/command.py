"""``controlplane sim-node``: the node stand-in's command line, kept light for the CLI to import.

The stand-in itself (:mod:`controlplane.standin.controller`) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import anyio

from controlplane.cliargs import positive_float, seconds
from controlplane.standin.settings import (
    DEFAULT_LOAD_SECONDS,
    DEFAULT_RESYNC_SECONDS,
    DEFAULT_STARTING_POLL_SECONDS,
    DEFAULT_TOKEN_SECONDS,
    NodeSettings,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument(
        "--namespace", default=None, help="play the node in this namespace only (default: all)"
    )
    parser.add_argument(
        "--load-seconds",
        type=seconds,
        default=DEFAULT_LOAD_SECONDS,
        help="each simulator's model load time (/health answers 503 meanwhile)",
    )
    parser.add_argument("--token-seconds", type=seconds, default=DEFAULT_TOKEN_SECONDS)
    parser.add_argument(
        "--resync-seconds",
        type=seconds,
        default=DEFAULT_RESYNC_SECONDS,
        help="how often a running simulator is re-checked (the kubelet's sync loop)",
    )
    parser.add_argument(
        "--starting-poll-seconds",
        type=positive_float,
        default=DEFAULT_STARTING_POLL_SECONDS,
        help="how often a starting server's /health is asked until it answers 200 and its pod is "
        "marked Ready (a kubelet's readiness periodSeconds, at least 1 s on a real node; default "
        f"{DEFAULT_STARTING_POLL_SECONDS:g})",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="container logs, the node's disk for hostPath volumes (hostpath/) and the claims' "
        "folders (pvc/NAMESPACE/CLAIM) (default: a temporary folder)",
    )
    parser.add_argument(
        "--router-proxies",
        action="store_true",
        help="also play router-proxy Deployments: router-proxy processes as their ServiceAccount, "
        "one local address per router Service",
    )
    parser.add_argument(
        "--llama-server",
        type=_executable,
        default=None,
        metavar="PATH",
        help="run this real llama-server (not a simulator) for members whose --model is a GGUF "
        "file on this machine (make llama-server builds one)",
    )
    parser.add_argument(
        "--keep-pods-on-exit",
        action="store_true",
        help="leave the pods in place when stopping (by default they go with their simulators)",
    )


def _executable(text: str) -> Path:
    path = Path(text)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{text} is not an executable file")
    return path


def settings_from(args: argparse.Namespace) -> NodeSettings:
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="modelpool-sim-node-"))
    return NodeSettings(
        namespace=args.namespace,
        load_seconds=args.load_seconds,
        token_seconds=args.token_seconds,
        resync_seconds=args.resync_seconds,
        starting_poll_seconds=args.starting_poll_seconds,
        log_dir=log_dir,
        router_proxies=args.router_proxies,
        llama_server=args.llama_server,
        delete_pods_on_exit=not args.keep_pods_on_exit,
    )


def run(args: argparse.Namespace) -> int:
    """Play the node for member (and router-proxy) Deployments and Job pods: pods, statuses,
    EndpointSlices, logs."""
    from controlplane.runtime.config import ClientConfig
    from controlplane.standin.controller import run_node

    anyio.run(run_node, ClientConfig.load(args.kubeconfig), settings_from(args))
    return 0
