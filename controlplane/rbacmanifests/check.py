"""Prove the RBAC manifests are enough for the operator, and no more: ``make check-rbac``.

The check reads the manifests a user installs, not the generator's output, so a hand edit, a
stale file or a kustomize overlay file that drops a rule is caught. It judges like the API server:

* The operator's cluster-wide grants are the rules of the **ClusterRoles** bound to its
  ServiceAccount by ClusterRoleBindings. A namespaced Role never counts toward a cluster-wide
  need: it grants nothing outside its namespace, and the operator reconciles every namespace.
* Every declared cluster need must be granted (``missing``), and nothing else may be
  (``excess``): "enough and no more".
* Every Role the operator writes at run time must be within those grants (``escalation``), or the
  API server refuses it: "is attempting to grant RBAC permissions not currently held".
* Namespaced needs (leader election) may be met by Roles bound in the operator's namespace.
* No Role or ClusterRole in any manifest may hold a wildcard (``wildcard``). Wildcards are still
  honoured when judging coverage, as the API server honours them, so a wildcard rule is reported
  as a wildcard, not as a missing rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from controlplane.controllers import rbac as declared
from controlplane.runtime.rbac import WILDCARD, Permission, PolicyRule, uncovered

Problem = Literal["missing", "excess", "escalation", "wildcard", "unbound", "invalid"]
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason the manifests are wrong, worded for the person who must fix them."""

    problem: Problem
    message: str

    def __str__(self) -> str:
        return f"{self.problem}: {self.message}"


@dataclass(frozen=True)
class Declarations:
    """What the code needs; the defaults are the project's own declarations."""

    cluster_rules_by_owner: Mapping[str, tuple[PolicyRule, ...]] = field(
        default_factory=lambda: dict(declared.OPERATOR_CLUSTER_RULES_BY_OWNER)
    )
    runtime_roles: Mapping[str, tuple[PolicyRule, ...]] = field(
        default_factory=lambda: dict(declared.RUNTIME_ROLE_RULES)
    )
    namespaced_rules_by_owner: Mapping[str, tuple[PolicyRule, ...]] = field(
        default_factory=lambda: {"leader election": declared.LEADER_ELECTION_RULES}
    )
    namespace: str = declared.OPERATOR_NAMESPACE
    service_account: str = declared.OPERATOR_SERVICE_ACCOUNT

    def cluster_rules(self) -> list[PolicyRule]:
        return [rule for rules in self.cluster_rules_by_owner.values() for rule in rules]


def load_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every object in the YAML files under ``paths`` (``kind: List`` items unpacked). YAML that
    is not a Kubernetes object (no ``kind``: the Prometheus rules file in manifests/monitoring)
    is skipped."""
    documents: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.rglob("*.y*ml")) if path.is_dir() else [path]
        for file in files:
            for document in yaml.safe_load_all(file.read_text()):
                if isinstance(document, dict) and "kind" in document:
                    items = document.get("items") if document.get("kind") == "List" else None
                    documents.extend(items if isinstance(items, list) else [document])
    return documents


def check(
    documents: Sequence[Mapping[str, Any]], declarations: Declarations | None = None
) -> list[Finding]:
    """Everything wrong with the RBAC in ``documents``; an empty list means the check passes."""
    want = declarations or Declarations()
    findings = _wildcards(documents)
    cluster_roles = _by_name(documents, "ClusterRole")
    bound = _bound_cluster_roles(documents, want)
    if not bound:
        findings.append(
            Finding(
                "unbound",
                "no ClusterRoleBinding binds a ClusterRole to ServiceAccount "
                f"{want.namespace}/{want.service_account}",
            )
        )
    granted: list[PolicyRule] = []
    for name in bound:
        if name not in cluster_roles:
            findings.append(
                Finding("unbound", f"ClusterRoleBinding refers to ClusterRole {name}, not found")
            )
            continue
        granted.extend(_rules(cluster_roles[name], findings))
    holder = f"ClusterRole {', '.join(bound) or '(none bound)'}"

    for owner, rules in want.cluster_rules_by_owner.items():
        for text in _grouped(uncovered(granted, rules)):
            findings.append(Finding("missing", f"{holder} lacks {text}, declared by the {owner}"))
    for text in _grouped(uncovered(want.cluster_rules(), granted)):
        findings.append(Finding("excess", f"{holder} grants {text}, which no controller declares"))
    for role, rules in want.runtime_roles.items():
        for text in _grouped(uncovered(granted, rules)):
            findings.append(
                Finding(
                    "escalation",
                    f"the {role} the operator creates grants {text}, which {holder} does not: "
                    "the API server would refuse it as an escalation",
                )
            )

    local = granted + _namespaced_grants(documents, want, findings)
    for owner, rules in want.namespaced_rules_by_owner.items():
        for text in _grouped(uncovered(local, rules)):
            findings.append(
                Finding(
                    "missing",
                    f"nothing grants {text} in namespace {want.namespace}, declared for {owner}",
                )
            )
    return findings


def _by_name(documents: Sequence[Mapping[str, Any]], kind: str) -> dict[str, Mapping[str, Any]]:
    return {
        str(doc.get("metadata", {}).get("name")): doc
        for doc in documents
        if doc.get("kind") == kind and str(doc.get("apiVersion", "")).startswith(RBAC_GROUP)
    }


def _binds_operator(binding: Mapping[str, Any], want: Declarations, namespace: str | None) -> bool:
    for subject in binding.get("subjects") or ():
        if subject.get("kind") != "ServiceAccount" or subject.get("name") != want.service_account:
            continue
        # A RoleBinding's ServiceAccount subject may leave the namespace to the binding's own.
        if (subject.get("namespace") or namespace) == want.namespace:
            return True
    return False


def _bound_cluster_roles(documents: Sequence[Mapping[str, Any]], want: Declarations) -> list[str]:
    names: list[str] = []
    for binding in _by_name(documents, "ClusterRoleBinding").values():
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole" and _binds_operator(binding, want, None):
            names.append(str(ref.get("name")))
    return sorted(set(names))


def _namespaced_grants(
    documents: Sequence[Mapping[str, Any]], want: Declarations, findings: list[Finding]
) -> list[PolicyRule]:
    """Rules bound to the operator in its own namespace by RoleBindings (Roles or ClusterRoles)."""
    roles = {
        (doc.get("metadata", {}).get("namespace"), doc.get("metadata", {}).get("name")): doc
        for doc in documents
        if doc.get("kind") == "Role"
    }
    cluster_roles = _by_name(documents, "ClusterRole")
    granted: list[PolicyRule] = []
    for doc in documents:
        if doc.get("kind") != "RoleBinding":
            continue
        namespace = doc.get("metadata", {}).get("namespace")
        if namespace != want.namespace or not _binds_operator(doc, want, namespace):
            continue
        ref = doc.get("roleRef") or {}
        if ref.get("kind") == "Role":
            role = roles.get((namespace, ref.get("name")))
        else:
            role = cluster_roles.get(str(ref.get("name")))
        if role is not None:
            granted.extend(_rules(role, findings))
    return granted


def _rules(role: Mapping[str, Any], findings: list[Finding]) -> list[PolicyRule]:
    rules: list[PolicyRule] = []
    for rule in role.get("rules") or ():
        try:
            rules.append(PolicyRule.from_manifest(rule))
        except ValueError as err:
            findings.append(Finding("invalid", f"{_describe(role)}: {err}"))
    return rules


def _wildcards(documents: Sequence[Mapping[str, Any]]) -> list[Finding]:
    findings: list[Finding] = []
    for doc in documents:
        if doc.get("kind") not in ("Role", "ClusterRole"):
            continue
        for index, rule in enumerate(doc.get("rules") or ()):
            for key in ("verbs", "resources", "apiGroups"):
                if WILDCARD in (rule.get(key) or ()):
                    findings.append(
                        Finding(
                            "wildcard",
                            f"{_describe(doc)} rules[{index}] grants a wildcard in {key}: "
                            "spell out what is needed",
                        )
                    )
    return findings


def _describe(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{doc.get('kind')} {where}{meta.get('name')}"


def _grouped(permissions: Iterable[Permission]) -> list[str]:
    """``get, list leases.coordination.k8s.io``: one line per resource, not one per verb."""
    verbs: dict[tuple[str, str, str | None], list[str]] = {}
    for permission in permissions:
        key = (permission.group, permission.resource, permission.resource_name)
        if permission.verb not in verbs.setdefault(key, []):
            verbs[key].append(permission.verb)
    lines = []
    for (group, resource, name), found in verbs.items():
        qualified = f"{resource}.{group}" if group else resource
        named = f" (name {name})" if name else ""
        lines.append(f"{' '.join(found)} on {qualified}{named}")
    return lines
