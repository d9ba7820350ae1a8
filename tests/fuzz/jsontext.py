"""JSON *text* for request bodies, drawn as bytes rather than as Python values.

Drawn as text so that it can say what ``json.dumps`` never would: a key twice, a number of a
thousand digits or ``1e99999``, a lone surrogate escape, ``NaN``, nesting hundreds deep, bytes
that are not UTF-8, a byte-order mark, trailing garbage. The bodies are shaped like the
OpenAI requests the proxied paths take (``model``, ``messages``/``prompt``/``input``,
``stream``), with every field's type also drawn wrong some of the time.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from tests.fuzz.proxy import MODELS

_NUMBERS = st.sampled_from(
    [b"0", b"-0", b"1", b"-1", b"1.5", b"1e400", b"-1e400", b"1e-400", b"9" * 400, b"0.0000001"]
) | st.integers().map(lambda n: str(n).encode())
_LITERALS = st.sampled_from([b"null", b"true", b"false", b"NaN", b"Infinity", b"-Infinity"])
_ESCAPES = st.sampled_from([b"\\n", b"\\u0000", b"\\ud800", b"\\udfff\\ud800", b'\\"', b"\\\\"])


def _string_text(text: str | bytes) -> bytes:
    return json.dumps(text).encode() if isinstance(text, str) else b'"' + text + b'"'


_STRINGS = (
    st.text(max_size=20).map(_string_text)
    | st.sampled_from(MODELS).map(_string_text)
    | st.lists(_ESCAPES, max_size=3).map(lambda parts: b'"' + b"".join(parts) + b'"')
    | st.binary(max_size=8)
    .filter(lambda raw: b'"' not in raw and b"\\" not in raw)
    .map(_string_text)
)
_SCALARS = _NUMBERS | _LITERALS | _STRINGS


def _array(items: list[bytes]) -> bytes:
    return b"[" + b",".join(items) + b"]"


def _object(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return b"{" + b",".join(key + b":" + value for key, value in pairs) + b"}"


_KEYS = st.sampled_from([b'"model"', b'"messages"', b'"role"', b'"content"', b'"stream"']) | (
    _STRINGS
)
values = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4).map(_array)
        | st.lists(st.tuples(_KEYS, children), max_size=4).map(_object)
    ),
    max_leaves=12,
)


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    """Arrays or objects nested 30 to 3,000 deep (the proxy refuses beyond 64: 400)."""
    depth = draw(st.sampled_from([65, 100, 3000]) | st.integers(30, 3000))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = b"1" if opener == b"[" else b"{}"
    return opener * depth + inner + closer * draw(st.sampled_from([depth, depth - 1]))


_MESSAGE = st.one_of(
    st.tuples(st.sampled_from(["user", "system", "assistant"]), st.text(max_size=30)).map(
        lambda pair: json.dumps({"role": pair[0], "content": pair[1]}).encode()
    ),
    values,
)


@st.composite
def openai_body(draw: st.DrawFn, path: str) -> bytes:
    """A JSON object for ``path``: its required field right or wrong, other fields drawn."""
    pairs: list[tuple[bytes, bytes]] = []
    model = draw(st.sampled_from(MODELS).map(_string_text) | values | st.just(b""))
    if model:
        pairs.append((b'"model"', model))
    field = {
        "/v1/chat/completions": b'"messages"',
        "/v1/completions": b'"prompt"',
        "/v1/embeddings": b'"input"',
    }.get(path, b'"messages"')
    required = draw(
        st.lists(_MESSAGE, min_size=1, max_size=3).map(_array) | _STRINGS | values | deep()
    )
    pairs.append((field, required))
    if draw(st.booleans()):
        pairs.append((b'"stream"', draw(st.sampled_from([b"true", b"false"]) | values)))
    pairs += draw(st.lists(st.tuples(_KEYS, values), max_size=3))
    if draw(st.booleans()):  # a key twice: which one wins is the parser's choice
        pairs.append(draw(st.sampled_from(pairs)))
    pairs = draw(st.permutations(pairs))
    return _object(pairs)


@st.composite
def body(draw: st.DrawFn, path: str) -> bytes:
    """A request body for ``path``: mostly an OpenAI-shaped object, sometimes anything else,
    sometimes broken after the fact (a BOM, invalid UTF-8, trailing bytes, cut short)."""
    text: bytes = draw(
        st.one_of(
            openai_body(path),
            openai_body(path),
            values,
            deep(),
            st.binary(max_size=64),
            st.just(b""),
        )
    )
    damage = draw(st.sampled_from(["none", "none", "bom", "invalid-utf8", "trailing", "cut"]))
    if damage == "bom":
        return b"\xef\xbb\xbf" + text
    if damage == "invalid-utf8" and text:
        at = draw(st.integers(0, len(text)))
        bad: bytes = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"]))
        return text[:at] + bad + text[at:]
    if damage == "trailing":
        tail: bytes = draw(st.sampled_from([b" ", b"\n", b"x", b"{}", b"\x00"]))
        return text + tail
    if damage == "cut" and text:
        return text[: draw(st.integers(0, len(text) - 1))]
    return text
