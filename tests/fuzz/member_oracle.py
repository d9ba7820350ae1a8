"""Whether the client got what a drawn member answer calls for (the member-side oracle).

General half, for every case: the connection ends within a bound (never a hung client), what
came back is exactly one well-formed HTTP/1.1 answer, and any 4xx/5xx is in the error shape.
Exact half, from the case's :class:`~tests.fuzz.member_scripts.Expected`: the status, the code,
the body bytes, how the stream ended.
"""

from __future__ import annotations

import re

from tests.fuzz.answers import Answer, BadAnswer, parse_answers
from tests.fuzz.member_scripts import CUT, ERROR, EVENT_ERROR, UNTOUCHED, Expected
from tests.fuzz.shapes import answer_shape_problem, error_code, error_shape_problem
from tests.fuzz.wire import Received

_LAST_EVENT = re.compile(rb"data: ([^\n]*)\n\n\Z")


def _event_error_problem(answer: Answer, sent: bytes) -> str | None:
    if answer.framing != "chunked" or not answer.complete:
        return f"the stream did not end with its terminating chunk: {answer!r}"
    start = answer.body.rfind(b"data: ")
    matched = _LAST_EVENT.match(answer.body, max(start, 0))
    if start < 0 or matched is None:
        return f"the stream does not end with one data event: {answer.body[-300:]!r}"
    if problem := error_shape_problem(matched.group(1)):
        return f"the last event is not an error: {problem}"
    before = answer.body[:start]
    if not sent.startswith(before):
        return f"what came before the error event is not the member's: {before[-200:]!r}"
    if before and not before.endswith(b"\n\n"):
        return f"the error event is glued to half an event: {before[-200:]!r}"
    return None


def _exact_problem(answer: Answer, received: Received, expected: Expected) -> str | None:
    if expected.statuses and answer.status not in expected.statuses:
        return f"status {answer.status}, expected {sorted(expected.statuses)}: {answer!r}"
    if expected.kind == UNTOUCHED:
        if not answer.complete or answer.body != expected.body:
            return f"the body was changed: {answer.body[:200]!r} != {expected.body[:200]!r}"
        if answer.header("content-type") != expected.content_type:
            return f"content-type {answer.header('content-type')!r} != {expected.content_type!r}"
    elif expected.kind == ERROR:
        if problem := answer_shape_problem(answer, extra_fields=expected.member_error):
            return problem
        if expected.codes and error_code(answer) not in expected.codes:
            return f"code {error_code(answer)!r}, expected {sorted(expected.codes)}"
    elif expected.kind == EVENT_ERROR:
        return _event_error_problem(answer, expected.body)
    elif expected.kind == CUT:
        if answer.complete:
            return f"a cut body ended as if complete ({answer.framing}): {answer.body[-100:]!r}"
        if not expected.body.startswith(answer.body):
            return f"the cut body is not the member's: {answer.body[:200]!r}"
        if received.ended == "open":
            return "the cut body's connection was left open"
    return None


def answer_problems(received: Received, expected: Expected) -> list[str]:
    """Everything wrong with what the client received for ``expected``."""
    if received.ended == "open":
        return [f"no end of the answer after {received.seconds:.1f} s: {received.data[:300]!r}"]
    try:
        answers = parse_answers(received.data)
    except BadAnswer as err:
        return [f"not an HTTP answer ({err}): {received.data[:300]!r}"]
    if len(answers) != 1:
        return [f"{len(answers)} answers to one request: {received.data[:300]!r}"]
    answer = answers[0]
    general = answer.status >= 400 and expected.kind != ERROR
    if general and (problem := answer_shape_problem(answer, extra_fields=True)):
        return [problem]
    problem = _exact_problem(answer, received, expected)
    return [problem] if problem else []
