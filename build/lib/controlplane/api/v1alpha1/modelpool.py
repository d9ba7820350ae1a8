"""ModelPool (``mpool``): InferenceServices that share one exclusive GPU slot.

The API server refuses a pool whose members are missing, empty or repeated, whose ``default`` is not
one of them, or whose ``swapBudget`` is not a positive duration: a pool controller never has to
decide what such a pool could mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from controlplane.api.fields import Rule, api_field
from controlplane.api.struct import ApiObject
from controlplane.api.v1alpha1.conditions import Condition, conditions_field
from controlplane.api.v1alpha1.meta import (
    AGE,
    DURATION_PATTERN,
    CustomObject,
    LocalObjectReference,
    PrinterColumn,
    dns_label,
)

SWAP_POLICY_STICKY: Final = "sticky"
SWAP_POLICIES: Final = (SWAP_POLICY_STICKY,)
DEFAULT_SWAP_BUDGET: Final = "300s"
#: Members in one pool: a bound that also keeps the uniqueness rule's CEL cost small.
MAX_MEMBERS: Final = 32

PHASE_PENDING: Final = "Pending"
PHASE_READY: Final = "Ready"
PHASE_SWAPPING: Final = "Swapping"
PHASE_DEGRADED: Final = "Degraded"
PHASES: Final = (PHASE_PENDING, PHASE_READY, PHASE_SWAPPING, PHASE_DEGRADED)

CONDITION_SLOT_ALLOCATED: Final = "SlotAllocated"
CONDITION_MEMBERS_VALID: Final = "MembersValid"
CONDITION_SWAP_DEFERRED: Final = "SwapDeferred"
REASON_PODS_BUSY: Final = "PodsBusy"
REASON_IDLE_CHECK_FAILED: Final = "IdleCheckFailed"


@dataclass(kw_only=True)
class PoolMember(ApiObject):
    """One member of the pool: an InferenceService of the pool's namespace."""

    inference_service_ref: LocalObjectReference | None = api_field(
        "The member InferenceService.", required=True
    )

    @property
    def name(self) -> str | None:
        ref = self.inference_service_ref
        return ref.name if ref is not None else None


@dataclass(kw_only=True)
class ModelPoolSpec(ApiObject):
    """Desired state of a ModelPool."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.default) || "
            "self.members.exists(m, m.inferenceServiceRef.name == self.default)",
            "spec.default must name one of spec.members[].inferenceServiceRef.name",
            field_path=".default",
            reason="FieldValueInvalid",
        ),
    )

    members: list[PoolMember] = api_field(
        "InferenceServices sharing the slot (same namespace, at least one, each once).",
        default_factory=list,
        required=True,
        min_items=1,
        max_items=MAX_MEMBERS,
        list_type="atomic",
        rules=(
            Rule(
                "self.all(m, self.exists_one(o, "
                "o.inferenceServiceRef.name == m.inferenceServiceRef.name))",
                "spec.members must be unique: each inferenceServiceRef.name may appear only once",
                reason="FieldValueInvalid",
            ),
        ),
    )
    default: str | None = dns_label("Member to warm while the pool is cold; one of the members.")
    swap_policy: str | None = api_field(
        "How the resident member is chosen; sticky keeps it until another member is requested.",
        default=SWAP_POLICY_STICKY,
        enum=SWAP_POLICIES,
    )
    swap_budget: str | None = api_field(
        "How long a proxy holds a request for a cold member before answering 503 (e.g. 300s).",
        default=DEFAULT_SWAP_BUDGET,
        pattern=DURATION_PATTERN,
        max_length=32,
        rules=(
            Rule(
                "duration(self) > duration('0s')",
                "spec.swapBudget must be a positive duration such as 300s or 5m",
                reason="FieldValueInvalid",
            ),
        ),
    )
    gpu: str | None = api_field(
        "The GPU the members share, for humans (informational).", max_length=253
    )
    node_selector: dict[str, str] = api_field(
        "Node labels every member's pod must match.", default_factory=dict
    )

    def member_names(self) -> list[str]:
        return [m.name for m in self.members if m.name is not None]


@dataclass(kw_only=True)
class MemberStatus(ApiObject):
    """What the pool controller last saw of one member."""

    name: str | None = api_field("Member InferenceService name.", required=True)
    phase: str | None = api_field("The member's phase.")
    resident: bool | None = api_field("Whether the member holds the slot.")


@dataclass(kw_only=True)
class ModelPoolStatus(ApiObject):
    """Observed state of a ModelPool."""

    phase: str | None = api_field("Pool phase.", enum=PHASES)
    resident_member: str | None = api_field("Member that holds the slot.")
    pending_member: str | None = api_field("Member being brought up by a swap.")
    members: list[MemberStatus] = api_field(
        "Each member's state.",
        default_factory=list,
        list_type="map",
        list_map_keys=("name",),
        max_items=MAX_MEMBERS,
    )
    observed_generation: int | None = api_field(
        "The .metadata.generation this status describes.", format="int64", minimum=0
    )
    conditions: list[Condition] = conditions_field(
        "SlotAllocated, MembersValid and SwapDeferred (reasons PodsBusy, IdleCheckFailed)."
    )


@dataclass(kw_only=True)
class ModelPool(CustomObject):
    """InferenceServices that share one exclusive GPU slot; one of them is resident at a time."""

    KIND: ClassVar[str] = "ModelPool"
    PLURAL: ClassVar[str] = "modelpools"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("mpool",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Policy", ".spec.swapPolicy", description="Swap policy"),
        PrinterColumn("Resident", ".status.residentMember", description="Member holding the slot"),
        PrinterColumn("Pending", ".status.pendingMember", description="Member being swapped in"),
        PrinterColumn("Phase", ".status.phase", description="Pool phase"),
        AGE,
    )

    spec: ModelPoolSpec = api_field("Desired state.", required=True, default_factory=ModelPoolSpec)
    status: ModelPoolStatus = api_field("Observed state.", default_factory=ModelPoolStatus)


def parse_duration(text: str | None, default: float) -> float:
    """A Go-style duration (a ``swapBudget``: ``300s``, ``5m``, ``1h30m``, ``500ms``) in s."""
    if not text:
        return default
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    total, number, i = 0.0, "", 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not number:
            return default
        try:
            total += float(number) * units[unit]
        except ValueError:
            return default
        number = ""
        i += len(unit)
    if number or total <= 0:
        return default
    return total
