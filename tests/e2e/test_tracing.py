"""One trace for a cold request, across the router-proxy and the operator, read back from Jaeger.

The operator (under its ServiceAccount), the node stand-in and two router-proxies run as in
``test_router_proxy.py``, each exporting spans over OTLP to the session's Jaeger
(``conftest.jaeger``; the suite fails if it cannot start). A cold request for member b carries a
known W3C ``traceparent``; the test then asks Jaeger's query API for that trace and checks that it
tells the whole story: the proxy's ``request`` → ``hold`` → ``swap`` → ``lease.claim``, then
``forward``; the operator's ``reconcile`` spans as children of the swap (the context travelled on
the pool's Lease), with ``drain decision`` → ``slots probe`` (a's answer), the ``write status``
spans that carry the pool's decisions (a released, then b granted: the pool's own status is all it
writes) and the waiting phases ``wait for pods gone`` and ``owner up``, in causal order and inside
the hold. A second request that joins the running swap keeps its own trace and links to the swap's
span.

Orderings are causal (a write precedes the wait it starts; the proxy cannot see b resident before
the operator has decided so), never durations against a clock.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from controlplane.envtest.jaeger import JaegerBackend, WaterfallRow, render_waterfall, waterfall
from controlplane.runtime.client import KubeClient
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.kubectl import install
from tests.e2e.operator_process import LocalProcess, start_node, start_operator
from tests.e2e.proxies import chat, start_proxies
from tests.e2e.test_router_proxy import TIMEOUT, lease_holder, setup_pool
from tests.e2e.waiting import eventually

PROXY_SERVICE = "modelpool-router-proxy"
OPERATOR_SERVICE = "modelpool-operator"
#: The spans the trace must hold, by service, for the test to read it.
EXPECTED = {
    PROXY_SERVICE: {"request", "hold", "swap", "lease.claim", "forward"},
    OPERATOR_SERVICE: {
        "reconcile",
        "drain decision",
        "slots probe",
        "write status",
        "wait for pods gone",
        "owner up",
    },
}


def _by_name(rows: list[WaterfallRow]) -> dict[tuple[str, str], list[WaterfallRow]]:
    found: dict[tuple[str, str], list[WaterfallRow]] = {}
    for row in rows:
        found.setdefault((row.service, row.name), []).append(row)
    return found


def _parents(trace: dict[str, Any]) -> dict[str, str | None]:
    """span id → parent span id (CHILD_OF), None for a root."""
    out: dict[str, str | None] = {}
    for span in trace["spans"]:
        parent = next(
            (r["spanID"] for r in span.get("references") or [] if r["refType"] == "CHILD_OF"),
            None,
        )
        out[span["spanID"]] = parent
    return out


def _end(row: WaterfallRow) -> int:
    return row.start_us + row.duration_us


def _names(tag: Any) -> list[str]:
    """Member names from a span attribute: ``modelpool.released`` is the names joined with
    ``", "`` (``""``: none); an array attribute (a JSON array in Jaeger's string tag) reads too."""
    if isinstance(tag, list):
        return [str(v) for v in tag]
    assert isinstance(tag, str), f"not names: {tag!r}"
    if tag.startswith("["):
        return [str(v) for v in json.loads(tag)]
    return [name.strip() for name in tag.split(",") if name.strip()]


async def test_a_cold_request_is_one_trace_across_proxy_and_operator(
    cluster: TestCluster,
    admin: KubeClient,
    jaeger: JaegerBackend,
    namespace: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    started: list[LocalProcess],
) -> None:
    env = jaeger.otlp_env()
    await install(cluster)  # CRDs and RBAC, as the module-scoped operator fixture does
    await start_operator(
        cluster,
        admin,
        tmp_path_factory.mktemp("tracing-operator"),
        f"tracing-e2e-{secrets.token_hex(3)}",
        "tracing-op",
        started,
        env=env,
    )
    start_node(cluster, tmp_path, started, namespace=namespace, load_seconds=1, token_seconds=0.05)
    await setup_pool(admin, namespace, "60s", b_load_seconds=4)
    one, two = await start_proxies(cluster, admin, namespace, tmp_path, started, 2, env=env)

    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    joiner_trace = secrets.token_hex(16)
    answers: dict[str, httpx.Response] = {}
    async with (
        http_client(timeout=90) as http,
        anyio.create_task_group() as group,
    ):

        async def ask(key: str, trace: str) -> None:
            headers = {"traceparent": f"00-{trace}-{secrets.token_hex(8)}-01"}
            if key == "cold":
                headers["traceparent"] = f"00-{trace}-{parent_id}-01"
            answers[key] = await http.post(
                f"{one.url}/v1/chat/completions", json=chat("model-b"), headers=headers
            )

        group.start_soon(ask, "cold", trace_id)

        async def claimed() -> bool:
            return await lease_holder(admin, namespace) == one.identity

        await eventually(claimed, timeout=TIMEOUT, what="proxy-0 to claim the pool's Lease")
        group.start_soon(ask, "joiner", joiner_trace)  # b loads for 4 s: it joins the swap
    assert {k: a.status_code for k, a in answers.items()} == {"cold": 200, "joiner": 200}

    async def complete() -> dict[str, Any] | None:
        found = jaeger.trace(trace_id)
        if found is None:
            return None
        services = {p["serviceName"] for p in found["processes"].values()}
        names = {
            (found["processes"][s["processID"]]["serviceName"], s["operationName"])
            for s in found["spans"]
        }
        wanted = {(svc, name) for svc, spans in EXPECTED.items() for name in spans}
        # A span is exported when it ends, so a child can reach Jaeger before the reconcile
        # still running around it: the trace is read once every parent it names is in it.
        present = {s["spanID"] for s in found["spans"]}
        dangling = {p for p in _parents(found).values() if p is not None} - present - {parent_id}
        whole = services >= set(EXPECTED) and names >= wanted and not dangling
        return found if whole else None

    trace = await eventually(complete, timeout=TIMEOUT, what="the whole trace in Jaeger")
    rows = waterfall(trace)
    print(render_waterfall(rows))
    spans = _by_name(rows)
    parents = _parents(trace)

    def one_of(service: str, name: str) -> WaterfallRow:
        found = spans[(service, name)]
        assert len(found) == 1, f"{len(found)} {name} spans: {found}"
        return found[0]

    # The proxy: request -> hold -> swap -> lease.claim; request -> forward.
    request = one_of(PROXY_SERVICE, "request")
    assert parents[request.span_id] == parent_id  # the client's span, outside this trace
    hold, swap = one_of(PROXY_SERVICE, "hold"), one_of(PROXY_SERVICE, "swap")
    forward = one_of(PROXY_SERVICE, "forward")
    assert parents[hold.span_id] == request.span_id
    assert parents[swap.span_id] == hold.span_id
    assert parents[forward.span_id] == request.span_id
    claims = spans[(PROXY_SERVICE, "lease.claim")]
    assert all(parents[c.span_id] == swap.span_id for c in claims)
    assert any(c.tags.get("modelpool.outcome") == "held" for c in claims)
    assert hold.tags["modelpool.outcome"] == "ready"
    assert swap.tags["modelpool.outcome"] == "ready"
    assert request.tags["http.response.status_code"] == 200
    assert request.tags["modelpool.reason"] == "upstream"
    assert forward.tags["modelpool.member"] == "b"
    assert forward.tags["url.full"].endswith("/v1/chat/completions")
    assert forward.tags["http.response.status_code"] == 200

    # The operator: its reconciles for the swap are children of the swap span (via the Lease).
    reconciles = spans[(OPERATOR_SERVICE, "reconcile")]
    assert reconciles
    assert all(parents[r.span_id] == swap.span_id for r in reconciles)
    assert all(r.tags["k8s.namespace.name"] == namespace for r in reconciles)
    reconcile_ids = {r.span_id for r in reconciles}
    decisions = spans[(OPERATOR_SERVICE, "drain decision")]
    assert all(parents[d.span_id] in reconcile_ids for d in decisions)
    probes = spans[(OPERATOR_SERVICE, "slots probe")]
    decision_ids = {d.span_id for d in decisions}
    assert all(parents[p.span_id] in decision_ids for p in probes)
    assert {(p.tags["modelpool.member"], p.tags["modelpool.outcome"]) for p in probes} == {
        ("a", "idle")
    }
    assert all(p.tags["url.full"].endswith("/slots") for p in probes)
    # The pool's decisions, each a write of its own status (no member is written).
    status_writes = spans[(OPERATOR_SERVICE, "write status")]
    assert all(parents[w.span_id] in reconcile_ids for w in status_writes)
    assert all(w.tags["modelpool.pool"] == "gpu-0" for w in status_writes)
    assert {w.tags["modelpool.outcome"] for w in status_writes} <= {"written", "Conflict"}
    written = sorted(
        (w for w in status_writes if w.tags["modelpool.outcome"] == "written"),
        key=lambda w: w.start_us,
    )
    # Each decision is written once (a write from a stale cache is refused: Conflict): a
    # released, then, in a later write, b granted; nothing else released or granted.
    (drain,) = [w for w in written if _names(w.tags["modelpool.released"])]
    (up,) = [w for w in written if w.tags["modelpool.granted"]]
    assert (_names(drain.tags["modelpool.released"]), drain.tags["modelpool.granted"]) == (
        ["a"],
        "",
    )
    assert (_names(up.tags["modelpool.released"]), up.tags["modelpool.granted"]) == ([], "b")
    wait = one_of(OPERATOR_SERVICE, "wait for pods gone")
    owner_up = one_of(OPERATOR_SERVICE, "owner up")
    assert parents[wait.span_id] == swap.span_id
    assert parents[owner_up.span_id] == swap.span_id

    # The swap's phases, in causal order, inside the hold.
    probe = min(probes, key=lambda p: p.start_us)
    claim = min((c for c in claims if c.tags.get("modelpool.outcome") == "held"), key=_end)
    assert hold.start_us <= claim.start_us
    assert claim.start_us <= probe.start_us  # the operator acts on the written intent
    assert _end(probe) <= drain.start_us  # drained only after a's /slots said idle
    assert drain.start_us <= wait.start_us <= _end(wait) <= up.start_us
    assert _end(up) <= owner_up.start_us
    # The grant comes before the held request is answered; the answer may come before the
    # operator sees b Ready (owner up's end): the driver forwards at b's first /health 200, its
    # own probe, ahead of the readiness probe (docs/router.md, "Ready when the server is").
    assert owner_up.start_us <= _end(hold)
    assert _end(hold) <= forward.start_us

    # The request that joined the running swap: its own trace, a link to the swap's span.
    joined = jaeger.trace(joiner_trace)
    assert joined is not None
    joiner_hold = next(s for s in joined["spans"] if s["operationName"] == "hold")
    links = [r for r in joiner_hold.get("references") or [] if r["refType"] == "FOLLOWS_FROM"]
    assert [(r["traceID"], r["spanID"]) for r in links] == [(trace_id, swap.span_id)]

    # The proxy exposes its own series, not the controller framework's.
    async with http_client(timeout=10) as http:
        text = (await http.get(f"{two.url}/metrics")).text
    assert "modelpool_proxy_requests_total" in text
    assert "controller_runtime_" not in text
    assert "leader_election_" not in text
