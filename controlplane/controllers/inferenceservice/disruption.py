"""Evictions wait for idle: each member's PodDisruptionBudget, and the node a drain empties.

A node drain (``kubectl drain``, a cluster upgrade) cordons the node and then evicts its pods
through the Eviction API, which honours PodDisruptionBudgets. An eviction is a disruption like a
swap or an edit: it must never stop a member while its ``/slots`` say busy (docs/design.md,
"Day-2 operations"). The Eviction API cannot ask ``/slots``, so the operator keeps evictions out
and moves the member itself, through the idle gate every other change takes:

* **The budget.** Per InferenceService, a ``policy/v1`` PodDisruptionBudget of the same name
  (owned by it, as its Service) selects the member's pods with ``maxUnavailable: 0``: an eviction
  of a member's serving pod is refused (429) whoever asks. ``unhealthyPodEvictionPolicy:
  AlwaysAllow`` lets a pod that is not Ready (loading, crash-looping, restoring its KV cache) be
  evicted at once: it serves nothing, so nothing is cut, and a broken member never blocks a
  drain.
* **The move.** A live pod on a cordoned node (``spec.unschedulable``, what a drain sets first)
  must leave it: the InferenceService's ``UpdatePending`` turns True as for a change to its pod
  (:mod:`~controlplane.controllers.inferenceservice.rollout`, which decides when). A pool member
  is drained by its pool (admission closed, ``/slots`` idle, released, granted again); a member
  no pool lists has the pod deleted once every endpoint's ``/slots`` say idle. The next pod is
  scheduled wherever the member can run (never on the cordoned node), and the drain's next retry
  finds the pod gone.

Pure: the reconciler applies what :func:`desired_disruption_budget` returns only when the cached
one differs, and deletes what :func:`pods_leaving` names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.children import idle_gated_budget
from controlplane.controllers.inferenceservice.desired import (
    child_labels,
    owner_reference,
    selector_labels,
)
from controlplane.runtime.objects import node_leaving


def desired_disruption_budget(isvc: InferenceService) -> dict[str, Any]:
    """The member's PodDisruptionBudget, as a server-side apply body."""
    metadata = {
        "name": isvc.name,
        "namespace": isvc.namespace,
        "labels": child_labels(isvc.name),
        "ownerReferences": [owner_reference(isvc)],
    }
    return idle_gated_budget(metadata, selector_labels(isvc.name))


def pods_leaving(
    pods: Iterable[Mapping[str, Any]], node: Callable[[str], Mapping[str, Any] | None]
) -> list[Mapping[str, Any]]:
    """The member's live pods (not Terminating) bound to a cordoned node: each must move, through
    the idle gate. ``node`` looks a Node up by name (None: unknown)."""
    leaving = []
    for pod in pods:
        name = (pod.get("spec") or {}).get("nodeName")
        if name and not pod["metadata"].get("deletionTimestamp") and node_leaving(node(name)):
            leaving.append(pod)
    return leaving


def leaving_node(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The node the first of ``pods`` (from :func:`pods_leaving`) leaves, for the condition."""
    return str(pods[0]["spec"]["nodeName"]) if pods else None
