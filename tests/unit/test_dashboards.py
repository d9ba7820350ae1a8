"""Every metric the Grafana dashboard and the alert rules in manifests/monitoring/ use exists.

A dashboard that names a metric nobody exports shows an empty panel, and an alert on one never
fires: both fail silently. So the PromQL of every panel target and every rule is parsed for its
metric names (:func:`metric_names`), and each must be a series the code registers in the
framework's registry (counters as ``_total``, histograms as ``_bucket``/``_sum``/``_count``) or
one Prometheus itself writes for every target (:data:`SCRAPE_SERIES`). Whether the rules fire
when they should is promtool's to test (``test_alert_rules.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import controlplane.controllers.modelpool.reconciler
import controlplane.router.app
import controlplane.runtime.controller  # noqa: F401  (controller-runtime's families)
from controlplane.monitoringrules import RULES_FILE, rule_groups
from controlplane.runtime.metrics import REGISTRY, workqueue_metrics_provider

MONITORING = Path(__file__).resolve().parents[2] / "manifests" / "monitoring"
DASHBOARDS = MONITORING / "dashboards"
#: Series Prometheus writes for each scrape, which no code of ours registers.
SCRAPE_SERIES = frozenset(("up",))

#: PromQL words that are not metric names: operators, modifiers, aggregations' clauses.
KEYWORDS = frozenset(
    (
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
        "bool", "offset", "inf", "nan",
    )
)  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_BRACES = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels removed)."""
    text = _STRING.sub(" ", expr)
    text = _BRACES.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _CLAUSE.sub(" ", text)
    names = set()
    for match in _WORD.finditer(text):
        word = match.group()
        rest = text[match.end() :].lstrip()
        if word.lower() in KEYWORDS or rest.startswith("("):
            continue  # a keyword, or a function call
        before = text[match.start() - 1] if match.start() > 0 else " "
        if before in "$." or before.isdigit():
            continue  # a template variable ($pool), or a number's tail (5m, 1e3)
        names.add(word)
    return names


def registered_series() -> set[str]:
    """Every series name the code can expose."""
    workqueue_metrics_provider(REGISTRY)
    names: set[str] = set()
    for family in REGISTRY.collect():
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        elif family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count", "created")}
        else:
            names.add(family.name)
    return names


def dashboard_exprs() -> Iterator[tuple[str, str]]:
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                yield f"{path.name}: {panel['title']}", target["expr"]
        for variable in board.get("templating", {}).get("list", []):
            if variable.get("type") == "query":
                # Grafana's label_values(METRIC, LABEL): only its first argument is PromQL.
                query = str(variable["query"])
                found = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
                yield f"{path.name}: ${variable['name']}", found.group(1) if found else query


def rule_exprs() -> Iterator[tuple[str, str]]:
    """The rules file's expressions (the PrometheusRule is generated from it)."""
    path = MONITORING / RULES_FILE
    groups: list[dict[str, Any]] = rule_groups(yaml.safe_load(path.read_text()))
    for group in groups:
        for rule in group["rules"]:
            yield f"{path.name}: {rule.get('alert') or rule.get('record')}", rule["expr"]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (pool) (rate(a_total{x="y"}[5m]))', {"a_total"}),
        ("histogram_quantile(0.9, sum by (le) (rate(b_bucket[$__rate_interval])))", {"b_bucket"}),
        ("(time() - c) > on (ns, pool) d and on (ns) c > 0", {"c", "d"}),
        ("f offset 5m", {"f"}),
    ],
)
def test_metric_names_of_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_there_is_a_dashboard_and_the_alerts() -> None:
    alerts = {name.split(": ", 1)[1] for name, _ in rule_exprs()}
    assert alerts >= {
        "ModelPoolSwapOverBudget",
        "ModelPoolIdleChecksFailing",
        "ModelPoolLeaseUnavailable",
        "ModelPoolOperatorDown",
    }
    assert len(list(dashboard_exprs())) >= 10


def test_every_metric_the_dashboard_and_rules_use_is_registered_by_the_code() -> None:
    known = registered_series() | SCRAPE_SERIES
    missing = {
        (where, name)
        for where, expr in [*dashboard_exprs(), *rule_exprs()]
        for name in metric_names(expr)
        if name not in known
    }
    assert not missing, f"metrics nobody registers: {sorted(missing)}"
    used = {name for _, expr in [*dashboard_exprs(), *rule_exprs()] for name in metric_names(expr)}
    # The pool metrics this issue added are all on the dashboard.
    assert {
        "modelpool_pool_resident_member",
        "modelpool_pool_swaps_completed_total",
        "modelpool_drain_deferrals_total",
        "modelpool_idle_probes_total",
        "modelpool_idle_probe_duration_seconds_bucket",
    } <= used
