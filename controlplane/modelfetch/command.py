"""``controlplane fetch-model``: the fetch container's command (prefetch Job, init container).

::

    controlplane fetch-model --source RAW [--sha256 HEX] --dest DIR
        [--progress-interval 1.0] [--retries 5] [--retry-delay 1.0]
        [--connect-timeout 10] [--read-timeout 60]
        [--termination-log /dev/termination-log]

stdout: one JSON record per line (:mod:`controlplane.modelfetch.progress`). Exit codes: 0 the
file is there and verified; 3 a permanent failure (NotFound, Unauthorized, Forbidden,
DigestMismatch, Invalid: the spec must change); 1 a failure worth retrying later (Unreachable,
ServerError, DiskFull). On failure, ``REASON: message`` goes to the termination log and stderr
(:mod:`controlplane.modelfetch.errors`). Environment: ``HF_ENDPOINT``, ``HF_TOKEN``,
``SSL_CERT_FILE``/``SSL_CERT_DIR``, ``HTTPS_PROXY``/``NO_PROXY``, ``HF_HOME`` (defaults into the
cache entry: the image's user has no home).

Importing this module is cheap (the full ``controlplane --help`` imports it): the downloaders are
imported by :mod:`.fetch` only when a download is needed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from controlplane.modelfetch.errors import DEFAULT_TERMINATION_LOG, EXIT_OK, FetchError, report
from controlplane.modelfetch.fetch import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    FetchSettings,
    fetch,
)
from controlplane.modelfetch.progress import DEFAULT_INTERVAL, ProgressReporter
from controlplane.modelfetch.retry import DEFAULT_DELAY, DEFAULT_RETRIES, MAX_DELAY


def _at_least(minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not value >= minimum:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}: {text}")
        return value

    return parse


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        required=True,
        help="spec.model.source: https://..., http://... (with --sha256) or hf://ORG/REPO/FILE",
    )
    parser.add_argument(
        "--sha256", default=None, help="spec.model.sha256: the file's digest, checked if given"
    )
    parser.add_argument(
        "--dest", type=Path, required=True, help="the cache entry folder the file lands in"
    )
    parser.add_argument(
        "--progress-interval",
        type=_at_least(0.0),
        default=DEFAULT_INTERVAL,
        help=f"seconds between two progress records (default: {DEFAULT_INTERVAL})",
    )
    parser.add_argument(
        "--retries",
        type=_count,
        default=DEFAULT_RETRIES,
        help=f"retries of a transient failure, resuming (default: {DEFAULT_RETRIES})",
    )
    parser.add_argument(
        "--retry-delay",
        type=_at_least(0.0),
        default=DEFAULT_DELAY,
        help=f"first wait before a retry, doubling to {MAX_DELAY:g} s, with jitter "
        f"(default: {DEFAULT_DELAY})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=_at_least(0.001),
        default=DEFAULT_CONNECT_TIMEOUT,
        help=f"seconds to connect, https:// and http:// (default: {DEFAULT_CONNECT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--read-timeout",
        type=_at_least(0.001),
        default=DEFAULT_READ_TIMEOUT,
        help="seconds without a byte before a retry; hf://: the whole per-request timeout "
        f"(default: {DEFAULT_READ_TIMEOUT:g})",
    )
    parser.add_argument(
        "--termination-log",
        type=Path,
        default=DEFAULT_TERMINATION_LOG,
        help="where the failure's REASON: message goes; not written when its folder is missing"
        f" (default: {DEFAULT_TERMINATION_LOG})",
    )


def settings_from(args: argparse.Namespace) -> FetchSettings:
    return FetchSettings(
        source=args.source,
        dest=args.dest,
        sha256=args.sha256,
        retries=args.retries,
        retry_delay=args.retry_delay,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
    )


def run(args: argparse.Namespace) -> int:
    """Download a model's weights into the node cache, verified; exit 0, 3 (permanent) or 1."""
    settings = settings_from(args)
    # The Hub client keeps its own state under HF_HOME; the image's user has no home, the
    # cache entry is writable (and is where the client's other bookkeeping goes anyway).
    os.environ.setdefault("HF_HOME", str(settings.dest / ".cache" / "huggingface"))
    reporter = ProgressReporter(args.progress_interval)
    try:
        done = fetch(settings, reporter)
    except FetchError as err:
        return report(err, args.termination_log)
    reporter.finish(done)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """The command without the console script's dispatch (tests, ``python -m``)."""
    parser = argparse.ArgumentParser(prog="controlplane fetch-model", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
