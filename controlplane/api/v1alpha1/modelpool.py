"""ModelPool (``mpool``): InferenceServices that share one exclusive GPU slot.

The API server refuses a pool whose members are missing, empty or repeated, whose ``default`` is not
one of them, or whose ``swapBudget`` is not a positive duration, and a ``scheduling`` whose bound
is not below the budget or whose floor is above the bound: a pool controller never has to decide
what such a pool could mean.

*Why one module of this size:* it is the whole ModelPool API in one place, as each other kind of
ours is: the spec with its parts (members, capacity, slot server, scheduling), each field carrying
its OpenAPI description and validation rules (most of its lines), the status with its conditions'
vocabulary, and the few readers of a pool's status that both the controller and the router-proxy
use (:func:`member_slot`, :func:`status_residents`, :func:`serves_from_slot_server`), so that both
read a pool alike. Splitting it would spread one CRD's schema over several files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from controlplane.api.fields import Rule, api_field
from controlplane.api.struct import ApiObject
from controlplane.api.v1alpha1.conditions import Condition, conditions_field
from controlplane.api.v1alpha1.inferenceservice import DEFAULT_IMAGE, DEFAULT_PORT
from controlplane.api.v1alpha1.meta import (
    AGE,
    DURATION_PATTERN,
    CustomObject,
    LocalObjectReference,
    PrinterColumn,
    ResourceRequirements,
    dns_label,
)
from controlplane.runtime.objects import ObjectView

SWAP_POLICY_STICKY: Final = "sticky"
SWAP_POLICIES: Final = (SWAP_POLICY_STICKY,)
DEFAULT_SWAP_BUDGET: Final = "300s"
#: The starvation bound when ``spec.scheduling.maxWait`` is unset: a held request gets the slot's
#: turn within this (plus the drain and the swap), well inside the default budget, even while the
#: resident is busy; half the ``swapBudget`` when that is shorter (so a pool with a short budget,
#: which never set a bound, is never refused for one).
DEFAULT_MAX_WAIT: Final = "30s"
#: The anti-thrash floor by default: a few of the quick start's swaps (about 3 s each), so two
#: members with alternating demand spend most of the time serving, not swapping.
DEFAULT_MIN_RESIDENCY: Final = "10s"
#: Member priorities: higher goes first; aging keeps a bound for the lower ones.
MAX_PRIORITY: Final = 1000
#: Members in one pool: a bound that also keeps the uniqueness rule's CEL cost small.
MAX_MEMBERS: Final = 32
#: The slot server's image and port when ``spec.slotServer`` names none: a member's defaults.
DEFAULT_SLOT_SERVER_IMAGE: Final = DEFAULT_IMAGE
DEFAULT_SLOT_SERVER_PORT: Final = DEFAULT_PORT
#: Where the slot server finds its models (``--models-dir``): each member's file as
#: ``<spec.model.name>.gguf`` (docs/modelpool.md, "One slot server").
SLOT_SERVER_MODELS_DIR: Final = "/var/lib/modelpool/slot-models"
#: A member's model name, as the slot server's file name stem (llama.cpp names a model of
#: ``--models-dir`` by its file name): no path separator, no leading dot.
SLOT_SERVER_MODEL_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
#: Longest quantity string accepted (``24Gi``, ``80G``, ``17179869184``): bounds the CEL cost.
MAX_QUANTITY_LENGTH: Final = 32

PHASE_PENDING: Final = "Pending"
PHASE_READY: Final = "Ready"
PHASE_SWAPPING: Final = "Swapping"
PHASE_DEGRADED: Final = "Degraded"
#: The pool gave its slot back after ``spec.scheduling.idleAfter`` (``idleAction: Release``):
#: nothing runs, and the default is not warmed; the next request brings its member up.
PHASE_IDLE: Final = "Idle"
PHASES: Final = (PHASE_PENDING, PHASE_READY, PHASE_SWAPPING, PHASE_DEGRADED, PHASE_IDLE)

CONDITION_SLOT_ALLOCATED: Final = "SlotAllocated"
CONDITION_MEMBERS_VALID: Final = "MembersValid"
CONDITION_SWAP_DEFERRED: Final = "SwapDeferred"
#: The pool can serve, or hold and then serve, a request: what ``kubectl wait`` and Helm read
#: (reasons and why it stays True through a swap: ``controllers/modelpool/ready.py``).
CONDITION_READY: Final = "Ready"
REASON_PODS_BUSY: Final = "PodsBusy"
REASON_IDLE_CHECK_FAILED: Final = "IdleCheckFailed"

#: ``status.members[].slot``: the pool's decision about one member, which the InferenceService
#: controller reads to size the member's Deployment (docs/modelpool.md, "grant"). Granted: it may
#: run (at most one member, which the schema enforces). Released: it must not run. Unset: not
#: decided yet; it keeps what it runs and is never raised.
SLOT_GRANTED: Final = "Granted"
SLOT_RELEASED: Final = "Released"
SLOTS: Final = (SLOT_GRANTED, SLOT_RELEASED)

#: ``spec.scheduling.idleAction``: what an idle resident gives way to (docs/modelpool.md, "Giving
#: an idle slot back").
IDLE_ACTION_DEFAULT: Final = "Default"
IDLE_ACTION_RELEASE: Final = "Release"
IDLE_ACTIONS: Final = (IDLE_ACTION_DEFAULT, IDLE_ACTION_RELEASE)

#: ``status.runtime``: how the pool runs its members now, the pool's decision (docs/modelpool.md,
#: "Turning the slot server on or off"). ``Pods``: each member in a pod of its own;
#: ``SlotServer``: their models in the pool's slot server. It follows ``spec.slotServer`` only
#: once nothing runs the old way, so both controllers and the router-proxies read it, never the
#: spec, to know where a member runs.
RUNTIME_PODS: Final = "Pods"
RUNTIME_SLOT_SERVER: Final = "SlotServer"
RUNTIMES: Final = (RUNTIME_PODS, RUNTIME_SLOT_SERVER)


@dataclass(kw_only=True)
class PoolMember(ApiObject):
    """One member of the pool: an InferenceService of the pool's namespace."""

    inference_service_ref: LocalObjectReference | None = api_field(
        "The member InferenceService.", required=True
    )
    priority: int | None = api_field(
        "Scheduling priority (0..1000, higher first); a waiting member gains one level per "
        "spec.scheduling.maxWait waited, and an overdue one goes first whatever its priority.",
        default=0,
        minimum=0,
        maximum=MAX_PRIORITY,
    )

    gpu_memory: str | None = api_field(
        "The member's footprint: the GPU memory its server uses when loaded, a quantity such as "
        "10Gi (weights, KV cache for its context and parallel slots, compute buffers; "
        'docs/modelpool.md, "Several residents"). Required when spec.capacity.gpuMemory is set.',
        max_length=MAX_QUANTITY_LENGTH,
        rules=(
            Rule(
                "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
                "must be a positive quantity such as 10Gi",
                reason="FieldValueInvalid",
            ),
        ),
    )

    @property
    def name(self) -> str | None:
        ref = self.inference_service_ref
        return ref.name if ref is not None else None


@dataclass(kw_only=True)
class CapacitySpec(ApiObject):
    """How much of the pool's GPU its members may use at once: a count of members, or GPU memory
    shared by the members' declared footprints (docs/modelpool.md, "Several residents")."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.members) != has(self.gpuMemory)",
            "spec.capacity must set exactly one of members and gpuMemory",
            reason="FieldValueInvalid",
        ),
    )

    members: int | None = api_field(
        "How many members may run at once (each counts one).", minimum=1, maximum=MAX_MEMBERS
    )
    gpu_memory: str | None = api_field(
        "GPU memory the running members may use together, a quantity such as 24Gi: the sum of "
        "the footprints (spec.members[].gpuMemory) of every member with a pod not yet gone never "
        "exceeds it.",
        max_length=MAX_QUANTITY_LENGTH,
        rules=(
            Rule(
                "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
                "must be a positive quantity such as 24Gi",
                reason="FieldValueInvalid",
            ),
        ),
    )


@dataclass(kw_only=True)
class SlotServerSpec(ApiObject):
    """The pool's slot as one long-lived llama.cpp server in router mode: models are loaded and
    unloaded in it instead of member pods being started and stopped (docs/modelpool.md, "One
    slot server")."""

    image: str | None = api_field(
        "Container image of the slot server (llama.cpp's server); every member runs in it.",
        default=DEFAULT_SLOT_SERVER_IMAGE,
        min_length=1,
    )
    args: list[str] = api_field(
        "Extra llama-server arguments, given to every member's model (--ctx-size, --parallel, "
        "-ngl ...); a member's own spec.args do not apply in a slot server.",
        default_factory=list,
        list_type="atomic",
        max_items=64,
    )
    port: int | None = api_field(
        "Port the slot server listens on.",
        default=DEFAULT_SLOT_SERVER_PORT,
        format="int32",
        minimum=1,
        maximum=65535,
    )
    resources: ResourceRequirements | None = api_field(
        "Compute resources of the slot server's pod (the pool's GPU request)."
    )


def _duration(description: str, default: str | None, *, positive: bool) -> Any:
    bound = "> duration('0s')" if positive else ">= duration('0s')"
    return api_field(
        description,
        default=default,
        pattern=DURATION_PATTERN,
        max_length=32,
        rules=(
            Rule(
                f"duration(self) {bound}",
                "must be a "
                + ("positive" if positive else "non-negative")
                + " duration (e.g. 30s)",
                reason="FieldValueInvalid",
            ),
        ),
    )


@dataclass(kw_only=True)
class SchedulingSpec(ApiObject):
    """How the slot's turn passes between members (docs/modelpool.md, "Scheduling the slot")."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.minResidency) || !has(self.maxWait) || "
            "duration(self.minResidency) <= duration(self.maxWait)",
            "spec.scheduling.minResidency must not exceed spec.scheduling.maxWait "
            "(the bound wins over the floor)",
            field_path=".minResidency",
            reason="FieldValueInvalid",
        ),
    )

    max_wait: str | None = _duration(
        "The starvation bound: once the oldest request held for a member has waited this long, "
        "the next turn is its own, even inside the resident's minResidency. Unset: 30s, or half "
        "of swapBudget when that is shorter.",
        None,
        positive=True,
    )
    min_residency: str | None = _duration(
        "The anti-thrash floor: a member that became resident keeps the slot at least this long "
        "while it has demand, unless a waiting member reaches maxWait (never longer than "
        "maxWait). 0s turns it off.",
        DEFAULT_MIN_RESIDENCY,
        positive=False,
    )
    idle_after: str | None = _duration(
        "Give an idle slot back: once a resident has had no request in flight and none held "
        "for it (and, in a pool without spec.capacity, none held for any member) this long, on "
        "every router-proxy replica's demand reports, it is drained through the /slots gate "
        "as for a swap and idleAction says what follows. Unset: never.",
        None,
        positive=True,
    )
    idle_action: str | None = api_field(
        "What an idle resident gives way to after idleAfter: Default (the pool drains back to "
        "spec.default, which is never reclaimed itself) or Release (no resident at all: the "
        "slot and its GPU are free until the next request). Unset: Default when the pool has "
        "spec.default, else Release.",
        enum=IDLE_ACTIONS,
    )


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
        Rule(
            "!has(self.scheduling) || !has(self.scheduling.maxWait) || !has(self.swapBudget) || "
            "duration(self.scheduling.maxWait) < duration(self.swapBudget)",
            "spec.scheduling.maxWait must be shorter than spec.swapBudget: a held request must "
            "get its turn before its budget runs out",
            field_path=".scheduling.maxWait",
            reason="FieldValueInvalid",
        ),
        Rule(
            "!has(self.scheduling) || !has(self.scheduling.idleAction) || "
            f"self.scheduling.idleAction != '{IDLE_ACTION_DEFAULT}' || has(self.default)",
            f"spec.scheduling.idleAction {IDLE_ACTION_DEFAULT} drains an idle resident back to "
            "spec.default, which this pool does not set (set it, or use Release)",
            field_path=".scheduling.idleAction",
            reason="FieldValueInvalid",
        ),
        Rule(
            "!has(self.slotServer) || !has(self.capacity)",
            "spec.slotServer and spec.capacity cannot be set together: a slot server holds one "
            "model at a time",
            field_path=".slotServer",
            reason="FieldValueForbidden",
        ),
        Rule(
            "!has(self.capacity) || !has(self.capacity.gpuMemory) || "
            "!isQuantity(self.capacity.gpuMemory) || self.members.all(m, has(m.gpuMemory) && "
            "isQuantity(m.gpuMemory) && "
            "quantity(m.gpuMemory).compareTo(quantity(self.capacity.gpuMemory)) <= 0)",
            "with spec.capacity.gpuMemory, every member must declare spec.members[].gpuMemory, "
            "no larger than the capacity",
            field_path=".members",
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
    scheduling: SchedulingSpec | None = api_field(
        "How the slot's turn passes between members: maxWait (the bound), minResidency (the "
        "floor); defaults apply when absent.",
        default={},
    )
    slot_server: SlotServerSpec | None = api_field(
        "Run the slot as one long-lived llama.cpp server in router mode, loading and unloading "
        "members' models in it (no pod started or stopped by a swap). Unset: each member runs "
        "in pods of its own."
    )
    capacity: CapacitySpec | None = api_field(
        "Several residents at once: how many members, or how much GPU memory, may run together. "
        "Unset: one member at a time (an exclusive slot)."
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
    slot: str | None = api_field(
        "The pool's decision, which sizes the member's Deployment: Granted (it may run), "
        "Released (it must not); unset: not decided, it keeps what it runs and is never raised.",
        enum=SLOTS,
    )
    since: str | None = api_field(
        "When the pool last changed its decision (slot) about the member, in microseconds: the "
        "member's status.poolDecision echoes it once its Deployment follows."
    )
    idle_since: str | None = api_field(
        "Of a resident, with spec.scheduling.idleAfter set: since when it has had no request in "
        "flight and none held for it (as the pool controller saw every replica's reports); "
        "absent while it has.",
        format="date-time",
    )


@dataclass(kw_only=True)
class WaitingDemand(ApiObject):
    """Requests held for one member across the router-proxy replicas, as last reported."""

    member: str | None = api_field("Member InferenceService name.", required=True)
    requests: int | None = api_field("Requests held for it.", format="int64", minimum=0)
    since: str | None = api_field(
        "When the oldest of them arrived, as the pool controller places it.", format="date-time"
    )


@dataclass(kw_only=True)
class BudgetStatus(ApiObject):
    """The capacity of a pool with several residents, and how much of it is in use."""

    capacity: str | None = api_field(
        "spec.capacity as counted: members, or GPU memory.", max_length=MAX_QUANTITY_LENGTH
    )
    used: str | None = api_field(
        "The footprints of the members that hold the slot or still have a pod, summed.",
        max_length=MAX_QUANTITY_LENGTH,
    )


@dataclass(kw_only=True)
class ModelPoolStatus(ApiObject):
    """Observed state of a ModelPool."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.budget) || !has(self.members) || "
            f"self.members.filter(m, has(m.slot) && m.slot == '{SLOT_GRANTED}').size() <= 1",
            "status.members: at most one member may hold the slot's grant (several only under a "
            "status.budget)",
            field_path=".members",
            reason="FieldValueForbidden",
        ),
    )

    phase: str | None = api_field("Pool phase.", enum=PHASES)
    resident_member: str | None = api_field("Member that holds the slot.")
    pending_member: str | None = api_field("Member being brought up by a swap.")
    residents: list[str] = api_field(
        "Every member that holds (part of) the slot and has been Ready since its grant: one "
        "without spec.capacity, up to the capacity with it.",
        default_factory=list,
        max_items=MAX_MEMBERS,
        list_type="set",
    )
    budget: BudgetStatus | None = api_field(
        "Of a pool with spec.capacity: the capacity and how much of it the members holding the "
        "slot use (pods not yet gone included)."
    )
    members: list[MemberStatus] = api_field(
        "Each member's state.",
        default_factory=list,
        list_type="map",
        list_map_keys=("name",),
        max_items=MAX_MEMBERS,
    )
    waiting: list[WaitingDemand] = api_field(
        "Members other than the resident with requests held for them (every replica's demand "
        "reports), oldest first: why the slot is where it is.",
        default_factory=list,
        list_type="map",
        list_map_keys=("member",),
        max_items=MAX_MEMBERS,
    )
    idle_since: str | None = api_field(
        "With spec.scheduling.idleAfter set: since when no member has had a request in flight "
        "or held (every replica's reports); absent while one has.",
        format="date-time",
    )
    reclaiming: list[str] = api_field(
        "Residents idle for spec.scheduling.idleAfter that the pool is giving back: every "
        "router-proxy replica holds new requests for them (which ends the reclaim) instead of "
        "forwarding them to a pod about to drain.",
        default_factory=list,
        max_items=MAX_MEMBERS,
        list_type="set",
    )
    admission_closed: list[str] = api_field(
        "Members the pool is draining (a swap, a reclaim, a change to a pod, a slot-server "
        "change): every router-proxy replica holds new requests for them, and their idle probe "
        "waits until every live replica has acknowledged admissionGeneration with nothing in "
        "flight on them.",
        default_factory=list,
        max_items=MAX_MEMBERS,
        list_type="set",
    )
    admission_generation: int | None = api_field(
        "Raised each time a member joins admissionClosed; each router-proxy replica's demand "
        "report says which generation it has applied.",
        format="int64",
        minimum=0,
    )
    runtime: str | None = api_field(
        "How the members run now, the pool's decision: Pods (each in a pod of its own) or "
        "SlotServer (their models in the pool's slot server). It follows spec.slotServer once "
        "the old way runs nothing: the resident drained through its idle gate, the member pods "
        "or the slot server gone.",
        enum=RUNTIMES,
    )
    observed_generation: int | None = api_field(
        "The .metadata.generation this status describes.", format="int64", minimum=0
    )
    conditions: list[Condition] = conditions_field(
        "Ready (the pool serves or holds requests; True through a swap), SlotAllocated, "
        "MembersValid and SwapDeferred (reasons PodsBusy, IdleCheckFailed)."
    )

    @property
    def resident_names(self) -> list[str]:
        """``residents``, or ``residentMember`` alone in a status written before that field
        (:func:`status_residents` for a status read as a mapping)."""
        if self.residents:
            return list(self.residents)
        return [self.resident_member] if self.resident_member else []


@dataclass(kw_only=True)
class ModelPool(CustomObject):
    """InferenceServices that share one exclusive GPU slot; one of them is resident at a time."""

    KIND: ClassVar[str] = "ModelPool"
    PLURAL: ClassVar[str] = "modelpools"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("mpool",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Policy", ".spec.swapPolicy", description="Swap policy"),
        PrinterColumn("Resident", ".status.residents", description="Members holding the slot"),
        PrinterColumn("Pending", ".status.pendingMember", description="Member being swapped in"),
        PrinterColumn(
            "Waiting", ".status.waiting[*].member", description="Members with held requests"
        ),
        PrinterColumn("Phase", ".status.phase", description="Pool phase"),
        AGE,
        PrinterColumn("Used", ".status.budget.used", description="Capacity in use", priority=1),
        PrinterColumn(
            "Capacity", ".status.budget.capacity", description="Capacity shared", priority=1
        ),
        PrinterColumn(
            "Idle",
            ".status.idleSince",
            "date",
            "How long no member has had a request",
            priority=1,
        ),
        PrinterColumn(
            "Max-Wait", ".spec.scheduling.maxWait", description="Starvation bound", priority=1
        ),
        PrinterColumn(
            "Min-Residency",
            ".spec.scheduling.minResidency",
            description="Anti-thrash floor",
            priority=1,
        ),
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


# -- the pool's decision, read from its status (the pool controller, the members' controller and
# the router-proxy's swap driver read it alike) --------------------------------------------------


def _entry(pool: ObjectView, member: str) -> ObjectView:
    """``pool``'s ``status.members[]`` entry for ``member`` (empty when it has none)."""
    entries: list[ObjectView] = (pool.get("status") or {}).get("members") or []
    return next((entry for entry in entries if entry.get("name") == member), {})


def serves_from_slot_server(pool: ObjectView | None) -> bool:
    """The pool serves its members from one slot server, read from the object as the watch
    delivers it: no member pod runs, its model loads in that server. The pool's decision
    (``status.runtime``), not the spec: turning ``spec.slotServer`` on or off takes effect only
    once the old way runs nothing (the resident drained through its idle gate). A status written
    before that field follows the spec, as it did then."""
    pool = pool or {}
    runtime = (pool.get("status") or {}).get("runtime")
    if runtime in RUNTIMES:
        return bool(runtime == RUNTIME_SLOT_SERVER)
    return (pool.get("spec") or {}).get("slotServer") is not None


def member_slot(pool: ObjectView, member: str) -> str | None:
    """``pool``'s decision about ``member``: ``Granted``, ``Released`` or None (not decided)."""
    slot = _entry(pool, member).get("slot")
    return str(slot) if slot in (SLOT_GRANTED, SLOT_RELEASED) else None


def status_residents(status: ObjectView) -> list[str]:
    """The members a pool's status names resident: ``residents``, or, in a status written before
    that field, ``residentMember`` alone (the router and the tests read it so;
    :attr:`ModelPoolStatus.resident_names` is the same for the typed status)."""
    listed = status.get("residents")
    if isinstance(listed, list):
        return [str(m) for m in listed if m]
    resident = status.get("residentMember")
    return [str(resident)] if resident else []


def status_reclaiming(status: ObjectView) -> list[str]:
    """The residents a pool's status says it is giving back for idleness (``reclaiming``):
    admission to them is closed on every router-proxy replica."""
    listed = status.get("reclaiming")
    return [str(m) for m in listed if m] if isinstance(listed, list) else []


def status_admission(status: ObjectView) -> tuple[list[str], int]:
    """The members a pool's status closes admission to (``admissionClosed``) and the generation
    that closure has (``admissionGeneration``, 0 when unset): every router-proxy replica holds
    new requests for them and acknowledges the generation in its demand report."""
    listed = status.get("admissionClosed")
    closed = [str(m) for m in listed if m] if isinstance(listed, list) else []
    generation = status.get("admissionGeneration")
    valid = isinstance(generation, int) and not isinstance(generation, bool) and generation >= 0
    return closed, generation if valid and isinstance(generation, int) else 0


def member_since(pool: ObjectView, member: str) -> str | None:
    """When ``pool`` last changed its decision about ``member`` (``status.members[].since``)."""
    since = _entry(pool, member).get("since")
    return str(since) if since else None
