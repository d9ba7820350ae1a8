"""Structured logs: one JSON object per line, correlated with the current trace.

Operators ship controller logs to Loki, Elasticsearch or Cloud Logging, which want one JSON object
per line; a human at a terminal wants text. Both come from the same stdlib ``logging`` calls:
:func:`configure_logging` picks the format. JSON lines carry the OpenTelemetry ``trace_id`` and
``span_id`` of the span that was current when the line was logged, so a log line of a reconcile
leads to its trace, and any ``extra={...}`` fields the caller passed.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Literal

import msgspec
from opentelemetry import trace

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_ENCODE = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "msg", "trace_id"?, "span_id"?, ...extra, "exc"?}``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _ENCODE(line).decode()


def configure_logging(level: str = "INFO", fmt: LogFormat = "text") -> None:
    """Route the root logger to stderr in ``fmt``; quiet the per-request lines of ``httpx``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
        formatter.converter = time.gmtime  # the "Z" in the timestamp must be true
    else:
        formatter = logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
