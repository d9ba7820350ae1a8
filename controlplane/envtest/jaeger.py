"""A Jaeger all-in-one on loopback: the trace backend of the e2e tier, `make demo`, `make dev`.

``hack/build-jaeger.sh`` builds ``cmd/jaeger`` (Jaeger v2: an OpenTelemetry collector with an
in-memory store and the query API) into the same version-keyed cache as the control-plane
binaries. :class:`JaegerBackend` starts it with a configuration of its own, every listener on a
free loopback port (the stock configuration binds fixed ports on every interface: two runs, or a
developer's own Jaeger, would collide), and only what is needed: the OTLP/HTTP receiver, the
memory store, the query API and a health check.

A process exports to it with the standard variables :meth:`JaegerBackend.otlp_env` gives
(``OTEL_EXPORTER_OTLP_ENDPOINT``, a short batch delay so spans arrive while a test waits for them).
:meth:`JaegerBackend.trace` reads one trace through the query API (``GET /api/traces/{id}``), and
:func:`waterfall` / :func:`render_waterfall` turn it into the rows a terminal can show: service,
span, start offset and duration, in start order, indented by depth.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from controlplane.envtest.binaries import cache_root, find_executable
from controlplane.envtest.ports import free_port
from controlplane.envtest.process import ManagedProcess

#: The version ``hack/build-jaeger.sh`` builds by default (kept in step with it).
JAEGER_VERSION: Final = "v1.76.0"
#: An executable to use instead of the cached build.
JAEGER_BINARY_VARIABLE: Final = "JAEGER_BINARY"
START_TIMEOUT_SECONDS: Final = 60.0

_CONFIG: Final = """\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def find_jaeger() -> Path:
    """``$JAEGER_BINARY``, else the cached build of :data:`JAEGER_VERSION`; raises
    :class:`BinaryNotFoundError` naming the command that builds it."""
    cached = cache_root() / "bin" / f"jaeger-{JAEGER_VERSION}" / "jaeger"
    return find_executable(
        JAEGER_BINARY_VARIABLE, cached, "Jaeger binary", "run hack/build-jaeger.sh"
    )


class JaegerBackend:
    """One Jaeger all-in-one process with its listeners on free loopback ports."""

    def __init__(self, workdir: Path, binary: Path | None = None) -> None:
        self.binary = binary or find_jaeger()
        self.workdir = workdir
        self.otlp_port = free_port()
        self.query_port = free_port()
        self.health_port = free_port()
        query_grpc = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "jaeger.yaml"
        self.config.write_text(
            _CONFIG.format(
                health=self.health_port,
                query=self.query_port,
                query_grpc=query_grpc,
                otlp=self.otlp_port,
            )
        )
        # The query service traces itself to the default OTLP gRPC port unless told not to
        # (``enable_tracing: false`` above); it would dial a port that is nobody's, or a
        # developer's own collector. The variables keep any other component quiet too.
        quiet = {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "none"}
        self.process = ManagedProcess(
            "jaeger",
            [str(self.binary), "--config", str(self.config)],
            workdir / "jaeger.log",
            env=quiet,
        )

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}"

    @property
    def query_url(self) -> str:
        """The query API and the (placeholder) UI."""
        return f"http://127.0.0.1:{self.query_port}"

    def otlp_env(self, service: str | None = None) -> dict[str, str]:
        """The ``OTEL_*`` variables that make a process export its spans here."""
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_endpoint,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        if service is not None:
            env["OTEL_SERVICE_NAME"] = service
        return env

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> JaegerBackend:
        """Start and wait until the query API answers; raises an ``EnvtestError`` quoting the
        log when it cannot (a test tier must fail, not skip, without its backend)."""
        self.process.start()
        self.process.wait_until(self._answers, timeout)
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.query_url}/api/services", timeout=1) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> JaegerBackend:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace as the query API holds it now (``data[0]``), or None when it has none."""
        url = f"{self.query_url}/api/traces/{trace_id}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise
        data = body.get("data") or []
        return dict(data[0]) if data else None


# -- the waterfall -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One span of a trace: who, what, when (µs from the trace's first span), how long, how deep."""

    service: str
    name: str
    start_us: int
    duration_us: int
    depth: int
    span_id: str
    tags: Mapping[str, Any]
    parent_id: str | None = None


def waterfall(trace: Mapping[str, Any]) -> list[WaterfallRow]:
    """A Jaeger trace (query API JSON) as rows in start order, children under their parents."""
    spans: Sequence[Mapping[str, Any]] = trace.get("spans") or []
    processes: Mapping[str, Any] = trace.get("processes") or {}
    if not spans:
        return []
    by_id = {str(s["spanID"]): s for s in spans}

    def parent_of(span: Mapping[str, Any]) -> str | None:
        for ref in span.get("references") or []:
            if ref.get("refType") == "CHILD_OF" and str(ref.get("spanID")) in by_id:
                return str(ref["spanID"])
        return None

    children: dict[str | None, list[Mapping[str, Any]]] = {}
    for span in spans:
        children.setdefault(parent_of(span), []).append(span)
    origin = min(int(s["startTime"]) for s in spans)
    rows: list[WaterfallRow] = []

    def visit(span: Mapping[str, Any], depth: int, parent: str | None) -> None:
        process = processes.get(str(span.get("processID"))) or {}
        tags = {str(t["key"]): t.get("value") for t in span.get("tags") or []}
        rows.append(
            WaterfallRow(
                service=str(process.get("serviceName") or "?"),
                name=str(span["operationName"]),
                start_us=int(span["startTime"]) - origin,
                duration_us=int(span["duration"]),
                depth=depth,
                span_id=str(span["spanID"]),
                tags=tags,
                parent_id=parent,
            )
        )
        for child in sorted(children.get(str(span["spanID"]), []), key=_start):
            visit(child, depth + 1, str(span["spanID"]))

    for root in sorted(children.get(None, []), key=_start):
        visit(root, 0, None)
    return rows


#: Spans that are only worth showing when something happened under them.
_BUSY_WORK: Final = ("slots probe", "write status")


def compact(rows: Sequence[WaterfallRow]) -> tuple[list[WaterfallRow], int]:
    """``rows`` without the reconciles that changed nothing (no probe, no write under them):
    a swap wakes the controller on every watch event, and those reconciles only say "still
    waiting", which the phase spans say once. Returns the rows kept and how many were folded."""
    below: dict[str, list[WaterfallRow]] = {}
    for row in rows:
        if row.parent_id is not None:
            below.setdefault(row.parent_id, []).append(row)

    def busy(row: WaterfallRow) -> bool:
        return row.name in _BUSY_WORK or any(busy(child) for child in below.get(row.span_id, []))

    idle = {r.span_id for r in rows if r.name == "reconcile" and not busy(r)}
    dropped: set[str] = set(idle)
    kept = []
    for row in rows:  # parents come before their children
        if row.span_id in dropped or row.parent_id in dropped:
            dropped.add(row.span_id)
            continue
        kept.append(row)
    return kept, len(idle)


def _start(span: Mapping[str, Any]) -> int:
    return int(span["startTime"])


#: Spans a terminal waterfall leaves out unless asked: the API calls under everything.
NOISE_PREFIXES: Final = ("kube ",)


def note(row: WaterfallRow) -> str:
    """The few attributes that say what a span did: the member, a decision, an outcome."""
    tags = row.tags
    member = tags.get("modelpool.member")
    if row.name == "write status":
        released, granted = tags.get("modelpool.released"), tags.get("modelpool.granted")
        return f"released {released or '-'}, granted {granted or '-'}"
    parts = [str(v) for v in (member, tags.get("modelpool.outcome")) if v not in (None, "")]
    return ": ".join(parts)


def render_waterfall(
    rows: Sequence[WaterfallRow], *, width: int = 40, hide: Sequence[str] = NOISE_PREFIXES
) -> str:
    """Rows as text: service, indented span name, start offset, duration and a bar."""
    shown = [r for r in rows if not r.name.startswith(tuple(hide))]
    if not shown:
        return "(no spans)"
    total = max(r.start_us + r.duration_us for r in shown) or 1
    lines = [f"{'service':<24} {'span':<34} {'start':>9} {'duration':>9}  timeline"]
    bar_width = width + 2
    for row in shown:
        begin = row.start_us * width // total
        length = max(1, row.duration_us * width // total)
        bar = " " * begin + "█" * min(length, width - begin if width > begin else 1)
        name = ("  " * row.depth + row.name)[:34]
        lines.append(
            f"{row.service[:24]:<24} {name:<34} {row.start_us / 1e6:>8.3f}s "
            f"{row.duration_us / 1e6:>8.3f}s  {'|' + f'{bar:<{width}}' + '|':<{bar_width}} "
            f"{note(row)}".rstrip()
        )
    return "\n".join(lines)
