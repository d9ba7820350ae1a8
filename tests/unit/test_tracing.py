"""The tracing pieces that need no process: the trace context on the pool Lease, the swap's
phases, console spans as one JSON line, the Jaeger waterfall, the proxy's metrics view and
``--log-format`` after the subcommand."""

from __future__ import annotations

import io
import json
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry, Counter, generate_latest

from controlplane.api.v1alpha1.activation import (
    TARGET_ANNOTATION,
    TRACEPARENT_ANNOTATION,
    claimed,
    new_pool_lease,
    read_activation,
    released,
    renewed,
)
from controlplane.cli import build_parser
from controlplane.controllers.modelpool.intent import LeaseObserver
from controlplane.controllers.modelpool.phases import OWNER_UP, WAIT_FOR_PODS_GONE, SwapPhases
from controlplane.envtest.jaeger import compact, render_waterfall, waterfall
from controlplane.runtime.metrics import FilteredRegistry
from controlplane.runtime.tracing import (
    console_exporter,
    context_of_traceparent,
    traceparent_of,
)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


# -- the trace context on the pool Lease ---------------------------------------------------------


def test_a_claim_carries_the_swaps_traceparent_and_release_clears_it() -> None:
    lease = new_pool_lease("ns", "gpu-0", "proxy-0", "b", 45, TRACEPARENT)
    assert read_activation(lease).traceparent == TRACEPARENT
    assert read_activation(renewed(lease)).traceparent == TRACEPARENT  # kept while it runs
    gone = released(lease)
    assert read_activation(gone).traceparent is None
    assert TRACEPARENT_ANNOTATION not in gone["metadata"]["annotations"]
    # A new claim for another target without a context drops the old one: it was another swap's.
    taken = claimed(lease, "proxy-1", "c", 45)
    assert read_activation(taken).traceparent is None
    assert taken["metadata"]["annotations"][TARGET_ANNOTATION] == "c"
    retaken = claimed(gone, "proxy-1", "c", 45, "00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    assert read_activation(retaken).traceparent == "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    untraced = new_pool_lease("ns", "gpu-0", "proxy-0", "b", 45)
    assert TRACEPARENT_ANNOTATION not in untraced["metadata"]["annotations"]


def test_the_controllers_intent_carries_the_traceparent() -> None:
    observer = LeaseObserver(clock=lambda: 0.0)
    lease = new_pool_lease("ns", "gpu-0", "proxy-0", "b", 45, TRACEPARENT)
    lease["metadata"]["resourceVersion"] = "1"
    observer.on_add(lease, True)
    intent = observer.intent(lease)
    assert intent is not None
    assert intent.traceparent == TRACEPARENT


def test_traceparent_round_trip_and_invalid_input() -> None:
    context = context_of_traceparent(TRACEPARENT)
    assert context is not None
    span = trace.get_current_span(context)
    assert traceparent_of(span) == TRACEPARENT
    assert context_of_traceparent(None) is None
    assert context_of_traceparent("garbage") is None
    assert traceparent_of(trace.INVALID_SPAN) is None


# -- the swap's waiting phases -------------------------------------------------------------------


def test_wait_for_pods_gone_runs_from_the_first_drain_to_the_owner_going_up() -> None:
    phases = SwapPhases()
    assert phases.owner_may_go_up("ns/p", "b", 5) is None  # nothing was drained: no wait
    phases.drained("ns/p", "a", "b", 10)
    phases.drained("ns/p", "c", "b", 20)  # a second member joins the same wait
    span = phases.owner_may_go_up("ns/p", "b", 50)
    assert span is not None
    assert (span.name, span.start_ns, span.end_ns) == (WAIT_FOR_PODS_GONE, 10, 50)
    assert span.attributes["modelpool.member"] == "a"
    assert phases.owner_may_go_up("ns/p", "b", 60) is None  # reported once


def test_owner_up_runs_from_the_write_to_the_owner_ready_and_drops_a_changed_owner() -> None:
    phases = SwapPhases()
    phases.raised("ns/p", "b", 100)
    assert phases.owner_ready("ns/p", None, 150) is None  # not ready yet: still under way
    span = phases.owner_ready("ns/p", "b", 400)
    assert span is not None
    assert (span.name, span.start_ns, span.end_ns) == (OWNER_UP, 100, 400)
    phases.raised("ns/p", "b", 500)
    assert phases.owner_ready("ns/p", "a", 600) is None  # withdrawn: back to a, not "b up"
    phases.drained("ns/p", "a", "b", 700)
    assert phases.owner_may_go_up("ns/p", "c", 800) is None  # the wait was for another owner
    phases.drained("ns/p", "a", "b", 900)
    phases.forget("ns/p")
    assert phases.owner_may_go_up("ns/p", "b", 1000) is None


# -- console spans -------------------------------------------------------------------------------


def test_console_spans_are_one_json_object_per_line() -> None:
    out = io.StringIO()
    exporter = console_exporter()
    exporter.out = out
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outer"), tracer.start_as_current_span("inner"):
        pass
    lines = out.getvalue().splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["inner", "outer"]


# -- the waterfall -------------------------------------------------------------------------------


def _span(span_id: str, name: str, start: int, duration: int, parent: str | None = None,
          process: str = "p1", **tags: Any) -> dict[str, Any]:  # fmt: skip
    refs = [{"refType": "CHILD_OF", "traceID": "t", "spanID": parent}] if parent else []
    return {
        "spanID": span_id,
        "operationName": name,
        "startTime": start,
        "duration": duration,
        "references": refs,
        "processID": process,
        "tags": [{"key": k.replace("__", "."), "value": v} for k, v in tags.items()],
    }


TRACE = {
    "spans": [
        _span("r2", "reconcile", 1_300_000, 1_000, "s", "p2"),
        _span("d2", "drain decision", 1_300_100, 10, "r2", "p2"),
        _span("req", "request", 1_000_000, 5_000_000, "client-span"),
        _span("h", "hold", 1_000_100, 4_000_000, "req"),
        _span("s", "swap", 1_000_200, 4_000_000, "h"),
        _span("r1", "reconcile", 1_200_000, 10_000, "s", "p2"),
        _span(
            "w",
            "write status",
            1_201_000,
            5_000,
            "r1",
            "p2",
            modelpool__released="a",
            modelpool__granted="",
        ),
        _span("k", "kube PUT", 1_201_500, 1_000, "w", "p2"),
    ],
    "processes": {
        "p1": {"serviceName": "modelpool-router-proxy"},
        "p2": {"serviceName": "modelpool-operator"},
    },
}


def test_waterfall_orders_by_start_under_parents_with_offsets_and_depth() -> None:
    rows = waterfall(TRACE)
    assert [(r.name, r.depth, r.start_us) for r in rows] == [
        ("request", 0, 0),  # its parent is the client's span, outside the trace: a root
        ("hold", 1, 100),
        ("swap", 2, 200),
        ("reconcile", 3, 200_000),
        ("write status", 4, 201_000),
        ("kube PUT", 5, 201_500),
        ("reconcile", 3, 300_000),
        ("drain decision", 4, 300_100),
    ]
    assert rows[3].service == "modelpool-operator"


def test_compact_folds_reconciles_that_changed_nothing_and_render_hides_api_calls() -> None:
    rows, folded = compact(waterfall(TRACE))
    assert folded == 1
    names = [r.name for r in rows]
    assert names == ["request", "hold", "swap", "reconcile", "write status", "kube PUT"]
    text = render_waterfall(rows)
    assert "kube PUT" not in text
    assert "released a, granted -" in text  # what the write decided
    assert text.splitlines()[1].startswith("modelpool-router-proxy   request")


# -- the proxy's metrics view --------------------------------------------------------------------


def test_the_filtered_registry_drops_families_by_prefix() -> None:
    registry = CollectorRegistry()
    Counter("controller_runtime_reconcile", "x", ("controller",), registry=registry).labels(
        "c"
    ).inc()
    Counter("modelpool_proxy_requests", "y", registry=registry).inc()
    text = generate_latest(FilteredRegistry(registry, ("controller_runtime_",))).decode()
    assert "modelpool_proxy_requests_total 1.0" in text
    assert "controller_runtime" not in text


# -- --log-format where the README says -----------------------------------------------------------


def test_log_options_are_accepted_before_and_after_the_subcommand() -> None:
    parser = build_parser()
    assert parser.parse_args(["sim", "--log-format", "json"]).log_format == "json"
    assert parser.parse_args(["--log-format", "json", "sim"]).log_format == "json"
    assert parser.parse_args(["sim"]).log_format == "text"
    assert parser.parse_args(["sim", "--log-level", "DEBUG"]).log_level == "DEBUG"
    assert parser.parse_args(["--log-level", "DEBUG", "sim"]).log_level == "DEBUG"
