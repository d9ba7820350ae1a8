"""The kubelet API's log endpoint, so ``kubectl logs`` and ``GET pods/NAME/log`` work.

kube-apiserver answers ``GET /api/v1/namespaces/NS/pods/POD/log?container=C&tailLines=N`` by
proxying it to the pod's node: ``https://ADDRESS:PORT/containerLogs/NS/POD/C?tailLines=N`` at the
address and kubelet port the Node reports (:mod:`controlplane.standin.node`). It does not verify
the kubelet's certificate unless started with ``--kubelet-certificate-authority`` (the local
control plane is not), so a self-signed pair of a throw-away CA serves it; nor does it present a
client certificate, so this endpoint authenticates nobody: it serves logs only, on loopback only.

Served: ``tailLines``, ``limitBytes`` and ``follow`` (the file is streamed as it grows until the
container is no longer running). Not served: ``previous`` (the stand-in keeps one log per
container, :mod:`controlplane.standin.logfiles`; a 400 says so), ``timestamps`` and
``sinceSeconds``/``sinceTime`` (the logs have no timestamps; ignored).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from controlplane.envtest.pki import CertificateAuthority
from controlplane.runtime.endpoints import LOOPBACK
from controlplane.runtime.httpserver import bind, serve
from controlplane.standin.builders import NODE_NAME
from controlplane.standin.logfiles import size_of, tail

#: How often a followed log is looked at for new output.
FOLLOW_POLL_SECONDS: Final = 0.2
READ_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class LogTarget:
    """A container's log file, and whether the container still runs (for ``follow``)."""

    path: Path
    running: Callable[[], bool]


class UnknownContainer(LookupError):
    """No such pod or container on this node (a 404 with this message)."""


#: Finds a container's log: ``(namespace, pod, container) -> LogTarget``, or raises
#: :class:`UnknownContainer`.
Locate = Callable[[str, str, str], LogTarget]


def _int(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


class KubeletApi:
    """The HTTPS endpoint; :attr:`port` is known (bound) before :meth:`serve` runs."""

    def __init__(self, locate: Locate, folder: Path) -> None:
        self.locate = locate
        self.socket: socket.socket = bind(LOOPBACK, 0)
        self.port = int(self.socket.getsockname()[1])
        folder.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority("modelpool-sim-node-ca")
        pair = ca.serving_pair(("localhost", LOOPBACK, NODE_NAME))
        self.cert_file, self.key_file = pair.write(folder, "kubelet")
        self.app = Starlette(
            routes=[
                Route("/containerLogs/{namespace}/{pod}/{container}", self.container_logs),
                Route("/healthz", self.healthz),
            ]
        )

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def container_logs(self, request: Request) -> Response:
        params = request.query_params
        try:
            lines = _int(params.get("tailLines"))
            limit = _int(params.get("limitBytes"))
        except ValueError:
            return PlainTextResponse("tailLines and limitBytes must be non-negative", 400)
        if params.get("previous") in ("true", "1"):
            return PlainTextResponse(
                "previous terminated container logs are not kept by the node stand-in "
                "(one log per container)",
                400,
            )
        path = request.path_params
        try:
            target = self.locate(path["namespace"], path["pod"], path["container"])
        except UnknownContainer as err:
            return PlainTextResponse(str(err), 404)
        end = size_of(target.path)
        # limitBytes counts from the start of what is selected, as a kubelet's does.
        head = (await anyio.to_thread.run_sync(tail, target.path, lines, None, end))[:limit]
        if params.get("follow") not in ("true", "1"):
            return Response(head, media_type="text/plain")
        follow = self._follow(target, head, end, limit)
        return StreamingResponse(follow, media_type="text/plain")

    async def _follow(
        self, target: LogTarget, head: bytes, offset: int, limit: int | None
    ) -> AsyncIterator[bytes]:
        """``head`` (the file up to ``offset``), then what the file gains after it, until the
        container stops and all is sent."""
        sent = len(head)
        yield head
        while limit is None or sent < limit:
            running = target.running()  # before reading: nothing written after it is missed
            chunk = await anyio.to_thread.run_sync(_read_from, target.path, offset)
            if chunk:
                offset += len(chunk)
                if limit is not None:
                    chunk = chunk[: limit - sent]
                sent += len(chunk)
                yield chunk
            elif not running:
                return
            else:
                await anyio.sleep(FOLLOW_POLL_SECONDS)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        await serve(
            self.app,
            [self.socket],
            task_status=task_status,
            ssl_certfile=str(self.cert_file),
            ssl_keyfile=str(self.key_file),
        )


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as file:
            file.seek(offset)
            return file.read(READ_BYTES)
    except FileNotFoundError:
        return b""
