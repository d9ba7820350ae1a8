"""RBAC rules as values: declare them in code, render them to manifests, compare them.

The API server refuses a Role whose rules its creator does not hold ("is attempting to grant RBAC
permissions not currently held"). To catch that before a user does, rules are data here, and
:func:`uncovered` answers "which of these wanted permissions does that rule set not grant?" with
the API server's own wildcard semantics (``*`` in groups, resources or verbs; empty
``resourceNames`` means every name).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class Permission:
    """One verb on one resource (``pods``, ``pods/status``) of one API group (``""`` is core)."""

    group: str
    resource: str
    verb: str
    resource_name: str | None = None

    def __str__(self) -> str:
        """kubectl style: ``update leases.coordination.k8s.io``."""
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        named = f" (name {self.resource_name})" if self.resource_name else ""
        return f"{self.verb} {resource}{named}"


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One ``rbac.authorization.k8s.io/v1`` PolicyRule (resource rules only)."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def permissions(self) -> Iterator[Permission]:
        """Each permission this rule spells out (wildcards stay as ``*``)."""
        names: Sequence[str | None] = self.resource_names or (None,)
        for group in self.api_groups:
            for resource in self.resources:
                for verb in self.verbs:
                    for name in names:
                        yield Permission(group, resource, verb, name)

    def grants(self, wanted: Permission) -> bool:
        """Whether this rule alone allows ``wanted``."""

        def matches(values: tuple[str, ...], value: str) -> bool:
            return WILDCARD in values or value in values

        if not matches(self.api_groups, wanted.group):
            return False
        if not matches(self.resources, wanted.resource):
            return False
        if not matches(self.verbs, wanted.verb):
            return False
        if not self.resource_names:
            return True
        return wanted.resource_name is not None and wanted.resource_name in self.resource_names

    def has_wildcard(self) -> bool:
        return any(WILDCARD in field for field in (self.api_groups, self.resources, self.verbs))

    def to_manifest(self) -> dict[str, Any]:
        rule: dict[str, Any] = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        return rule

    @classmethod
    def from_manifest(cls, rule: Mapping[str, Any]) -> PolicyRule:
        if rule.get("nonResourceURLs"):
            raise ValueError("non-resource rules are not supported here")
        return cls(
            tuple(rule.get("apiGroups") or ()),
            tuple(rule.get("resources") or ()),
            tuple(rule.get("verbs") or ()),
            tuple(rule.get("resourceNames") or ()),
        )


def uncovered(granted: Iterable[PolicyRule], wanted: Iterable[PolicyRule]) -> list[Permission]:
    """The permissions of ``wanted`` that no rule of ``granted`` allows, in declaration order."""
    held = list(granted)
    return [
        permission
        for rule in wanted
        for permission in rule.permissions()
        if not any(grant.grants(permission) for grant in held)
    ]


#: The order verbs are written in, so a rendered rule reads like kubectl's own output.
VERB_ORDER = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


def compact(rules: Iterable[PolicyRule]) -> tuple[PolicyRule, ...]:
    """The same permissions as ``rules``, one rule per (group, resource, names), verbs merged.

    Declarations repeat themselves (two controllers both read Deployments); a manifest should not.
    Rules come out sorted by group then resource, verbs in :data:`VERB_ORDER` (others after them,
    sorted), so the output is stable and a removed rule shows as one removed block in a diff.
    """
    verbs: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for rule in rules:
        names = tuple(sorted(set(rule.resource_names)))
        for group in rule.api_groups:
            for resource in rule.resources:
                verbs.setdefault((group, resource, names), set()).update(rule.verbs)

    def verb_key(verb: str) -> tuple[int, str]:
        return (VERB_ORDER.index(verb), "") if verb in VERB_ORDER else (len(VERB_ORDER), verb)

    return tuple(
        PolicyRule((group,), (resource,), tuple(sorted(found, key=verb_key)), names)
        for (group, resource, names), found in sorted(verbs.items())
    )
