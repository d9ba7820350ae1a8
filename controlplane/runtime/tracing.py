"""OpenTelemetry set-up from the standard ``OTEL_*`` environment variables.

The framework creates spans through the OpenTelemetry API everywhere (reconciles, API calls);
without configuration they cost next to nothing. A process calls :func:`configure_tracing` once
at start: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) set, spans are
batched to that OTLP/HTTP endpoint; ``OTEL_TRACES_EXPORTER=console`` prints them; ``none`` or no
configuration leaves tracing off. ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` are read
by the SDK itself.
"""

from __future__ import annotations

import logging
import os

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

log = logging.getLogger(__name__)


def _exporter() -> SpanExporter | None:
    choice = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if choice == "none":
        return None
    if choice == "console":
        return ConsoleSpanExporter()
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
