"""The fairness benchmark's budget mode (``make bench-fairness BENCH_ARGS="--budget 2"``): its pure
part, the traces, the pool and the peer's configuration, the loads read from the simulators' logs,
and the figures."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from bench.fairness_bench import (
    BUDGET_POOL,
    BUDGET_TRACES,
    POOLS,
    Answer,
    BudgetRow,
    budget_matrix,
    budget_table,
    judge_budget,
    llama_swap_config,
    load_counts,
    model,
    pool_objects,
)

MEMBERS = BUDGET_POOL[1]


def _pools(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "ModelPool"]


def test_the_budget_traces_ask_only_for_the_pools_members_and_use_all_three() -> None:
    asked = {client.member for trace in BUDGET_TRACES for client in trace.clients}
    assert asked == set(MEMBERS)
    assert len({trace.name for trace in BUDGET_TRACES}) == len(BUDGET_TRACES)
    for trace in BUDGET_TRACES:
        for client in trace.clients:
            assert all(0 < at < trace.seconds for at in client.times)


def test_the_default_objects_are_unchanged_and_have_no_capacity() -> None:
    objects = pool_objects()
    pools = _pools(objects)
    assert [p["metadata"] for p in pools] == [
        {"name": name, "namespace": "bench"} for name, _, _ in POOLS
    ]
    assert all("capacity" not in p["spec"] for p in pools)


def test_the_budget_pool_has_three_members_and_the_capacity_only_when_asked() -> None:
    exclusive = pool_objects(pools=(BUDGET_POOL,))
    budget = pool_objects(pools=(BUDGET_POOL,), capacity=2)
    for objects in (exclusive, budget):
        services = [o for o in objects if o["kind"] == "InferenceService"]
        assert [s["metadata"]["name"] for s in services] == list(MEMBERS)
        # the default member runs from the start, the others are brought up on demand
        assert [s["spec"]["replicas"] for s in services] == [1, 0, 0]
        (router,) = [o for o in objects if o["kind"] == "ModelRouter"]
        assert router["spec"]["backends"] == [
            {"name": "pool-budget", "poolRef": {"name": "pool-budget"}}
        ]
    (pool,) = _pools(budget)
    assert pool["spec"]["capacity"] == {"members": 2}
    (pool,) = _pools(exclusive)
    assert "capacity" not in pool["spec"]


def test_the_peers_matrix_lets_any_two_of_three_run_and_no_three() -> None:
    routing = budget_matrix(MEMBERS, 2)
    assert routing["router"]["use"] == "matrix"
    matrix = routing["router"]["settings"]["matrix"]
    assert matrix["vars"] == {"a": "model-a", "b": "model-b", "c": "model-c"}
    # in the members' order: the order the peer's solver breaks ties in
    assert list(matrix["sets"].items()) == [("ab", "a & b"), ("ac", "a & c"), ("bc", "b & c")]
    assert budget_matrix(MEMBERS, 1)["router"]["settings"]["matrix"]["sets"] == {
        "a": "a",
        "b": "b",
        "c": "c",
    }
    with pytest.raises(ValueError, match="budget of 4"):
        budget_matrix(MEMBERS, 4)


def test_the_peers_config_copies_upstream_output_and_preloads_only_in_the_budget_mode() -> None:
    plain = llama_swap_config(["a2", "b2"])
    assert set(plain) == {"healthCheckTimeout", "models"}
    assert set(plain["models"]) == {"model-a2", "model-b2"}
    assert "--load-seconds 2.0 --slots 2" in plain["models"]["model-a2"]["cmd"]
    budget = llama_swap_config(MEMBERS, budget=2, preload="a")
    assert budget["logToStdout"] == "both"
    assert budget["routing"] == budget_matrix(MEMBERS, 2)
    assert budget["hooks"] == {"on_startup": {"preload": ["model-a"]}}


def test_loads_are_read_from_the_simulators_ready_lines_in_either_log() -> None:
    ours = [
        "2026-12-03 14:29:27,448 INFO controlplane.sim.server ready: model model-a on "
        "http://127.0.0.1:5800 (2 slots)",
        "2026-12-03 14:29:32,653 INFO controlplane.sim.server SIGTERM: stopping; in-flight "
        "completions may finish",
    ]
    peer = [
        '[INFO] matrix: model=model-c set=ac dsl="a & c" evict=[model-b] cost=1',
        "listening on http://127.0.0.1:5802",
        "2026-12-03 14:29:34,890 INFO controlplane.sim.server ready: model model-c on "
        "http://127.0.0.1:5802 (2 slots)",
        "[INFO] <model-c> Health check passed on http://127.0.0.1:5802/health",
        "2026-12-03 14:29:37,345 INFO controlplane.sim.server ready: model model-c on "
        "http://127.0.0.1:5801 (2 slots)",
        "a request whose body says already ready: model x",
    ]
    assert load_counts(ours) == Counter({"model-a": 1})
    assert load_counts(peer) == Counter({"model-c": 2})
    assert load_counts([]) == Counter()


def _answer(member: str, sent: float, ended: float, status: int | None, by: str = "") -> Answer:
    return Answer(member, sent, ended, status, by or (model(member) if status == 200 else ""))


def test_a_traces_figures_split_refused_from_unanswered_and_count_loads_per_request() -> None:
    (trace,) = [t for t in BUDGET_TRACES if t.name == "4 x steady a + sparse b and c"]
    answers = [
        *(_answer("a", float(i), i + 0.5, 200) for i in range(10)),
        _answer("b", 5.0, 9.0, 200),
        _answer("c", 10.0, 40.0, 503),  # refused
        _answer("c", 20.0, 170.0, None),  # not answered
        _answer("b", 15.0, 16.0, 200, by="model-a"),  # answered by the wrong model: refused
    ]
    row = judge_budget("ours", trace, answers, Counter({"model-b": 2, "model-c": 1}), MEMBERS)
    assert (row.requests, row.refused, row.unanswered) == (14, 2, 1)
    assert row.loads == (0, 2, 1)
    assert row.loads_per_request == pytest.approx(3 / 14)
    assert row.max_wait == pytest.approx(4.0)  # the answered ones: b's 4 s
    assert row.p99_wait == pytest.approx(4.0)
    assert row.sparse_max_wait == pytest.approx(150.0)  # every sparse request, answered or not


def test_a_trace_with_no_request_has_no_figures() -> None:
    row = judge_budget("ours", BUDGET_TRACES[0], [], Counter(), MEMBERS)
    assert row.loads == (0, 0, 0)
    assert math.isnan(row.loads_per_request)
    assert math.isnan(row.max_wait)
    assert math.isnan(row.p99_wait)


def test_the_table_lists_traces_in_their_order_and_systems_in_the_run_order() -> None:
    def row(system: str, trace: str) -> BudgetRow:
        return BudgetRow(system, trace, 10, 0, 0, (1, 2, 0), 1.0, 1.0, math.nan)

    first, second = BUDGET_TRACES[0].name, BUDGET_TRACES[1].name
    rows = [
        row("llama-swap", second),
        row("exclusive", first),
        row("ours", second),
        row("llama-swap", first),
    ]
    lines = budget_table(rows, MEMBERS).splitlines()
    assert lines[0].startswith(
        "| trace | system | requests | refused | not answered | loads (a b c)"
    )
    assert [line.split(" | ")[:2] for line in lines[2:]] == [
        [f"| {first}", "exclusive"],
        [f"| {first}", "llama-swap"],
        [f"| {second}", "ours"],
        [f"| {second}", "llama-swap"],
    ]
    assert lines[2].endswith("| 10 | 0 | 0 | 3 (1 2 0) | 0.300 | 1.0 | 1.0 | nan |")
