"""Objects the e2e tests create, as a user writes them (plain dicts, as YAML would give)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pool_body(
    name: str,
    members: Sequence[str],
    default: str | None = None,
    swap_budget: str | None = None,
) -> dict[str, Any]:
    """A ModelPool of ``members`` (InferenceServices of its namespace); unset fields are left to
    the API server's schema defaults."""
    spec: dict[str, Any] = {"members": [{"inferenceServiceRef": {"name": m}} for m in members]}
    if default is not None:
        spec["default"] = default
    if swap_budget is not None:
        spec["swapBudget"] = swap_budget
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelPool",
        "metadata": {"name": name},
        "spec": spec,
    }
