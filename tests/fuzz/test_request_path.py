"""Fuzzing the request path: any bytes a client sends get a well-formed, non-5xx answer in the
proxy's error shape, no exception escapes the app, and the proxy still serves afterwards
(docs/fuzzing.md). The bytes go over a real loopback socket through uvicorn's httptools
protocol, the request limits and the app, to a healthy fake member.
"""

from __future__ import annotations

import json

from hypothesis import example, given

from tests.fuzz.answers import parse_answers
from tests.fuzz.client_requests import client_input
from tests.fuzz.corpus import CORPUS
from tests.fuzz.member import healthy_answer
from tests.fuzz.profiles import fuzz_settings
from tests.fuzz.request_oracle import connection_problems
from tests.fuzz.servers import Harness
from tests.fuzz.wire import exchange

#: After the fuzzed bytes: a complete request that closes the connection once answered, so a
#: connection whose requests were all complete ends at once instead of at the keep-alive timeout.
CLOSING = b"GET /healthz HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n\r\n"
CHAT = json.dumps({"model": "solo", "messages": [{"role": "user", "content": "hi"}]}).encode()
NORMAL = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(CHAT), CHAT)
)


def still_serves(harness: Harness) -> None:
    """A normal request on a new connection is answered with the member's very bytes."""
    received = exchange(harness.port, NORMAL)
    answers = parse_answers(received.data)
    assert [a.status for a in answers] == [200], received
    assert answers[0].body == healthy_answer().sent().split(b"\r\n\r\n", 1)[1], answers[0]


@fuzz_settings(ci_examples=250)
@given(data=client_input())
@example(data=b"GET /healthz HTTP/1.1\r\nhost: proxy\r\n\r\n")
@example(data=b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03")  # a TLS ClientHello
@example(data=b"POST /v1/chat/completions HTTP/1.1\r\nhost: p\r\ncontent-length: 5\r\n\r\n[[[[[")
# Both were 500s before issue 20: a body nested too deep, one that is not UTF-8.
@example(data=(CORPUS / "requests" / "deep-json.http").read_bytes())
@example(data=(CORPUS / "requests" / "invalid-utf8.http").read_bytes())
def test_any_client_bytes_get_a_well_formed_answer(request_path: Harness, data: bytes) -> None:
    request_path.member.script = healthy_answer()
    request_path.errors.take()
    received = exchange(request_path.port, data + CLOSING)
    problems = connection_problems(received)
    assert not problems, "\n".join(problems)
    escaped = request_path.errors.take()
    assert not escaped, "\n".join(escaped)
    still_serves(request_path)
