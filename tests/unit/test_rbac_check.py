"""`make check-rbac`: passes on the repository, and fails, naming the rule, on each mutation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.controllers.rbac import OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT
from controlplane.rbacmanifests.__main__ import main
from controlplane.rbacmanifests.check import Declarations, Finding, check, load_documents
from controlplane.rbacmanifests.render import rendered_files
from controlplane.runtime.rbac import PolicyRule

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
LEASES = "leases.coordination.k8s.io"


@pytest.fixture
def documents() -> list[dict[str, Any]]:
    """Everything a user installs, as the check reads it (a fresh copy per test, to mutate)."""
    return copy.deepcopy(load_documents([MANIFESTS]))


def the(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def cluster_role(documents: list[dict[str, Any]]) -> dict[str, Any]:
    return the(documents, "ClusterRole", "modelpool-operator")


def drop_rule(role: dict[str, Any], resource: str, verb: str = "get") -> dict[str, Any]:
    """Remove the one rule on ``resource`` that holds ``verb``; return it."""
    rules: list[dict[str, Any]] = role["rules"]
    (dropped,) = [r for r in rules if r["resources"] == [resource] and verb in r["verbs"]]
    rules.remove(dropped)
    return dropped


def problems(findings: list[Finding], problem: str) -> list[str]:
    return [f.message for f in findings if f.problem == problem]


def test_the_repository_passes(documents: list[dict[str, Any]]) -> None:
    assert check(documents) == []


def test_committed_rbac_is_what_the_declarations_render() -> None:
    for name, content in rendered_files().items():
        path = MANIFESTS / "rbac" / name
        assert path.is_file(), f"{path} is missing: run `make manifests`"
        assert path.read_text() == content, f"{path} is out of date: run `make manifests`"


def test_removing_the_leases_rules_fails_naming_leases(documents: list[dict[str, Any]]) -> None:
    drop_rule(cluster_role(documents), "leases", "get")
    drop_rule(cluster_role(documents), "leases", "create")
    findings = check(documents)
    missing = problems(findings, "missing")
    assert any(LEASES in m and "ModelPool controller" in m for m in missing), missing
    escalation = problems(findings, "escalation")
    assert any(LEASES in m and "activation Role" in m for m in escalation), escalation


def test_the_grant_only_leases_rule_is_apart_from_the_pool_controllers(
    documents: list[dict[str, Any]],
) -> None:
    """Removing the rule held only to grant proxies Leases is an escalation for the activation
    Role, and leaves the ModelPool controller's own reads granted."""
    dropped = drop_rule(cluster_role(documents), "leases", "create")
    assert "get" not in dropped["verbs"]
    findings = check(documents)
    missing = problems(findings, "missing")
    assert missing
    assert all("to grant router proxies" in m for m in missing), missing
    escalation = problems(findings, "escalation")
    assert any(f"delete on {LEASES}" in m and "activation Role" in m for m in escalation)


def test_a_missing_verb_is_a_missing_rule_and_an_escalation(
    documents: list[dict[str, Any]],
) -> None:
    rule = next(r for r in cluster_role(documents)["rules"] if r["resources"] == ["modelpools"])
    rule["verbs"].remove("watch")
    findings = check(documents)
    assert problems(findings, "missing") == [
        "ClusterRole modelpool-operator lacks watch on modelpools.inference.modelpool.dev, "
        "declared by the InferenceService controller",
        "ClusterRole modelpool-operator lacks watch on modelpools.inference.modelpool.dev, "
        "declared by the ModelPool controller",
        "ClusterRole modelpool-operator lacks watch on modelpools.inference.modelpool.dev, "
        "declared by the ModelRouter controller",
    ]
    (escalation,) = problems(findings, "escalation")
    assert "watch on modelpools.inference.modelpool.dev" in escalation


@pytest.mark.parametrize("namespace", [OPERATOR_NAMESPACE, "team-a"])
def test_a_namespaced_role_never_covers_a_cluster_wide_need(
    documents: list[dict[str, Any]], namespace: str
) -> None:
    dropped = drop_rule(cluster_role(documents), "leases")
    documents += [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "leases", "namespace": namespace},
            "rules": [dropped],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "leases", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": OPERATOR_SERVICE_ACCOUNT,
                    "namespace": OPERATOR_NAMESPACE,
                }
            ],
        },
    ]
    findings = check(documents)
    assert any(LEASES in m for m in problems(findings, "missing"))
    assert any(LEASES in m for m in problems(findings, "escalation"))


def test_an_unbound_cluster_role_grants_nothing(documents: list[dict[str, Any]]) -> None:
    binding = the(documents, "ClusterRoleBinding", "modelpool-operator")
    binding["subjects"][0]["name"] = "someone-else"
    findings = check(documents)
    assert problems(findings, "unbound")
    assert any(LEASES in m for m in problems(findings, "missing"))


def test_wildcards_cover_like_the_api_server_but_are_refused(
    documents: list[dict[str, Any]],
) -> None:
    leases = next(r for r in cluster_role(documents)["rules"] if r["resources"] == ["leases"])
    leases["verbs"] = ["*"]
    findings = check(documents)
    assert not any(LEASES in m for m in problems(findings, "missing")), "* covers every verb"
    assert not problems(findings, "escalation")
    (wildcard,) = problems(findings, "wildcard")
    assert "ClusterRole modelpool-operator" in wildcard
    assert "verbs" in wildcard
    assert any("* on leases" in m for m in problems(findings, "excess"))


@pytest.mark.parametrize("key", ["resources", "verbs"])
def test_a_wildcard_in_any_role_of_any_manifest_fails(
    documents: list[dict[str, Any]], key: str
) -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], key: ["*"]}
    documents.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "unrelated", "namespace": "team-a"},
            "rules": [rule],
        }
    )
    (wildcard,) = problems(check(documents), "wildcard")
    assert f"Role team-a/unrelated rules[0] grants a wildcard in {key}" in wildcard


def test_a_grant_no_controller_declares_is_excess(documents: list[dict[str, Any]]) -> None:
    cluster_role(documents)["rules"].append(
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}
    )
    assert problems(check(documents), "excess") == [
        "ClusterRole modelpool-operator grants get list on secrets, which no controller declares"
    ]


def test_a_runtime_role_beyond_the_cluster_role_is_an_escalation(
    documents: list[dict[str, Any]],
) -> None:
    wants_secrets = Declarations(
        runtime_roles={"per-router activation Role": (PolicyRule(("",), ("secrets",), ("get",)),)}
    )
    (escalation,) = problems(check(documents, wants_secrets), "escalation")
    assert "per-router activation Role" in escalation
    assert "get on secrets" in escalation
    assert "refuse it as an escalation" in escalation


def test_a_namespaced_need_is_met_only_by_a_role_bound_in_the_operator_namespace(
    documents: list[dict[str, Any]],
) -> None:
    # The real leader-election needs are also held cluster-wide (the activation Role needs
    # leases everywhere), so a need the ClusterRole lacks shows the namespaced path on its own.
    needs_configmaps = Declarations(
        namespaced_rules_by_owner={
            "leader election": (PolicyRule(("",), ("configmaps",), ("get", "update")),)
        }
    )
    role = the(documents, "Role", "modelpool-leader-election")
    role["rules"].append(
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"]}
    )
    assert check(documents, needs_configmaps) == []

    role["metadata"]["namespace"] = "elsewhere"
    (missing,) = problems(check(documents, needs_configmaps), "missing")
    assert missing == (
        f"nothing grants get update on configmaps in namespace {OPERATOR_NAMESPACE}, "
        "declared for leader election"
    )


def _write(path: Path, documents: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(documents))
    return path


def test_the_command_fails_naming_leases(
    documents: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(MANIFESTS)]) == 0
    drop_rule(cluster_role(documents), "leases")
    assert main(["check", str(_write(tmp_path / "all.yaml", documents))]) == 1
    assert LEASES in capsys.readouterr().err


def test_render_check_reports_a_stale_file(tmp_path: Path) -> None:
    assert main(["render", str(tmp_path)]) == 0
    assert main(["render", str(tmp_path), "--check"]) == 0
    (tmp_path / "cluster_role.yaml").write_text("# edited by hand\n")
    assert main(["render", str(tmp_path), "--check"]) == 1
