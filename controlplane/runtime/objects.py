"""What a Kubernetes object is to this project: a decoded JSON document, in two views.

Objects are plain dicts decoded by the framework's own fast JSON parser (no generated model
classes). Two names, because the type checker can then keep a promise the cache makes (readers
never mutate cached objects, docs/framework.md):

- :data:`Object`, a ``dict``: an object its holder owns and may build or change (a request
  body, a decoded response, a desired child).
- :data:`ObjectView`, a read-only ``Mapping``: what code that only reads takes (routing and
  activation decisions over cached objects, predicates, index functions). Every ``Object`` is an
  ``ObjectView``, so a reader accepts both; a reader cannot mutate what it was handed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: A decoded Kubernetes object its holder may change.
Object = dict[str, Any]
#: A Kubernetes object as read-only code sees it.
ObjectView = Mapping[str, Any]


def status_condition(obj: ObjectView | None, type_: str) -> ObjectView | None:
    """The object's ``status.conditions`` entry of type ``type_``, if it reports one."""
    for condition in ((obj or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == type_:
            return condition  # type: ignore[no-any-return]
    return None


#: Taints by which the common node autoscalers mark a node they are about to drain and remove,
#: each as (key, value or ``None`` for any): Karpenter 1.x (``karpenter.sh/disrupted``), Karpenter
#: 0.32 to 0.37 (``karpenter.sh/disruption=disrupting``), and the Cluster Autoscaler's scale-down
#: (``ToBeDeletedByClusterAutoscaler``). The Cluster Autoscaler's
#: ``DeletionCandidateOfClusterAutoscaler`` is a soft ``PreferNoSchedule`` mark on a node it may
#: pick some day, not a drain, so it is not among them.
DISRUPTION_TAINTS: Final = (
    ("karpenter.sh/disrupted", None),
    ("karpenter.sh/disruption", "disrupting"),
    ("ToBeDeletedByClusterAutoscaler", None),
)
#: The effects that keep new pods off a node (``PreferNoSchedule`` only discourages them).
_BARRING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


def node_leaving(node: ObjectView | None) -> bool:
    """Whether ``node`` is being emptied, so new pods may no longer land on it and the ones on it
    must move: cordoned (``spec.unschedulable``: ``kubectl cordon``, the first step of ``kubectl
    drain``), or tainted for removal by a node autoscaler (:data:`DISRUPTION_TAINTS`), which
    then evicts through the same Eviction API a drain uses."""
    if not node:
        return False
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return True
    for taint in spec.get("taints") or ():
        if taint.get("effect") not in _BARRING_EFFECTS:
            continue
        for key, value in DISRUPTION_TAINTS:
            if taint.get("key") == key and (value is None or taint.get("value") == value):
                return True
    return False
