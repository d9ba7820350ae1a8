"""Byte-level mutations of a seed, drawn by hypothesis: insert, delete, flip, duplicate, splice.

A structured generator only produces what its author thought of; mutating a real request or
answer at drawn positions reaches the shapes in between (a CRLF lost inside a header, a length
cut in half, a chunk size with a stray byte). hypothesis shrinks a failing example towards fewer
and smaller mutations, so what is reported is close to the seed it came from.
"""

from __future__ import annotations

from hypothesis import strategies as st

#: Tokens that mean something to an HTTP or JSON parser, spliced in at drawn positions.
TOKENS = (
    b"\r\n",
    b"\n",
    b"\r",
    b"\r\n\r\n",
    b"\x00",
    b" ",
    b"\t",
    b":",
    b"0\r\n\r\n",
    b"ffffffffffffffff\r\n",
    b"transfer-encoding: chunked\r\n",
    b"content-length: 18446744073709551616\r\n",
    b"content-length: -1\r\n",
    b"{",
    b"[",
    b'"',
    b"\\u0000",
    b"\\ud800",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"1e99999",
    b"data: ",
    b"\n\n",
)


@st.composite
def mutated(draw: st.DrawFn, seed: bytes, max_ops: int = 4) -> bytes:
    """``seed`` with one to ``max_ops`` mutations applied in turn."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(("insert", "delete", "flip", "duplicate", "token", "truncate")))
        at = draw(st.integers(0, len(data)))
        if op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "duplicate":
            span = data[at : at + draw(st.integers(1, 64))]
            data[at:at] = span * draw(st.integers(1, 3))
        elif op == "token":
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif op == "truncate":
            del data[at:]
    return bytes(data)
