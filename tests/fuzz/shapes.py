"""The proxy's error shape, checked exactly: ``{"error": {"message", "type", "code"}}``, strings.

Every non-2xx answer a client gets is meant to carry it (docs/router.md), whichever layer
produced it: the request limits, starlette's 404/405, the app's validation, a member's error
rewritten. A member's own error may keep further fields of its error object (llama.cpp's
``n_ctx``): ``extra_fields`` allows those where the answer came from a member.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fuzz.answers import Answer

REQUIRED = ("message", "type", "code")


def error_shape_problem(body: bytes, *, extra_fields: bool = False) -> str | None:
    """What is wrong with ``body`` as an error in the proxy's shape; None when nothing is."""
    try:
        document: Any = json.loads(body)
    except ValueError as err:
        return f"not JSON ({err}): {body[:200]!r}"
    if not isinstance(document, dict) or set(document) != {"error"}:
        return f"not an object with only `error`: {body[:200]!r}"
    error = document["error"]
    if not isinstance(error, dict):
        return f"`error` is not an object: {body[:200]!r}"
    missing = [key for key in REQUIRED if not isinstance(error.get(key), str)]
    if missing:
        return f"`error` lacks string {missing}: {body[:200]!r}"
    if not extra_fields and set(error) != set(REQUIRED):
        return f"`error` has fields beyond {REQUIRED}: {sorted(error)}"
    return None


def answer_shape_problem(answer: Answer, *, extra_fields: bool = False) -> str | None:
    """What is wrong with a non-2xx ``answer`` as one of ours: its type, framing and body."""
    content_type = (answer.header("content-type") or "").split(";")[0].strip()
    if content_type != "application/json":
        return f"{answer.status} with content-type {content_type!r}: {answer.body[:200]!r}"
    if not answer.complete:
        return f"{answer.status} with an incomplete body: {answer.body[:200]!r}"
    return error_shape_problem(answer.body, extra_fields=extra_fields)


def error_code(answer: Answer) -> str | None:
    """The ``code`` of an answer in the error shape, else None."""
    try:
        code = json.loads(answer.body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None
