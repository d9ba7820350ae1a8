"""The proxy's upstream client: httpx's interface over aiohttp's connection pool.

The proxy's app speaks httpx (``send(build_request(...), stream=True)``, ``aiter_raw``,
``aclose``, ``httpx.HTTPError``); this transport carries those requests on an
``aiohttp.ClientSession`` instead of httpcore. Measured on the proxy's fast path (bench/README.md,
"Data path"), httpcore's pool cost about 0.7 ms of CPU per request on one connection and 1.5 ms
with 16 at once (its pool re-scans every connection and request under a lock on each
request); aiohttp's about 0.1 ms. The app, its streaming and its error handling are unchanged.

Contract, as httpx's own transport:

* the response body is streamed as it arrives (``aiter_raw`` gets each read; nothing buffered), and
  closing the response returns the connection to the pool (or drops it when unread);
* httpx's per-request timeouts apply: ``connect`` to the TCP connect, ``read`` to each read;
  waiting for a free pooled connection is unbounded (``pool``), as a member's own queue is;
* aiohttp's errors become httpx's (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
  ``ReadError``, ``RemoteProtocolError``), so ``except httpx.HTTPError`` still catches them;
* bodies are passed as they are: no decompression (``aiter_raw`` is what a proxy forwards).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import aiohttp
import httpx

#: Connections kept per member: more than a llama.cpp server has slots, so a busy member queues
#: requests itself (as it does for direct clients) rather than in the proxy.
CONNECTIONS_PER_HOST: Final = 256
#: Request headers the transport sets itself.
_OWN_HEADERS: Final = frozenset({b"host", b"content-length", b"transfer-encoding", b"connection"})


def _timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    timeout = request.extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(
        total=None,
        connect=None,  # includes the wait for a pooled connection: left to the member's queue
        sock_connect=timeout.get("connect"),
        sock_read=timeout.get("read"),
    )


def _translate(err: BaseException, request: httpx.Request, connected: bool) -> httpx.HTTPError:
    message = str(err) or type(err).__name__
    if isinstance(err, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(err, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message, request=request)
    if isinstance(err, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return httpx.ReadTimeout(message, request=request)
    if isinstance(err, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx.RemoteProtocolError(message, request=request)
    if not connected:
        return httpx.ConnectError(message, request=request)
    return httpx.ReadError(message, request=request)


class _Body(httpx.AsyncByteStream):
    """An aiohttp response body as httpx's stream: each read as it comes."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as err:
            raise _translate(err, self._request, connected=True) from err

    async def aclose(self) -> None:
        self._response.release()  # back to the pool when read to the end, else dropped


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport on one lazily created ``aiohttp.ClientSession`` (created inside the
    running event loop, closed with the client)."""

    def __init__(self, connections_per_host: int = CONNECTIONS_PER_HOST) -> None:
        self._connections_per_host = connections_per_host
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0, limit_per_host=self._connections_per_host, ssl=False
                ),
                auto_decompress=False,
                trust_env=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.lower() not in _OWN_HEADERS
        ]
        body = await request.aread()
        try:
            response = await self._client().request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                timeout=_timeout(request),
                allow_redirects=False,
                compress=None,
            )
        except (TimeoutError, aiohttp.ClientError) as err:
            raise _translate(err, request, connected=False) from err
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            extensions={"http_version": b"HTTP/1.1"},
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
