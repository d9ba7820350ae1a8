"""What a client may get back for any bytes it sends (the request-path fuzzer's oracle).

For each connection: it ends (closed or reset by the server) within a bound, never left hanging;
what came back parses as a sequence of HTTP/1.1 answers; each answer is a ``100 Continue``, a 2xx,
or a 4xx in the proxy's error shape with ``application/json``. Nothing else: no 5xx (the member is
healthy and no request is ever held, so none is the client's doing), no 3xx (starlette's
``redirect_slashes`` once sent an empty 307 for ``/healthz/``), and no plain-text refusal from the
HTTP server underneath (uvicorn's own ``400 Invalid HTTP request received.`` once), whose answers
are the proxy's too.
"""

from __future__ import annotations

from tests.fuzz.answers import Answer, BadAnswer, parse_answers
from tests.fuzz.shapes import answer_shape_problem
from tests.fuzz.wire import Received


def answer_problem(answer: Answer) -> str | None:
    """What is wrong with one answer to client input; None when it is acceptable."""
    if answer.status == 100 or 200 <= answer.status < 300:
        return None
    if 400 <= answer.status < 500:
        return answer_shape_problem(answer)
    return f"{answer.status} for client input: {answer.headers!r} {answer.body[:300]!r}"


def connection_problems(received: Received) -> list[str]:
    """Everything wrong with what one connection received."""
    if received.ended == "open":
        return [f"the connection was still open after {received.seconds:.1f} s"]
    try:
        answers = parse_answers(received.data)
    except BadAnswer as err:
        return [f"not HTTP answers ({err}): {received.data[:300]!r}"]
    problems = [problem for answer in answers if (problem := answer_problem(answer))]
    last = answers[-1] if answers else None
    if received.ended == "closed" and last and not last.complete and last.framing != "close":
        problems.append(f"the last answer was cut: {last!r}")
    return problems
