"""OpenTelemetry set-up from the standard ``OTEL_*`` environment variables.

The framework creates spans through the OpenTelemetry API everywhere (reconciles, API calls);
without configuration they cost next to nothing. A process calls :func:`configure_tracing` once
at start: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) set, spans are
batched to that OTLP/HTTP endpoint; ``OTEL_TRACES_EXPORTER=console`` prints them; ``none`` or no
configuration leaves tracing off. ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` are read
by the SDK itself.

**Console spans are one JSON object per line.** The SDK's console exporter prints each span as
indented JSON over many lines on stdout, interleaved with the logs; a log shipper that reads one
object per line (``--log-format json``) then sees broken records. Here each span is written as
one compact JSON line to stderr (where the log lines go), so both are one object per line.

**Trace context across processes** (:func:`traceparent_of`, :func:`context_of_traceparent`): a
swap's context travels from the router-proxy to the pool controller as a W3C ``traceparent``
string on the pool's Lease (DESIGN 4.11); these two helpers are the only place it is written and
read, through the standard propagator, so the format is never spelt by hand.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

#: The header and the key of the W3C trace context.
TRACEPARENT = "traceparent"
_PROPAGATOR = TraceContextTextMapPropagator()


def one_line(span: ReadableSpan) -> str:
    """A span as one compact JSON line (the console exporter's formatter)."""
    return str(span.to_json(indent=None)) + "\n"


def console_exporter() -> ConsoleSpanExporter:
    """Spans to stderr, one JSON object per line (see the module docstring for why)."""
    return ConsoleSpanExporter(out=sys.stderr, formatter=one_line)


def traceparent_of(span: trace.Span | None = None) -> str | None:
    """The W3C ``traceparent`` of ``span`` (default: the current one), or None when it is not
    recording a valid trace (tracing off)."""
    span = span if span is not None else trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get(TRACEPARENT)


def context_of_traceparent(traceparent: str | None) -> otel_context.Context | None:
    """The context whose parent span is ``traceparent``; None when it is missing or invalid."""
    if not traceparent:
        return None
    found = _PROPAGATOR.extract({TRACEPARENT: traceparent})
    if not trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found


def link_to(spans: Sequence[trace.Span]) -> list[trace.Link]:
    """Links to the valid ``spans`` (a coalesced request links to the swap it joined)."""
    return [trace.Link(s.get_span_context()) for s in spans if s.get_span_context().is_valid]


def _exporter() -> SpanExporter | None:
    choice = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if choice == "none":
        return None
    if choice == "console":
        return console_exporter()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if choice == "otlp" or endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # reads the OTEL_EXPORTER_OTLP_* variables itself
    return None


def configure_tracing(default_service_name: str) -> bool:
    """Install an SDK tracer provider when the environment asks for one; return whether it did."""
    exporter = _exporter()
    if exporter is None:
        return False
    service = os.environ.get("OTEL_SERVICE_NAME", default_service_name)
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    if isinstance(exporter, ConsoleSpanExporter):
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing: exporting spans as service %s", service)
    return True
