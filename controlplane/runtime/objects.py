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
from typing import Any

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


def node_cordoned(node: ObjectView | None) -> bool:
    """Whether new pods may no longer be scheduled to ``node`` (``kubectl cordon``, and the first
    step of ``kubectl drain``): its ``spec.unschedulable``."""
    return bool(node and (node.get("spec") or {}).get("unschedulable"))
