"""Objects the e2e tests create, as a user writes them (plain dicts, as YAML would give)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def pool_body(
    name: str,
    members: Sequence[str],
    default: str | None = None,
    swap_budget: str | None = None,
    *,
    scheduling: Mapping[str, str] | None = None,
    priorities: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A ModelPool of ``members`` (InferenceServices of its namespace); unset fields are left to
    the API server's schema defaults."""
    entries: list[dict[str, Any]] = []
    for member in members:
        entry: dict[str, Any] = {"inferenceServiceRef": {"name": member}}
        if priorities and member in priorities:
            entry["priority"] = priorities[member]
        entries.append(entry)
    spec: dict[str, Any] = {"members": entries}
    if default is not None:
        spec["default"] = default
    if swap_budget is not None:
        spec["swapBudget"] = swap_budget
    if scheduling is not None:
        spec["scheduling"] = dict(scheduling)
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelPool",
        "metadata": {"name": name},
        "spec": spec,
    }


def router_body(name: str, pool: str, backend: str = "gpu") -> dict[str, Any]:
    """A ModelRouter with one backend: ``pool``."""
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "metadata": {"name": name},
        "spec": {"backends": [{"name": backend, "poolRef": {"name": pool}}]},
    }
