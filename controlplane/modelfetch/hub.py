"""``hf://`` sources: one file of a Hugging Face Hub repository, through ``huggingface_hub``.

``hf_hub_download(repo_id, filename, revision=, local_dir=DEST)`` puts the file at
``DEST/<path in the repo>`` (its bookkeeping under ``DEST/.cache/huggingface``), so the cache entry
holds the file under the same name the server's ``--model`` gives. The library speaks the Hub's
protocol (``HEAD``/``GET /ORG/REPO/resolve/REVISION/PATH``, redirects to a CDN, Xet storage),
honours ``HF_ENDPOINT`` (a mirror) and ``HF_TOKEN`` (given explicitly; with no token none is sent,
not one found on the machine), and locks the file against a concurrent download of its own.

What it does not do, done around it here: its progress bars become our records (``tqdm_class``,
:class:`_Bar`); its exceptions become our reasons (:func:`classify`, walking the chain because
the library wraps a refused ``HEAD`` in ``LocalEntryNotFoundError``); its client trusts the
certificates :mod:`.tls` names; and a failed call is retried by :mod:`.retry` (the library
retries within a call too; it does not resume across calls: its partial file is per process).

The only module that imports ``huggingface_hub`` (and its ``httpx2``), and only when called.
Timeouts: the library applies one timeout per request, for connecting and reading alike; it is
``--read-timeout`` here (``--connect-timeout`` is the ``https://`` downloader's alone).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, cast

from controlplane.modelfetch.errors import (
    FetchError,
    Reason,
    disk_full,
    for_status,
    free_bytes,
    is_disk_full,
)
from controlplane.modelfetch.progress import ProgressReporter
from controlplane.modelfetch.retry import RetryPolicy, retrying
from controlplane.modelfetch.tls import ssl_context


class _Bar:
    """Enough of ``tqdm`` for the Hub client's downloads, feeding a :class:`ProgressReporter`.

    The client calls a ``tqdm_class`` that is not a ``tqdm`` subclass with plain keyword
    arguments (``total``, ``initial``, ``desc``, ...), enters it, and calls ``update(n)`` per
    chunk (negative when a resumed request had to start over). ``update_transfer`` exists so
    that a Xet download uses one bar (bytes written to the file) rather than two.
    """

    reporter: ClassVar[ProgressReporter]
    #: Set once the client made a bar: it downloaded, rather than found the file in place.
    started: ClassVar[bool] = False

    def __init__(self, *_args: object, total: int | None = None, initial: int = 0, **_: object):
        type(self).started = True
        self._total = total
        self.n = initial
        self.reporter.start(total, initial)

    @property
    def total(self) -> int | None:
        return self._total

    @total.setter
    def total(self, value: int | None) -> None:
        self._total = value
        self.reporter.set_total(value)

    @property
    def format_dict(self) -> dict[str, object]:
        return {}

    def update(self, n: float | None = 1) -> None:
        count = int(n or 0)
        self.n += count
        self.reporter.advance(count)

    def update_transfer(self, n: float | None = 1) -> None:
        """Bytes received from the network: not what the operator is shown (bytes on disk)."""

    def set_postfix_str(self, *_args: object, **_kwargs: object) -> None: ...

    def set_transfer_postfix_str(self, *_args: object, **_kwargs: object) -> None: ...

    def refresh(self, *_args: object, **_kwargs: object) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> _Bar:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


def bar_class(reporter: ProgressReporter) -> type[_Bar]:
    """A ``tqdm_class`` reporting to ``reporter`` (a class: the client instantiates it)."""
    return cast(type[_Bar], type("HubProgress", (_Bar,), {"reporter": reporter, "started": False}))


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify(err: BaseException, what: str, dest: Path, reporter: ProgressReporter) -> FetchError:
    """The reason behind what ``hf_hub_download`` raised: the first HTTP status in the chain
    (401, 403, 404, 5xx), else the network error, else the disk, else the library's words."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    for link in _chain(err):
        if isinstance(link, HfHubHTTPError):
            return for_status(link.response.status_code, what)
        if isinstance(link, httpx2.TimeoutException):
            return FetchError(Reason.UNREACHABLE, f"{what}: timed out ({type(link).__name__})")
        if isinstance(link, httpx2.UnsupportedProtocol):
            return FetchError(Reason.INVALID, f"{what}: {link} (HF_ENDPOINT)")
        if isinstance(link, httpx2.TransportError):
            text = str(link) or type(link).__name__
            if "CERTIFICATE_VERIFY_FAILED" in text:
                text += " (a private CA: name its bundle in spec.model.caBundle)"
            return FetchError(Reason.UNREACHABLE, f"{what}: {text}")
        if isinstance(link, OfflineModeIsEnabled):
            return FetchError(Reason.UNREACHABLE, f"{what}: HF_HUB_OFFLINE is set")
        if isinstance(link, OSError) and is_disk_full(link):
            done, total = reporter.bytes_done, reporter.bytes_total
            return disk_full(dest, None if total is None else total - done, free_bytes(dest))
    first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if isinstance(err, OSError):  # LocalEntryNotFoundError is one
        # No status and no network error in the chain: a Hub that answered without the headers
        # a Hub sends, or a download cut short (the library checks the size): both transient.
        return FetchError(Reason.UNREACHABLE, f"{what}: {first_line}")
    if isinstance(err, ValueError):
        return FetchError(Reason.INVALID, f"{what}: {first_line}")
    raise err


def _install_client(read_timeout: float) -> None:
    """The library's shared client, trusting :func:`ssl_context`; its per-request timeout; no
    telemetry (unless asked for): the library would otherwise fetch a registry of "AI agent
    harnesses" from the endpoint to decorate its user agent, a request no fetch needs. Its
    client logs each request at INFO, as ``httpx`` does: quieted the same way."""
    import httpx2
    from huggingface_hub import constants, set_client_factory

    set_client_factory(
        lambda: httpx2.Client(follow_redirects=True, timeout=None, verify=ssl_context())
    )
    constants.HF_HUB_DOWNLOAD_TIMEOUT = max(1, math.ceil(read_timeout))
    if "HF_HUB_DISABLE_TELEMETRY" not in os.environ:
        constants.HF_HUB_DISABLE_TELEMETRY = True
    logging.getLogger("httpx2").setLevel(logging.WARNING)


def download(
    repo: str,
    filename: str,
    revision: str,
    dest: Path,
    *,
    reporter: ProgressReporter,
    policy: RetryPolicy,
    read_timeout: float,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Path, bool]:
    """Download ``filename`` of ``repo`` at ``revision`` into ``dest``: its path, and whether
    the library downloaded it (False: the file it had put there before was still current)."""
    from huggingface_hub import hf_hub_download

    _install_client(read_timeout)
    bar = bar_class(reporter)
    endpoint = (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None
    what = f"hf://{repo}/{filename}@{revision}"
    if endpoint:
        what += f" (HF_ENDPOINT {endpoint})"
    last_done = [reporter.bytes_done]

    def progressed() -> bool:
        moved = reporter.bytes_done > last_done[0]
        last_done[0] = reporter.bytes_done
        return moved

    def once() -> str:
        try:
            return hf_hub_download(
                repo,
                filename,
                revision=revision,
                local_dir=dest,
                token=os.environ.get("HF_TOKEN") or False,
                endpoint=endpoint,
                etag_timeout=read_timeout,
                tqdm_class=cast(Any, bar),
            )
        except Exception as err:
            raise classify(err, what, dest, reporter) from err

    path = retrying(once, policy, progressed=progressed, sleep=sleep)
    return Path(path), bar.started
