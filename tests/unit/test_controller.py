"""The controller's pure logic: event mapping, predicates, and what each reconcile outcome does."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from controlplane.runtime import controller as controller_module
from controlplane.runtime.controller import (
    Controller,
    GenerationChanged,
    Request,
    Result,
    TerminalError,
    _EnqueueHandler,
    enqueue_controller_owner,
    enqueue_object,
)
from controlplane.runtime.informer import DeletedFinalStateUnknown
from controlplane.runtime.metrics import REGISTRY
from controlplane.runtime.workqueue import RateLimitingQueue

pytestmark = pytest.mark.anyio


def _obj(
    name: str, generation: int = 1, owners: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "generation": generation}
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"metadata": meta}


def test_request_keys_and_text() -> None:
    assert Request.for_object(_obj("a")) == Request("ns", "a")
    assert str(Request("ns", "a")) == "ns/a"
    assert str(Request("", "node")) == "node"


def test_owner_mapping_follows_only_the_controlling_owner_of_that_kind() -> None:
    pool = {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "ModelPool", "name": "p"}
    mapper = enqueue_controller_owner("inference.modelpool.dev", "ModelPool")
    assert list(mapper(_obj("d", owners=[{**pool, "controller": True}]))) == [Request("ns", "p")]
    assert list(mapper(_obj("d", owners=[{**pool, "controller": False}]))) == []
    other = {**pool, "apiVersion": "other.dev/v1", "controller": True}
    assert list(mapper(_obj("d", owners=[other]))) == []
    assert list(mapper(_obj("d"))) == []


def test_handler_applies_predicates_and_unwraps_tombstones() -> None:
    queue: RateLimitingQueue[Request] = RateLimitingQueue()
    handler = _EnqueueHandler(queue, enqueue_object, [GenerationChanged()])
    handler.on_update(_obj("status-only", 1), _obj("status-only", 1))
    assert len(queue) == 0
    handler.on_update(_obj("spec", 1), _obj("spec", 2))
    handler.on_add(_obj("new"), True)
    handler.on_delete(DeletedFinalStateUnknown("ns/gone", _obj("gone")))
    handler.on_add(_obj("new"), False)  # collapses with the queued one
    assert len(queue) == 3


class Scripted:
    """Returns or raises what the script says for each call, then succeeds."""

    def __init__(self, *outcomes: Result | Exception) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def reconcile(self, request: Request) -> Result:
        self.calls += 1
        if not self.outcomes:
            return Result()
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


async def _run_until(controller: Controller, reconciler: Scripted, calls: int) -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(controller.start)
        with anyio.fail_after(5):
            while True:
                if reconciler.calls >= calls and len(controller.queue) == 0:
                    break
                await anyio.sleep(0.01)
        await anyio.sleep(0.1)  # room for an unwanted extra call to show up
        group.cancel_scope.cancel()


async def test_errors_retry_until_success_and_then_stop() -> None:
    reconciler = Scripted(RuntimeError("boom"), RuntimeError("boom"))
    controller = Controller("retry", reconciler)
    controller.queue.add(Request("ns", "a"))
    await _run_until(controller, reconciler, 3)
    assert reconciler.calls == 3
    assert controller.queue.num_requeues(Request("ns", "a")) == 0


async def test_terminal_error_is_not_retried() -> None:
    reconciler = Scripted(TerminalError("never"))
    controller = Controller("terminal", reconciler)
    controller.queue.add(Request("ns", "a"))
    await _run_until(controller, reconciler, 1)
    assert reconciler.calls == 1


def _errors(name: str, controller: str) -> float:
    return REGISTRY.get_sample_value(name, {"controller": controller}) or 0.0


async def test_terminal_errors_count_as_errors_too() -> None:
    """As in controller-runtime: ``reconcile_errors_total`` counts both kinds of error, and
    ``terminal_reconcile_errors_total`` the terminal ones alone."""
    reconciler = Scripted(TerminalError("never"), RuntimeError("boom"))
    controller = Controller("counted", reconciler)
    controller.queue.add(Request("ns", "a"))
    controller.queue.add(Request("ns", "b"))
    await _run_until(controller, reconciler, 3)
    assert _errors("controller_runtime_reconcile_errors_total", "counted") == 2
    assert _errors("controller_runtime_terminal_reconcile_errors_total", "counted") == 1


async def test_requeue_after_comes_back_and_requeue_is_rate_limited() -> None:
    reconciler = Scripted(Result(requeue_after=0.05), Result(requeue=True))
    controller = Controller("requeue", reconciler)
    controller.queue.add(Request("ns", "a"))
    await _run_until(controller, reconciler, 3)
    assert reconciler.calls == 3


def test_owns_needs_a_primary_resource() -> None:
    from controlplane.runtime.informer import Informer
    from controlplane.runtime.resources import CONFIGMAPS

    controller = Controller("orphan", Scripted())
    with pytest.raises(ValueError, match="call for_\\(\\) before owns\\(\\)"):
        controller.owns(Informer(None, CONFIGMAPS))  # type: ignore[arg-type]


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Controller("none", Scripted(), max_concurrent_reconciles=0)


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(controller_module, "tracer", provider.get_tracer("test"))
    return exporter


async def test_each_reconcile_is_a_span_with_controller_key_and_result(
    spans: InMemorySpanExporter,
) -> None:
    reconciler = Scripted(RuntimeError("boom"))
    controller = Controller("traced", reconciler)
    controller.queue.add(Request("ns", "a"))
    await _run_until(controller, reconciler, 2)
    finished = [dict(span.attributes or {}) for span in spans.get_finished_spans()]
    common = {"controller": "traced", "key": "ns/a", "k8s.namespace.name": "ns"}
    assert finished == [{**common, "result": "error"}, {**common, "result": "success"}]


async def test_a_reconciler_may_name_the_trace_a_reconcile_belongs_to(
    spans: InMemorySpanExporter,
) -> None:
    """A reconcile acting on a traced request (the pool controller on an activator's intent)
    is a child in that trace, not a root."""
    from controlplane.runtime.tracing import context_of_traceparent

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    class Traced(Scripted):
        def trace_parent(self, request: Request) -> Any:
            return context_of_traceparent(traceparent) if request.name == "a" else None

    reconciler = Traced()
    controller = Controller("traced", reconciler)
    controller.queue.add(Request("ns", "a"))
    controller.queue.add(Request("ns", "b"))
    await _run_until(controller, reconciler, 2)
    by_key = {dict(s.attributes or {})["key"]: s for s in spans.get_finished_spans()}
    child, root = by_key["ns/a"], by_key["ns/b"]
    assert format(child.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert child.parent is not None
    assert format(child.parent.span_id, "016x") == "b7ad6b7169203331"
    assert root.parent is None
