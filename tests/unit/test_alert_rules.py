"""The alert rules that ship are valid, tested by promtool, and each has a runbook.

``manifests/monitoring/rules/modelpool.rules.yaml`` is the one source of the alerts (the
PrometheusRule is generated from it). Here promtool, built from Prometheus's Go module by
``make promtool-bin`` (``PROMTOOL_BINARY``), checks the file and runs its unit tests
(``tests/unit/alert_rules/modelpool.rules.test.yaml``); every alert must fire in at least one of
those tests and stay silent in at least one, so an alert added without both fails here; and every
alert's ``runbook_url`` must point at a section of ``docs/alerts.md`` that exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.envtest.errors import BinaryNotFoundError
from controlplane.envtest.prometheus import find_promtool
from controlplane.monitoringrules import (
    PROMETHEUS_RULE_FILE,
    RULES_FILE,
    render,
    rendered_files,
    rule_groups,
)

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "monitoring"
RULES = MONITORING / RULES_FILE
RULE_TESTS = Path(__file__).resolve().parent / "alert_rules" / "modelpool.rules.test.yaml"
RUNBOOKS = REPO / "docs" / "alerts.md"
RUNBOOK_BASE = "https://github.com/modelpool/controlplane/blob/main/docs/alerts.md#"


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool, or a failure (never a skip) saying how to build it."""
    try:
        return find_promtool()
    except BinaryNotFoundError as err:
        pytest.fail(f"promtool is needed for the alert rules' tests: {err}")


def run_promtool(promtool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *map(str, args)], capture_output=True, text=True, check=False, timeout=120
    )


def alerts(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rule_groups(rules) for rule in group["rules"] if "alert" in rule]


def untested_alerts(names: Iterable[str], rule_tests: dict[str, Any]) -> dict[str, list[str]]:
    """For each alert, what its promtool tests lack: a case where it fires (some expected alert)
    and one where it stays silent (none expected). Empty when every alert has both."""
    firing: set[str] = set()
    silent: set[str] = set()
    for group in rule_tests.get("tests") or ():
        for case in group.get("alert_rule_test") or ():
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    lacking: dict[str, list[str]] = {}
    for name in names:
        missing = [
            what for what, seen in (("firing", firing), ("silent", silent)) if name not in seen
        ]
        if missing:
            lacking[name] = missing
    return lacking


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown``: lower case, punctuation but ``-``
    and ``_`` dropped, spaces as ``-``."""
    anchors = set()
    for line in markdown.splitlines():
        if match := re.match(r"#{1,6}\s+(.*\S)\s*$", line):
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_promtool_checks_the_rules_file(promtool: Path) -> None:
    done = run_promtool(promtool, "check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    count = len(alerts(yaml.safe_load(RULES.read_text())))
    assert f"SUCCESS: {count} rules found" in done.stdout + done.stderr


def test_promtool_runs_the_rules_unit_tests(promtool: Path) -> None:
    done = run_promtool(promtool, "test", "rules", RULE_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_promtool_fails_the_tests_of_a_rule_that_changed(promtool: Path, tmp_path: Path) -> None:
    """The rule tests hold the rules to what they say: a swap alert that waits 30 minutes
    instead of 1 no longer fires when its test expects it, and promtool says which."""
    rules = tmp_path / "manifests" / "monitoring" / RULES_FILE
    rules.parent.mkdir(parents=True)
    text = RULES.read_text()
    changed = re.sub(
        r"(- alert: ModelPoolSwapOverBudget\n(?:.*\n)*?\s+for: )1m", r"\g<1>30m", text, count=1
    )
    assert changed != text
    rules.write_text(changed)
    tests = tmp_path / "tests" / "unit" / "alert_rules" / RULE_TESTS.name
    tests.parent.mkdir(parents=True)
    shutil.copy(RULE_TESTS, tests)
    done = run_promtool(promtool, "test", "rules", tests)
    assert done.returncode != 0
    assert "ModelPoolSwapOverBudget" in done.stdout + done.stderr


def test_every_alert_fires_in_a_test_and_stays_silent_in_another() -> None:
    names = [rule["alert"] for rule in alerts(yaml.safe_load(RULES.read_text()))]
    assert "ModelPoolOperatorDown" in names
    rule_tests = yaml.safe_load(RULE_TESTS.read_text())
    assert rule_tests["rule_files"] == [str(Path("../../..") / "manifests/monitoring" / RULES_FILE)]
    assert untested_alerts(names, rule_tests) == {}


def test_an_alert_without_a_firing_or_a_silent_test_is_reported() -> None:
    rule_tests = {
        "tests": [
            {"alert_rule_test": [{"alertname": "A", "exp_alerts": [{"exp_labels": {}}]}]},
            {"alert_rule_test": [{"alertname": "A", "exp_alerts": []}, {"alertname": "B"}]},
        ]
    }
    assert untested_alerts(["A", "B", "C"], rule_tests) == {
        "B": ["firing"],
        "C": ["firing", "silent"],
    }


def test_every_alert_has_a_runbook_section_in_docs_alerts_md() -> None:
    anchors = github_anchors(RUNBOOKS.read_text())
    for rule in alerts(yaml.safe_load(RULES.read_text())):
        url = rule.get("annotations", {}).get("runbook_url", "")
        assert url.startswith(RUNBOOK_BASE), f"{rule['alert']}: runbook_url {url!r}"
        assert url.removeprefix(RUNBOOK_BASE) in anchors, f"{rule['alert']}: no section {url}"


def test_github_anchors_of_headings() -> None:
    assert github_anchors("# Alerts\n## ModelPoolOperatorDown\ntext\n### What it means, now\n") == {
        "alerts",
        "modelpooloperatordown",
        "what-it-means-now",
    }


def test_the_prometheus_rule_is_generated_from_the_rules_file() -> None:
    """The PrometheusRule that ships holds exactly the groups promtool tested."""
    committed = (MONITORING / PROMETHEUS_RULE_FILE).read_text()
    assert committed == rendered_files(MONITORING)[PROMETHEUS_RULE_FILE], "run `make manifests`"
    shipped = yaml.safe_load(committed)
    assert shipped["kind"] == "PrometheusRule"
    assert rule_groups(shipped) == rule_groups(yaml.safe_load(RULES.read_text()))


def test_render_keeps_the_rules_text_and_refuses_what_is_not_a_rules_file() -> None:
    rendered = render("# a comment\ngroups:\n  - name: g\n    rules: []  # none yet\n")
    assert rendered.endswith("spec:\n  groups:\n    - name: g\n      rules: []  # none yet\n")
    with pytest.raises(ValueError, match=r"x\.yaml: a rules file must be a mapping with only"):
        render("groups: []\nextra: 1\n", "x.yaml")
