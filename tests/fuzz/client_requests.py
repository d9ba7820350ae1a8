"""Whole client requests as bytes: a drawn HTTP/1.1 request, or a corpus request mutated.

The structured half draws each part of a request a hostile or broken client might get wrong:
the method, the target (the proxied paths and the others, odd spellings, absolute form, query
strings, percent escapes), the version, the header lines (``host`` missing or twice,
``content-length`` right, wrong, repeated, signed, huge or not a number, ``transfer-encoding``
alone, combined with a length or unknown, ``expect``, ``upgrade``, a ``traceparent`` the tracer
parses, header values with bytes beyond ASCII) and the body (:mod:`tests.fuzz.jsontext`) framed
by length or in chunks (with extensions and trailers). The other half mutates the seeds under
``corpus/requests`` and the drawn requests themselves (:mod:`tests.fuzz.mutations`).
"""

from __future__ import annotations

from hypothesis import strategies as st

from tests.fuzz import jsontext
from tests.fuzz.corpus import seeds
from tests.fuzz.mutations import mutated

PROXIED = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
OTHERS = ("/v1/models", "/healthz", "/readyz", "/metrics", "/", "/v1", "/v1/chat")

#: Methods httptools knows (it refuses any other before the app sees it).
_KNOWN_METHODS = st.sampled_from(
    [b"POST"] * 8 + [b"GET", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"TRACE"]
)
_ODD_METHODS = st.sampled_from([b"post", b"CONNECT", b"PRI", b"QUERY"]) | st.from_regex(
    rb"\A[A-Z]{1,10}\Z"
)
_ODD_VERSIONS = st.sampled_from([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2", b"http/1.1", b"HTTP/1"])
_TOKEN = st.from_regex(rb"\A[!#$%&'*+.^_`|~0-9A-Za-z-]{1,20}\Z")
#: Header value bytes httptools takes: visible ASCII, space, tab and obs-text.
_VALUE = st.binary(max_size=40).map(
    lambda raw: bytes(b for b in raw if b in (9, 32) or 33 <= b <= 126 or b >= 128)
)


@st.composite
def target(draw: st.DrawFn, path: str) -> bytes:
    """The request target for ``path``, possibly spelled oddly."""
    encoded = path.encode()
    spelling = draw(
        st.sampled_from(["plain"] * 6 + ["query", "slash", "double", "absolute", "escaped", "star"])
    )
    if spelling == "query":
        return encoded + b"?" + draw(st.from_regex(rb"\A[a-z0-9=&%]{0,20}\Z"))
    if spelling == "slash":
        return encoded + b"/"
    if spelling == "double":
        return b"/" + encoded
    if spelling == "absolute":
        return b"http://proxy" + encoded
    if spelling == "escaped":
        return encoded.replace(b"/v1/", b"/v1%2F").replace(b"c", b"%63", 1)
    return b"*" if spelling == "star" else encoded


@st.composite
def chunked(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` in drawn chunks, with chunk extensions or a trailer now and then."""
    out = bytearray()
    at = 0
    while at < len(data):
        size = draw(st.integers(1, max(1, len(data) - at)))
        extension = draw(st.sampled_from([b"", b"", b";x=1", b";ext"]))
        size_text = b"%x" % size if draw(st.booleans()) else b"%X" % size
        out += size_text + extension + b"\r\n" + data[at : at + size] + b"\r\n"
        at += size
    out += b"0\r\n"
    out += draw(st.sampled_from([b"", b"", b"x-trailer: 1\r\n"]))
    return bytes(out + b"\r\n")


@st.composite
def framing(draw: st.DrawFn, data: bytes, *, odd: bool) -> tuple[list[bytes], bytes]:
    """Length and encoding header lines for ``data``, and the bytes that follow the head: a
    length or chunks that say what they carry, or (``odd``) any other combination."""
    kinds = ["none", "wrong", "twice", "odd", "both", "te"] if odd else ["length", "chunked"]
    kind = draw(st.sampled_from(kinds))
    length = b"content-length: %d" % len(data)
    if kind == "length":
        return [length], data
    if kind == "chunked":
        return [b"transfer-encoding: chunked"], draw(chunked(data))
    if kind == "none":
        return [], data
    if kind == "wrong":
        declared = draw(st.integers(0, 2 * len(data) + 8))
        return [b"content-length: %d" % declared], data
    if kind == "twice":
        other = draw(st.integers(0, len(data) + 4))
        return [length, b"content-length: %d" % other], data
    if kind == "odd":
        value = draw(
            st.sampled_from(
                [b"-1", b"+%d" % len(data), b" %d " % len(data), b"0x10", b"1e3", b"", b"99" * 20]
            )
        )
        return [b"content-length: " + value], data
    if kind == "both":
        return [length, b"transfer-encoding: chunked"], draw(chunked(data))
    encoding = draw(st.sampled_from([b"gzip", b"chunked, gzip", b"gzip, chunked", b"identity"]))
    return [b"transfer-encoding: " + encoding], data


_EXTRA_HEADERS = st.sampled_from(
    [
        b"content-type: application/json",
        b"content-type: text/plain; charset=latin-1",
        b"accept: text/event-stream",
        b"expect: 100-continue",
        b"connection: keep-alive",
        b"connection: close",
        b"connection: upgrade\r\nupgrade: websocket",
        b"connection: upgrade\r\nupgrade: h2c",
        b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        b"traceparent: 00-00000000000000000000000000000000-0000000000000000-ff",
        b"traceparent: zz",
        b"tracestate: a=b,c=" + b"d" * 300,
        b"authorization: Bearer x",
        b"user-agent: fuzz/\xe9\xff",
        b"host: other",
        b"x-forwarded-for: 10.0.0.1",
    ]
)


@st.composite
def headers(draw: st.DrawFn) -> list[bytes]:
    """Header lines other than framing: ``host`` (usually once), known ones and random ones."""
    lines = [b"host: proxy"] * draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
    lines += draw(st.lists(_EXTRA_HEADERS, max_size=4))
    lines += draw(st.lists(st.tuples(_TOKEN, _VALUE).map(b": ".join), max_size=3))
    return lines


@st.composite
def http_request(draw: st.DrawFn) -> bytes:
    """One drawn HTTP/1.1 request, as bytes."""
    path = draw(st.sampled_from(PROXIED * 3 + OTHERS))
    # Each part is odd only now and then, so that most requests get past the parser to the
    # app's own checks, and the odd parts meet each other too.
    parts = st.sampled_from(["method", "version", "framing", "newline"])
    odd = draw(st.lists(parts, max_size=2)) if draw(st.integers(0, 3)) == 3 else []
    method = draw(_ODD_METHODS if "method" in odd else _KNOWN_METHODS)
    data = draw(jsontext.body(path)) if method != b"GET" or draw(st.booleans()) else b""
    framing_lines, sent = draw(framing(data, odd="framing" in odd))
    lines = draw(headers()) + framing_lines
    lines = draw(st.permutations(lines))
    newline = b"\n" if "newline" in odd else b"\r\n"
    version = draw(_ODD_VERSIONS) if "version" in odd else b"HTTP/1.1"
    start = method + b" " + draw(target(path)) + b" " + version
    return newline.join([start, *lines]) + newline + newline + sent


def client_input() -> st.SearchStrategy[bytes]:
    """What a client sends on one connection: a drawn request, a seed as it is or mutated, a
    mutated drawn request, or two requests pipelined."""
    corpus = st.sampled_from(seeds("requests"))
    return st.one_of(
        http_request(),
        corpus,
        corpus.flatmap(mutated),
        http_request().flatmap(mutated),
        st.tuples(http_request(), http_request()).map(b"".join),
    )
