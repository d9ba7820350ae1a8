"""Structured logs: one JSON object per line, with the current trace and the caller's extras."""

from __future__ import annotations

import logging

import msgspec
from opentelemetry.sdk.trace import TracerProvider

from controlplane.runtime.logs import JsonFormatter


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("controlplane.test", logging.WARNING, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_line_is_json_with_level_logger_message_and_extras() -> None:
    line = msgspec.json.decode(
        JsonFormatter().format(_record("pool %s deferred", controller="modelpool", key="ns/p"))
    )
    assert line["level"] == "warning"
    assert line["logger"] == "controlplane.test"
    assert line["msg"] == "pool %s deferred"
    assert (line["controller"], line["key"]) == ("modelpool", "ns/p")
    assert "trace_id" not in line  # no span is current


def test_a_line_logged_inside_a_span_carries_its_ids() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("reconcile") as span:
        line = msgspec.json.decode(JsonFormatter().format(_record("inside")))
        context = span.get_span_context()
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")


def test_exceptions_are_kept_and_odd_extras_become_text() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = _record("failed", request=("ns", "p"))
        record.exc_info = sys.exc_info()
    line = msgspec.json.decode(JsonFormatter().format(record))
    assert "ValueError: boom" in line["exc"]
    assert line["request"] == "('ns', 'p')"
