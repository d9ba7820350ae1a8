"""The proxy's upstream client: one request to a member, its answer read whole or streamed.

The app needs little of an HTTP client: send a method, a URL, a few headers and the body bytes it
already holds; read a small sized answer in one go, or hand a streamed one (SSE) on read by read;
know whether a failure happened before the member could have taken the request. This module
gives exactly that (:class:`Upstream`, :class:`UpstreamAnswer`) on aiohttp's connection pool
(:class:`AiohttpUpstream`), without a general client's request and response objects in between:
on the proxy's fast path those objects (httpx's, when aiohttp sat behind httpx's interface) cost
about a tenth of a request's CPU (bench/README.md, "Data path"). httpx's own transport remains
available behind the same interface, for comparison and for tests with ``httpx.MockTransport``
(:mod:`controlplane.router.upstream_httpx`).

Contract of every implementation:

* the answer's body is passed as the member sent it: no decompression, no re-chunking
  (:meth:`UpstreamAnswer.chunks` yields each read as it comes; nothing is buffered);
* closing the answer (or reading it to the end) returns the connection to the pool; a
  connection whose answer was not read to the end is dropped;
* timeouts (:class:`UpstreamTimeouts`): ``connect`` bounds the TCP connect, ``read`` each read of
  the answer; waiting for a free pooled connection is unbounded, as a member's own queue is;
* failures are :class:`UpstreamFailure`, one subclass per kind: :class:`ConnectFailed` and
  :class:`ConnectTimedOut` (the request was not sent: refused, timed out connecting, or a
  kept-alive connection found closed when written), :class:`ReadTimedOut`,
  :class:`Disconnected` (the member closed the
  connection mid-answer), :class:`BadAnswer` (what it sent is not valid HTTP), :class:`ReadFailed`
  (anything else once sent); :class:`AnswerTooLarge` is raised by :func:`bounded_chunks`, the
  one bound on an answer's size that the app applies to every answer it streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, Protocol

import aiohttp
from yarl import URL

#: Connections kept per member: more than a llama.cpp server has slots, so a busy member queues
#: requests itself (as it does for direct clients) rather than in the proxy.
CONNECTIONS_PER_HOST: Final = 256
#: The most of one member answer passed on (``--max-answer-bytes``): far above any completion
#: or embedding batch, far below what a member that streams without end would send.
DEFAULT_MAX_ANSWER_BYTES: Final = 1024 * 1024 * 1024
#: Parsed member URLs kept (members come and go: the memo is emptied past this).
URLS_KEPT: Final = 256
#: How long closing a member's answer may take once its client has left: the close is shielded
#: from the cancellation, so it needs a bound of its own; the in-flight count goes either way.
CLOSE_TIMEOUT_SECONDS: Final = 5.0


@dataclass(frozen=True)
class UpstreamTimeouts:
    """Seconds; ``None`` waits forever."""

    #: The TCP connect to a member (a cold member is the activator's business, so this is quick).
    connect: float | None = 5.0
    #: Each read of the answer: a long generation may pause between tokens.
    read: float | None = 600.0


class UpstreamFailure(Exception):
    """A request to a member that failed before its answer was complete."""

    #: Whether the member cannot have taken the request (so sending it again is safe).
    unsent: ClassVar[bool] = False
    #: What went wrong, in a word the app turns into the error the client gets
    #: (:func:`controlplane.router.errors.upstream_error`).
    kind: ClassVar[str] = "unreachable"


class ConnectFailed(UpstreamFailure):
    """No connection, or a pooled one found closed when the request was written."""

    unsent = True


class ConnectTimedOut(UpstreamFailure):
    """The TCP connect took longer than :attr:`UpstreamTimeouts.connect`: nothing was written,
    so the member cannot have taken the request. A member whose backlog is full, or a proxy
    whose own loop stalls past the bound while thousands of held requests are released at
    once (the connection made, its wake-up run after the timer), both end here."""

    unsent = True


class ReadTimedOut(UpstreamFailure):
    """A read of the answer took longer than :attr:`UpstreamTimeouts.read`."""

    kind = "timeout"


class Disconnected(UpstreamFailure):
    """The member closed the connection before its answer was complete."""

    kind = "disconnected"


class BadAnswer(UpstreamFailure):
    """What the member sent is not valid HTTP (a status line, a header or a chunk it cannot be):
    sent, so never sent again, since the member may have taken it."""

    kind = "bad_answer"


class AnswerTooLarge(UpstreamFailure):
    """The answer declares, or has sent, more bytes than the proxy passes on."""

    kind = "too_large"


class ReadFailed(UpstreamFailure):
    """Any other failure once the request was sent."""


class UpstreamAnswer(Protocol):
    """A member's answer whose head has arrived; the body is read with :meth:`read` or
    :meth:`chunks`, once, and the answer closed with :meth:`aclose` either way."""

    @property
    def status(self) -> int:
        """The HTTP status."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The answer's headers, names in lower case (the last of a repeated one)."""
        ...

    async def read(self, limit: int | None = None) -> bytes:
        """The body as sent, to its end or to at least ``limit`` bytes (then cut there)."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as sent, each read as it arrives."""
        ...

    async def aclose(self) -> None:
        """Return the connection to the pool (or drop it when the body was not read to the end)."""
        ...


class Upstream(Protocol):
    """What the proxy's app sends member requests with (owned, and closed, by the process)."""

    async def request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> UpstreamAnswer:
        """Send one request and return once the answer's head has arrived."""
        ...

    async def aclose(self) -> None:
        """Close every pooled connection."""
        ...


def _failure(err: BaseException, connected: bool) -> UpstreamFailure:
    """aiohttp's error (or a timeout) as the kind of failure the app tells apart."""
    message = str(err) or type(err).__name__
    if isinstance(err, aiohttp.ConnectionTimeoutError):
        return ConnectTimedOut(message)
    if isinstance(err, aiohttp.ClientConnectorError):
        return ConnectFailed(message)
    if isinstance(err, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return ReadTimedOut(message)
    if isinstance(err, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return Disconnected(message)
    if isinstance(err, aiohttp.ClientResponseError):  # aiohttp's parser refused the answer
        return BadAnswer(message.splitlines()[0] if message else "not valid HTTP")
    if not connected:  # e.g. a kept-alive connection the member had closed, found when written
        return ConnectFailed(message)
    return ReadFailed(message)


class _AiohttpAnswer:
    """An :class:`UpstreamAnswer` over ``aiohttp.ClientResponse``."""

    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.raw_headers
        }

    async def read(self, limit: int | None = None) -> bytes:
        content = self._response.content
        try:
            if limit is None:
                return await content.read()
            body = bytearray()
            while len(body) < limit and (chunk := await content.readany()):
                body += chunk
        except (TimeoutError, aiohttp.ClientError) as err:
            raise _failure(err, connected=True) from err
        return bytes(body[:limit])

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as err:
            raise _failure(err, connected=True) from err

    async def aclose(self) -> None:
        self._response.release()  # back to the pool when read to the end, else dropped


class AiohttpUpstream:
    """An :class:`Upstream` on one lazily created ``aiohttp.ClientSession`` (created inside the
    running event loop, closed by :meth:`aclose`).

    The session adds no headers of its own beyond ``Host`` and the body's length, follows no
    redirect, reads no proxy settings from the environment and decompresses nothing.
    """

    def __init__(
        self,
        timeouts: UpstreamTimeouts | None = None,
        connections_per_host: int = CONNECTIONS_PER_HOST,
    ) -> None:
        timeouts = timeouts or UpstreamTimeouts()
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=None,  # includes the wait for a pooled connection: left to the member's queue
            sock_connect=timeouts.connect,
            sock_read=timeouts.read,
        )
        self._connections_per_host = connections_per_host
        self._session: aiohttp.ClientSession | None = None
        #: Parsed URLs by text (a handful of members; parsing one costs more than the look-up).
        self._urls: dict[str, URL] = {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0, limit_per_host=self._connections_per_host, ssl=False
                ),
                timeout=self._timeout,
                auto_decompress=False,
                trust_env=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            )
        return self._session

    def _url(self, text: str) -> URL:
        url = self._urls.get(text)
        if url is None:
            if len(self._urls) >= URLS_KEPT:
                self._urls.clear()
            url = self._urls[text] = URL(text)
        return url

    async def request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> UpstreamAnswer:
        try:
            response = await self._client().request(
                method,
                self._url(url),
                headers=headers,
                data=body or None,
                allow_redirects=False,
                compress=None,
            )
        except (TimeoutError, aiohttp.ClientError) as err:
            raise _failure(err, connected=False) from err
        return _AiohttpAnswer(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def declared_length(answer: UpstreamAnswer) -> int | None:
    """The answer's ``content-length`` as a number, None when absent or not a number."""
    length = answer.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


def check_declared(answer: UpstreamAnswer, limit: int) -> None:
    """Refuse an answer that says up front it is longer than ``limit`` bytes."""
    length = declared_length(answer)
    if length is not None and length > limit:
        raise AnswerTooLarge(f"the answer declares {length} bytes, more than the {limit} passed on")


async def bounded_chunks(answer: UpstreamAnswer, limit: int) -> AsyncIterator[bytes]:
    """:meth:`UpstreamAnswer.chunks`, ended with :class:`AnswerTooLarge` once more than ``limit``
    bytes came: a member that streams without end (or declares no size and sends gigabytes)
    must not hold a client, and the proxy's connection, for ever."""
    sent = 0
    async for chunk in answer.chunks():
        sent += len(chunk)
        if sent > limit:
            raise AnswerTooLarge(f"the answer went past the {limit} bytes passed on")
        yield chunk


#: Where an SSE event ends (a blank line; llama.cpp and OpenAI use the first).
_EVENT_ENDS: Final = (b"\n\n", b"\r\n\r\n")


async def whole_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """An event stream's ``chunks`` cut at event boundaries: a read's unfinished last event is
    held back until the read that ends it. So when the stream breaks, what the client has is
    whole events, and the error event that follows is read as one, never glued to half of
    another. The end of a stream that finishes well passes as it came."""
    tail = b""
    async for chunk in chunks:
        data = tail + chunk if tail else chunk
        end = 0
        for mark in _EVENT_ENDS:
            at = data.rfind(mark)
            if at >= 0:
                end = max(end, at + len(mark))
        tail = data[end:]
        if end:
            yield data[:end]
    if tail:
        yield tail
