"""An :class:`~controlplane.router.upstream.Upstream` on any httpx transport.

Not the proxy's default (``--upstream-client httpx`` selects it): httpcore's pool cost several
times aiohttp's CPU per request on the proxy's fast path (bench/README.md, "Data path"). It is
kept for that comparison, and because tests drive the app with ``httpx.MockTransport`` as a fake
member. httpx's errors become the upstream module's, kind for kind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx

from controlplane.router.upstream import (
    ConnectFailed,
    ConnectTimedOut,
    Disconnected,
    ReadFailed,
    ReadTimedOut,
    UpstreamAnswer,
    UpstreamFailure,
    UpstreamTimeouts,
)


def _failure(err: httpx.HTTPError) -> UpstreamFailure:
    message = str(err) or type(err).__name__
    if isinstance(err, httpx.ConnectTimeout):
        return ConnectTimedOut(message)
    if isinstance(err, httpx.ConnectError):
        return ConnectFailed(message)
    if isinstance(err, httpx.TimeoutException):
        return ReadTimedOut(message)
    if isinstance(err, httpx.RemoteProtocolError):
        return Disconnected(message)
    return ReadFailed(message)


class _HttpxAnswer:
    """An :class:`UpstreamAnswer` over a streamed ``httpx.Response``."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers.raw
        }

    async def read(self, limit: int | None = None) -> bytes:
        body = bytearray()
        async for chunk in self.chunks():
            body += chunk
            if limit is not None and len(body) >= limit:
                return bytes(body[:limit])
        return bytes(body)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as err:
            raise _failure(err) from err

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream:
    """Requests sent with ``transport.handle_async_request`` directly (no client layers:
    redirects, auth, cookies); the transport is closed with this upstream."""

    def __init__(
        self, transport: httpx.AsyncBaseTransport, timeouts: UpstreamTimeouts | None = None
    ) -> None:
        timeouts = timeouts or UpstreamTimeouts()
        self._transport = transport
        # No write or pool-wait bound: aiohttp's pool has neither (a member's queue is its own).
        self._timeout = {
            "connect": timeouts.connect,
            "read": timeouts.read,
            "write": None,
            "pool": None,
        }

    async def request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> UpstreamAnswer:
        request = httpx.Request(
            method, url, content=body, headers=headers, extensions={"timeout": self._timeout}
        )
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.HTTPError as err:
            raise _failure(err) from err
        response.request = request
        return _HttpxAnswer(response)

    async def aclose(self) -> None:
        await self._transport.aclose()
