"""``metav1.Condition``-shaped status conditions, and the small helpers controllers need.

The schema matches the upstream type (required fields, patterns and lengths) so that a condition
written by a controller is validated the same way the built-in kinds' conditions are.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from controlplane.api.fields import api_field
from controlplane.api.struct import ApiObject

TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"

CONDITION_TYPE_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


@dataclass(kw_only=True)
class Condition(ApiObject):
    """One aspect of the object's current state, as metav1.Condition describes it."""

    type: str | None = api_field(
        "Type of the condition, in CamelCase (e.g. Available).",
        required=True,
        pattern=CONDITION_TYPE_PATTERN,
        max_length=316,
    )
    status: str | None = api_field(
        "Status of the condition.", required=True, enum=(TRUE, FALSE, UNKNOWN)
    )
    observed_generation: int | None = api_field(
        "The .metadata.generation the condition was set from.", format="int64", minimum=0
    )
    last_transition_time: str | None = api_field(
        "When the status last changed.", required=True, format="date-time"
    )
    reason: str | None = api_field(
        "Programmatic identifier of the cause of the last transition, in CamelCase.",
        required=True,
        pattern=CONDITION_REASON_PATTERN,
        min_length=1,
        max_length=1024,
    )
    message: str | None = api_field(
        "Human-readable details about the last transition.", required=True, max_length=32768
    )


def conditions_field(description: str) -> list[Condition]:
    """The ``conditions`` list: a map keyed by type, so each type appears at most once."""
    field: list[Condition] = api_field(
        description, default_factory=list, list_type="map", list_map_keys=("type",), max_items=16
    )
    return field


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: str,
    reason: str,
    message: str,
    observed_generation: int | None,
    now: datetime | None = None,
) -> bool:
    """Set a condition in place; returns whether anything changed.

    ``lastTransitionTime`` moves only when the status flips (the API conventions), so a controller
    that calls this on every reconcile writes status only when something really changed.
    """
    existing = find_condition(conditions, type_)
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if existing is None:
        conditions.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                observed_generation=observed_generation,
                last_transition_time=stamp,
            )
        )
        return True
    before = (existing.status, existing.reason, existing.message, existing.observed_generation)
    if existing.status != status:
        existing.last_transition_time = stamp
    existing.status = status
    existing.reason = reason
    existing.message = message
    existing.observed_generation = observed_generation
    return before != (status, reason, message, observed_generation)
