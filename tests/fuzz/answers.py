"""A strict reader of the HTTP/1.1 answers a client got on one connection, from its raw bytes.

The oracles judge what a client sees on the wire, so they parse it themselves rather than
through a client library that would forgive (or hide) a malformed head, a missing terminating
chunk or bytes after the last answer. Pipelined answers are read in order; an interim ``100
Continue`` is an answer of its own. Only the framing HTTP/1.1 allows is accepted: a
``content-length``, ``transfer-encoding: chunked``, or (last on the connection) until the close.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STATUS_LINE = re.compile(rb"HTTP/1\.[01] ([1-5][0-9]{2}) [\x20-\x7e\x80-\xff]*")
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([\x20-\x7e\x80-\xff\t]*?)[ \t]*")
_CHUNK_SIZE = re.compile(rb"([0-9a-fA-F]{1,16})(;[^\r\n]*)?")


class BadAnswer(Exception):
    """The bytes are not a well-formed HTTP/1.1 answer."""


@dataclass
class Answer:
    """One answer: its status, headers (names in lower case, in order) and body as sent."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    #: "length", "chunked", "close" or "none" (1xx, 204, 304).
    framing: str = "none"
    #: Whether the body ended as its framing says (the terminating chunk, all declared bytes).
    complete: bool = True

    def header(self, name: str) -> str | None:
        """The last value of header ``name``, if sent."""
        values = [value for key, value in self.headers if key == name]
        return values[-1] if values else None


def _line(data: bytes, at: int) -> tuple[bytes, int] | None:
    end = data.find(b"\r\n", at)
    return None if end < 0 else (data[at:end], end + 2)


def _head(data: bytes, at: int) -> tuple[Answer, int]:
    first = _line(data, at)
    if first is None:
        raise BadAnswer(f"a cut status line: {data[at : at + 80]!r}")
    line, at = first
    matched = _STATUS_LINE.fullmatch(line)
    if matched is None:
        raise BadAnswer(f"not a status line: {line[:80]!r}")
    answer = Answer(int(matched.group(1)))
    while True:
        found = _line(data, at)
        if found is None:
            raise BadAnswer(f"a head cut off after {answer.headers!r}")
        line, at = found
        if not line:
            return answer, at
        header = _HEADER_LINE.fullmatch(line)
        if header is None:
            raise BadAnswer(f"not a header line: {line[:80]!r}")
        answer.headers.append((header.group(1).decode().lower(), header.group(2).decode("latin-1")))


def _chunked(data: bytes, at: int, answer: Answer) -> int:
    body = bytearray()
    while True:
        found = _line(data, at)
        if found is None:
            answer.complete = False
            break
        line, next_at = found
        size = _CHUNK_SIZE.fullmatch(line)
        if size is None:
            raise BadAnswer(f"not a chunk size: {line[:80]!r}")
        length = int(size.group(1), 16)
        if length == 0:
            while (trailer := _line(data, next_at)) is not None and trailer[0]:
                next_at = trailer[1]
            if trailer is None:
                answer.complete = False
                at = len(data)
                break
            at = trailer[1]
            break
        if len(data) < next_at + length + 2:
            body += data[next_at : next_at + length]
            answer.complete = False
            at = len(data)
            break
        if data[next_at + length : next_at + length + 2] != b"\r\n":
            raise BadAnswer("a chunk not followed by CRLF")
        body += data[next_at : next_at + length]
        at = next_at + length + 2
    answer.body = bytes(body)
    return at


def parse_answers(data: bytes) -> list[Answer]:
    """Every answer in ``data`` (all a connection received until it closed), in order; raises
    :class:`BadAnswer` for anything that is not an answer, including stray bytes at the end."""
    answers: list[Answer] = []
    at = 0
    while at < len(data):
        answer, at = _head(data, at)
        answers.append(answer)
        encoding = (answer.header("transfer-encoding") or "").lower()
        length = answer.header("content-length")
        if answer.status < 200 or answer.status in (204, 304):
            continue
        if encoding:
            if encoding != "chunked" or length is not None:
                raise BadAnswer(f"framing: transfer-encoding {encoding!r}, length {length!r}")
            answer.framing = "chunked"
            at = _chunked(data, at, answer)
        elif length is not None:
            lengths = [value for name, value in answer.headers if name == "content-length"]
            if not length.isdigit() or len(lengths) > 1:
                raise BadAnswer(f"a bad or repeated content-length: {lengths!r}")
            answer.framing = "length"
            answer.body = data[at : at + int(length)]
            answer.complete = len(answer.body) == int(length)
            at += len(answer.body)
        else:
            answer.framing = "close"
            answer.body = data[at:]
            at = len(data)
    return answers
