"""InferenceService (``isvc``): one model served by one llama.cpp-compatible server.

``spec.replicas`` is the activation signal: a pool scales its members by writing 0 or 1 here, and
the InferenceService controller turns it into its Deployment's replicas. Absent means 1, so an
InferenceService outside any pool simply runs. A member of a pool runs only once that pool has
granted it the slot (the ``inference.modelpool.dev/granted-by`` annotation, see
``controlplane/controllers/modelpool/grant.py``); ``status.pool`` names the pool that decides, so
``kubectl get isvc`` shows why a member asking for 1 is Stopped.

``spec.replicas`` has no server-side default: what absent means is the operator's to say (today
1), and a default would be written into every stored object for good. The REPLICAS column shows
``status.desiredReplicas`` instead, which the controller sets to what the spec asks for, the 1 of an
absent field included.

``status.phase`` tells a pool's swap: the member being drained is ``Draining`` until its process
has exited (then ``Stopped``), the member being brought up is ``Starting`` from the moment its pool
chooses it until its server answers (then ``Ready``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from controlplane.api.fields import api_field
from controlplane.api.struct import ApiObject
from controlplane.api.v1alpha1.conditions import Condition, conditions_field
from controlplane.api.v1alpha1.meta import (
    AGE,
    CustomObject,
    PrinterColumn,
    ResourceRequirements,
)

DEFAULT_IMAGE: Final = "ghcr.io/ggml-org/llama.cpp:server"
DEFAULT_PORT: Final = 8080
RUNTIME_LLAMACPP: Final = "llamacpp"
#: Runtimes whose idle probe (``/slots``) the pool controller understands.
RUNTIMES: Final = (RUNTIME_LLAMACPP,)

PHASE_PENDING: Final = "Pending"
#: Its Deployment is being created, or no deployment controller has reported on it yet.
PHASE_CREATING: Final = "Creating"
#: Asked to run (or chosen by its pool) and not serving yet: the model is loading.
PHASE_STARTING: Final = "Starting"
PHASE_READY: Final = "Ready"
#: Scaled to zero and not gone yet: a pod is still ready or terminating.
PHASE_DRAINING: Final = "Draining"
#: Scaled to zero, no pod left: its GPU memory is free.
PHASE_STOPPED: Final = "Stopped"
PHASE_FAILED: Final = "Failed"
PHASES: Final = (
    PHASE_PENDING,
    PHASE_CREATING,
    PHASE_STARTING,
    PHASE_READY,
    PHASE_DRAINING,
    PHASE_STOPPED,
    PHASE_FAILED,
)


@dataclass(kw_only=True)
class ModelSource(ApiObject):
    """The model to serve: a name clients ask for, and where its weights come from."""

    name: str | None = api_field(
        "Model name as clients request it (the OpenAI `model` field).",
        required=True,
        min_length=1,
        max_length=253,
    )
    source: str | None = api_field(
        "URI or path of the model weights (e.g. a GGUF file), passed to the server.",
        required=True,
        min_length=1,
        max_length=2048,
    )


@dataclass(kw_only=True)
class InferenceServiceSpec(ApiObject):
    """Desired state of an InferenceService."""

    model: ModelSource | None = api_field("The model to serve.", required=True)
    image: str | None = api_field(
        "Container image of the model server.", default=DEFAULT_IMAGE, min_length=1
    )
    args: list[str] = api_field(
        "Extra arguments for the model server.",
        default_factory=list,
        list_type="atomic",
        max_items=64,
    )
    port: int | None = api_field(
        "Port the model server listens on.",
        default=DEFAULT_PORT,
        format="int32",
        minimum=1,
        maximum=65535,
    )
    replicas: int | None = api_field(
        "0 or 1; absent means 1. A pool drives this field to activate its members; a member of a "
        "pool runs only once that pool has granted it the slot.",
        format="int32",
        minimum=0,
        maximum=1,
    )
    resources: ResourceRequirements | None = api_field("Compute resources of the server.")
    node_selector: dict[str, str] = api_field(
        "Node labels the server's pod must match.", default_factory=dict
    )
    runtime: str | None = api_field(
        "Server runtime; its idle probe decides when a pool may drain the member.",
        default=RUNTIME_LLAMACPP,
        enum=RUNTIMES,
    )

    def desired_replicas(self) -> int:
        """The replicas this spec asks for (absent means 1)."""
        return 1 if self.replicas is None else self.replicas


@dataclass(kw_only=True)
class InferenceServiceStatus(ApiObject):
    """Observed state of an InferenceService."""

    phase: str | None = api_field("Lifecycle phase.", enum=PHASES)
    desired_replicas: int | None = api_field(
        "Replicas the spec asks for: spec.replicas, or 1 when it is absent. A member of a pool "
        "runs only once that pool has granted it the slot (see pool and the Ready condition).",
        format="int32",
        minimum=0,
        maximum=1,
    )
    ready_replicas: int | None = api_field(
        "Ready replicas of the server's Deployment.", format="int32", minimum=0
    )
    endpoint: str | None = api_field("In-cluster URL of the server.")
    pool: str | None = api_field(
        "The ModelPool(s) listing this InferenceService: it runs only when that pool grants it."
    )
    observed_generation: int | None = api_field(
        "The .metadata.generation this status describes.", format="int64", minimum=0
    )
    conditions: list[Condition] = conditions_field("Current conditions.")


@dataclass(kw_only=True)
class InferenceService(CustomObject):
    """One model served by one llama.cpp-compatible server (a Deployment and a Service)."""

    KIND: ClassVar[str] = "InferenceService"
    PLURAL: ClassVar[str] = "inferenceservices"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("isvc",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Model", ".spec.model.name", description="Model name"),
        PrinterColumn(
            "Replicas",
            ".status.desiredReplicas",
            "integer",
            "Replicas asked for: spec.replicas, 1 when unset",
        ),
        PrinterColumn("Pool", ".status.pool", description="Pool that decides when it runs"),
        PrinterColumn("Ready", ".status.readyReplicas", "integer", "Ready replicas"),
        PrinterColumn("Phase", ".status.phase", description="Lifecycle phase"),
        PrinterColumn("Endpoint", ".status.endpoint", description="URL", priority=1),
        AGE,
    )

    spec: InferenceServiceSpec = api_field(
        "Desired state.", required=True, default_factory=InferenceServiceSpec
    )
    status: InferenceServiceStatus = api_field(
        "Observed state.", default_factory=InferenceServiceStatus
    )
