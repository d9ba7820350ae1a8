"""Drawn member answers, each with what the client must get for it (the member-side contract).

A :class:`Case` is a :class:`~tests.fuzz.member.Script` (what the member sends) and an
:class:`Expected` (what the proxy must answer), drawn together so that the oracle is exact for
every draw (docs/router.md, "Broken members"):

* a 2xx answer that is complete passes untouched: status, ``content-type``, body bytes;
* a member's 4xx/5xx (not an event stream, sized at most 64 KiB or unsized) is the same status
  with the body rewritten into the proxy's error shape (JSON, plain text, gzip alike);
* an answer head that is not HTTP is 502 ``upstream_bad_answer``; a close before the head is
  complete 502 ``upstream_disconnected``; no head within the read timeout 504
  ``upstream_timeout``; a declared length above ``max_answer_bytes`` 502
  ``upstream_answer_too_large``;
* a whole answer (sized, at most 1 MiB, not an event stream) that fails mid-body is a 502 (a
  stall may also be told as 504 ``upstream_timeout``) in the error shape;
* an event stream that fails after its head (a close, a stall, more than ``max_answer_bytes``)
  is a 200 whose chunked body is whole events of the member's and then exactly one
  ``data: {"error": ...}`` event, properly terminated;
* any other streamed 2xx that fails mid-body is a 200 cut short: the connection closes without
  the terminating chunk.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass

from hypothesis import strategies as st

from controlplane.router.errors import MEMBER_ERROR_MAX_BYTES
from tests.fuzz.corpus import seeds
from tests.fuzz.member import CLOSE, KEEP, STALL, Script
from tests.fuzz.mutations import mutated

#: The member-side proxy's ``max_answer_bytes``: as small as it can be (an answer past it is
#: cheap to draw) without going below the 64 KiB of a member's error that is read to rewrite it,
#: where an error declaring more than this is read anyway (reported: docs/fuzzing.md).
MAX_ANSWER_BYTES = MEMBER_ERROR_MAX_BYTES
HUGE_LENGTH = 10 * 1024**3  # "a 10 GB body"

UNTOUCHED, ERROR, EVENT_ERROR, CUT = "untouched", "error", "event-error", "cut"


@dataclass(frozen=True)
class Expected:
    """What the client must get.

    ``kind`` is one of :data:`UNTOUCHED` (``status``, ``content_type`` and ``body`` as the
    member sent them), :data:`ERROR` (a status in ``statuses``, the error shape, a ``code`` in
    ``codes`` when that is not empty), :data:`EVENT_ERROR` (a terminated 200 stream of whole
    member events, ``body`` being all the member sent, then one error event) or :data:`CUT`
    (a 200 closed without its terminating chunk, a prefix of ``body``).
    """

    kind: str
    statuses: frozenset[int] = frozenset()
    codes: frozenset[str] = frozenset()
    body: bytes = b""
    content_type: str | None = None
    #: A member's own error: its error object may keep fields beyond the three.
    member_error: bool = False


@dataclass(frozen=True)
class Case:
    script: Script
    expected: Expected


def _error(status: int, *codes: str) -> Expected:
    return Expected(ERROR, frozenset({status}), frozenset(codes))


def _head(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [b"HTTP/1.1 %d %s" % (status, b"OK" if status < 300 else b"Whatever")]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


@st.composite
def _pieces(draw: st.DrawFn, data: bytes) -> tuple[bytes | float, ...]:
    """``data`` sent in drawn pieces, with a short pause between some."""
    steps: list[bytes | float] = []
    at = 0
    while at < len(data):
        size = draw(st.integers(1, len(data) - at))
        steps.append(data[at : at + size])
        at += size
        if at < len(data) and draw(st.booleans()):
            steps.append(draw(st.sampled_from([0.0, 0.001, 0.01])))
    return tuple(steps)


def _chunks(data: bytes, sizes: list[int]) -> bytes:
    """``data`` in chunks of ``sizes`` (the rest in one), without the terminating chunk."""
    out, at = bytearray(), 0
    for size in [*sizes, len(data)]:
        if at >= len(data):
            break
        out += b"%x\r\n%s\r\n" % (len(data[at : at + size]), data[at : at + size])
        at += size
    return bytes(out)


_SSE_EVENT = st.text(
    st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=40
).map(lambda text: b"data: " + json.dumps({"delta": text}).encode() + b"\n\n")
_SSE_BODY = (
    st.lists(_SSE_EVENT, min_size=1, max_size=8)
    .map(b"".join)
    .map(lambda events: events + b"data: [DONE]\n\n")
)
_JSON_BODY = st.dictionaries(
    st.text(max_size=8), st.integers() | st.text(max_size=20), max_size=5
).map(lambda doc: json.dumps(doc).encode())
_BODY_2XX = st.one_of(_JSON_BODY, st.binary(max_size=2048), _SSE_BODY)
_CONTENT_TYPES = st.sampled_from(
    [b"application/json", b"text/event-stream", b"text/plain; charset=utf-8", b""]
)


@st.composite
def valid_answer(draw: st.DrawFn) -> Case:
    """A complete 2xx, sized, chunked or until the close: passed untouched."""
    status = draw(st.sampled_from([200, 200, 201]))
    content_type = draw(_CONTENT_TYPES)
    body = draw(_BODY_2XX)
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    headers = [(b"content-type", content_type)] if content_type else []
    if draw(st.booleans()):
        headers.append((b"content-encoding", b"gzip"))
        body = gzip.compress(body)
    if framing == "length":
        headers.append((b"content-length", b"%d" % len(body)))
        sent, end = body, KEEP
    elif framing == "chunked":
        headers.append((b"transfer-encoding", b"chunked"))
        sizes = draw(st.lists(st.integers(1, 512), max_size=6))
        sent, end = _chunks(body, sizes) + b"0\r\n\r\n", KEEP
    else:
        sent, end = body, CLOSE
    script = Script((_head(status, headers), *draw(_pieces(sent))), end)
    kept = content_type.decode() if content_type else None
    return Case(script, Expected(UNTOUCHED, frozenset({status}), body=body, content_type=kept))


_ERROR_BODIES = st.one_of(
    st.builds(
        lambda message, code, extra: json.dumps(
            {"error": {"message": message, "code": code, **extra}}
        ).encode(),
        st.text(max_size=30) | st.none() | st.integers(),
        st.integers() | st.text(max_size=10) | st.none(),
        st.dictionaries(st.sampled_from(["type", "n_ctx", "param"]), st.integers() | st.text()),
    ),
    st.builds(lambda text: json.dumps({"error": text}).encode(), st.text(max_size=30)),
    st.sampled_from([b"", b"Internal Server Error", b"<html><body>502</body></html>", b"[1,2]"]),
    st.binary(max_size=200),
)


@st.composite
def member_error(draw: st.DrawFn) -> Case:
    """A member's own 4xx/5xx: same status, rewritten into the proxy's error shape."""
    status = draw(st.sampled_from([400, 404, 413, 422, 429, 500, 502, 503, 504]))
    body = draw(_ERROR_BODIES)
    headers = [(b"content-type", draw(st.sampled_from([b"application/json", b"text/html", b""])))]
    headers = [h for h in headers if h[1]]
    coding = draw(st.sampled_from(["identity", "gzip", "broken-gzip"]))
    if coding != "identity":
        headers.append((b"content-encoding", b"gzip"))
        body = gzip.compress(body) if coding == "gzip" else b"\x1f\x8b" + body
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    if framing == "length":
        headers.append((b"content-length", b"%d" % len(body)))
        sent, end = body, KEEP
    elif framing == "chunked":
        headers.append((b"transfer-encoding", b"chunked"))
        sent, end = (
            _chunks(body, draw(st.lists(st.integers(1, 64), max_size=4))) + b"0\r\n\r\n",
            KEEP,
        )
    else:
        sent, end = body, CLOSE
    script = Script((_head(status, headers), *draw(_pieces(sent))), end)
    expected = Expected(ERROR, frozenset({status}), member_error=True)
    return Case(script, expected)


_VALID_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"
_BAD_HEADS = st.sampled_from(
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 abc Nope\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nthis is not a header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
        b"HTTP/9.9 200 OK\r\n\r\n",
        b"\x00\x01\x02\x03\r\n\r\n",
        b"<html>hello</html>\r\n\r\n",
    ]
) | st.binary(min_size=1, max_size=64).filter(lambda raw: raw[:1] not in (b"H", b"\r", b"\n")).map(
    lambda raw: raw + b"\r\n\r\n"
)


@st.composite
def bad_head(draw: st.DrawFn) -> Case:
    """Bytes that are not an HTTP answer head: 502 ``upstream_bad_answer``."""
    end = draw(st.sampled_from([CLOSE, STALL]))
    return Case(Script((draw(_BAD_HEADS),), end), _error(502, "upstream_bad_answer"))


@st.composite
def cut_head(draw: st.DrawFn) -> Case:
    """A valid head cut off (nothing at all, at its shortest): closed is 502
    ``upstream_disconnected``, stalled is 504 ``upstream_timeout``."""
    seed = draw(st.sampled_from(seeds("answers")))
    head = seed.split(b"\r\n\r\n", 1)[0] + b"\r\n"
    cut = head[: draw(st.integers(0, len(head) - 1))]
    end = draw(st.sampled_from([CLOSE, STALL]))
    expected = (
        _error(502, "upstream_disconnected") if end == CLOSE else _error(504, "upstream_timeout")
    )
    return Case(Script((cut,) if cut else (), end), expected)


@st.composite
def declared_too_large(draw: st.DrawFn) -> Case:
    """A head declaring far more than ``max_answer_bytes``: 502 ``upstream_answer_too_large``
    before a byte of it is passed on, whatever the member then does."""
    status = draw(st.sampled_from([200, 500]))
    length = draw(st.sampled_from([MAX_ANSWER_BYTES + 1, HUGE_LENGTH, 10**30]))
    content_type = draw(st.sampled_from([b"application/json", b"application/octet-stream"]))
    head = _head(status, [(b"content-type", content_type), (b"content-length", b"%d" % length)])
    body = draw(st.binary(max_size=256))
    end = draw(st.sampled_from([CLOSE, STALL]))
    # A length beyond 64 bits is past what aiohttp's parser reads as a number: a bad head.
    codes = {"upstream_answer_too_large"} | ({"upstream_bad_answer"} if length >= 2**63 else set())
    return Case(Script((head, body), end), Expected(ERROR, frozenset({502}), frozenset(codes)))


@st.composite
def whole_cut(draw: st.DrawFn) -> Case:
    """A sized (whole) 2xx whose body stops short: 502 (a stall may be 504) in our shape."""
    body = draw(st.binary(min_size=1, max_size=4096))
    head = _head(
        200, [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    )
    sent = body[: draw(st.integers(0, len(body) - 1))]
    end = draw(st.sampled_from([CLOSE, STALL]))
    statuses = frozenset({502} if end == CLOSE else {502, 504})
    return Case(Script((head, *draw(_pieces(sent))), end), Expected(ERROR, statuses))


@st.composite
def stream_broken(draw: st.DrawFn) -> Case:
    """A streamed 2xx that fails after its head: an event stream ends with one error event, any
    other stream is cut (closed without the terminating chunk)."""
    events = draw(st.booleans())
    how = draw(st.sampled_from(["close", "stall", "too-large"]))
    if how == "too-large":
        event = b"data: " + b"x" * 1000 + b"\n\n"
        body = event * (MAX_ANSWER_BYTES // len(event) + draw(st.integers(1, 8)))
        sent = body
    else:
        body = draw(_SSE_BODY if events else st.binary(min_size=1, max_size=4096))
        sent = body[: draw(st.integers(0, len(body) - 1))]
    framing = draw(st.sampled_from(["chunked", "chunked", "length"]))
    content_type = b"text/event-stream" if events else b"application/octet-stream"
    headers = [(b"content-type", content_type)]
    if framing == "length":
        # Sized yet streamed: an event stream, or a non-stream above the 1 MiB read whole.
        declared = len(body) if events else 2 * 1024 * 1024
        if declared > MAX_ANSWER_BYTES:
            framing = "chunked"  # a declared length this long would be refused up front
        else:
            headers.append((b"content-length", b"%d" % declared))
            wire = sent
    if framing == "chunked":
        headers.append((b"transfer-encoding", b"chunked"))
        wire = _chunks(sent, draw(st.lists(st.integers(1, 2048), max_size=6)))
        if how == "too-large":
            wire += b"0\r\n\r\n"  # complete, but longer than the proxy passes on
    # Too large yet complete: the member then waits for its next request on the connection.
    end = {"close": CLOSE, "stall": STALL, "too-large": KEEP}[how]
    script = Script((_head(200, headers), *draw(_pieces(wire))), end)
    return Case(script, Expected(EVENT_ERROR if events else CUT, frozenset({200}), body=sent))


@st.composite
def mutated_answer(draw: st.DrawFn) -> Case:
    """A corpus answer mutated byte by byte: the client still gets a well-formed answer, of
    any status (no exact expectation: the oracle's general half judges it)."""
    data = draw(st.sampled_from(seeds("answers")).flatmap(mutated))
    return Case(Script((data,), draw(st.sampled_from([CLOSE, STALL]))), Expected("any"))


def member_case() -> st.SearchStrategy[Case]:
    """Any member answer, with what the client must get for it."""
    return st.one_of(
        valid_answer(),
        member_error(),
        bad_head(),
        cut_head(),
        declared_too_large(),
        whole_cut(),
        stream_broken(),
        mutated_answer(),
    )
