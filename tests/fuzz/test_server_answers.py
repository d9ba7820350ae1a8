"""The two answers the request-path fuzzer found outside the proxy's shape, kept as plain tests:
a head the HTTP parser rejects, and a route spelled with a trailing slash (docs/fuzzing.md,
"Found so far"). Both came from the layers under the app, which the fuzzer reaches and the
app's own tests do not.
"""

from __future__ import annotations

from tests.fuzz.answers import parse_answers
from tests.fuzz.servers import Harness
from tests.fuzz.shapes import answer_shape_problem
from tests.fuzz.wire import exchange


def test_a_malformed_head_is_a_400_in_the_proxy_error_shape(request_path: Harness) -> None:
    received = exchange(request_path.port, b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n")
    [answer] = parse_answers(received.data)
    assert answer.status == 400
    assert answer_shape_problem(answer) is None, answer


def test_a_route_with_a_trailing_slash_is_not_redirected(request_path: Harness) -> None:
    data = b"GET /healthz/ HTTP/1.1\r\nhost: evil.example\r\nconnection: close\r\n\r\n"
    [answer] = parse_answers(exchange(request_path.port, data).data)
    assert answer.status == 404, answer.headers
    assert answer_shape_problem(answer) is None, answer
