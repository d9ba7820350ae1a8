"""What the three kinds share: the group and version, name rules, object metadata, resources.

Names of the kinds are DNS-1035 labels (a lower-case letter first), not the DNS-1123 subdomains the
API server accepts for custom resources by default: an InferenceService's name becomes the name of
its Service, which must be a DNS-1035 label, and a reference can only name what can exist. So the
same pattern guards ``metadata.name`` and every reference, and a bad name is refused on ``kubectl
apply`` rather than by a controller that cannot create a Service later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final

from controlplane.api.fields import Values, api_field
from controlplane.api.struct import ApiObject
from controlplane.runtime.resources import Resource

GROUP: Final = "inference.modelpool.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
#: ``kubectl get modelpool-all`` lists every kind of this API (and stays out of ``get all``).
CATEGORY: Final = "modelpool-all"

#: RFC 1035 label: what a Service name must be.
DNS_LABEL_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_MAX_LENGTH: Final = 63
#: A Go ``time.Duration`` without sign: ``300s``, ``5m``, ``1h30m``, ``1.5s``, ``250ms``.
DURATION_PATTERN: Final = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
#: ``resource.Quantity``: a signed decimal number with an SI, binary-SI or exponent suffix.
QUANTITY_PATTERN: Final = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)))?$"
)

Quantity = Annotated[int | str, Values(pattern=QUANTITY_PATTERN)]


def dns_label(description: str, *, required: bool = False, max_length: int = 63) -> Any:
    """A field that names an object of this API (so it must be a valid name of one)."""
    return api_field(
        description,
        required=required,
        pattern=DNS_LABEL_PATTERN,
        min_length=1,
        max_length=max_length,
    )


@dataclass(kw_only=True)
class LocalObjectReference(ApiObject):
    """A reference to an object of the referring object's own namespace, by name."""

    name: str | None = dns_label("Name of the object, in the same namespace.", required=True)


@dataclass(kw_only=True)
class ResourceRequirements(ApiObject):
    """Compute resources (CPU, memory, GPUs) as a container's ``resources`` field takes them."""

    limits: dict[str, Quantity] = api_field(
        "Maximum amount of each resource, e.g. nvidia.com/gpu: 1.", default_factory=dict
    )
    requests: dict[str, Quantity] = api_field(
        "Minimum amount of each resource the scheduler must find.", default_factory=dict
    )


@dataclass(kw_only=True)
class ObjectMeta(ApiObject):
    """Standard object metadata; only what the operator reads is typed, the rest kept as sent."""

    name: str | None = api_field("Name of the object.")
    namespace: str | None = api_field("Namespace of the object.")
    generate_name: str | None = api_field("Prefix for a server-generated name.")
    uid: str | None = api_field("Unique identifier set by the server.")
    resource_version: str | None = api_field("Version for optimistic concurrency.")
    generation: int | None = api_field("Spec generation, incremented by the server.")
    creation_timestamp: str | None = api_field("When the object was created (RFC 3339).")
    deletion_timestamp: str | None = api_field("When deletion was requested (RFC 3339).")
    labels: dict[str, str] = api_field("Labels.", default_factory=dict)
    annotations: dict[str, str] = api_field("Annotations.", default_factory=dict)
    finalizers: list[str] = api_field("Finalizers.", default_factory=list)
    owner_references: list[dict[str, Any]] = api_field("Owners.", default_factory=list)


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry: what ``kubectl get`` shows."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0

    def to_crd(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


@dataclass(kw_only=True)
class CustomObject(ApiObject):
    """Base of the three kinds: identity, metadata, and how the CRD names and prints them.

    ``apiVersion`` and ``kind`` are constants of the class, written on every :meth:`to_dict`, so an
    object built in code can be sent to the API server as it is.
    """

    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SHORT_NAMES: ClassVar[tuple[str, ...]]
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]]
    #: Longest ``metadata.name``: the names of the objects derived from it must still fit.
    NAME_MAX_LENGTH: ClassVar[int] = DNS_LABEL_MAX_LENGTH

    metadata: ObjectMeta = api_field("Standard object metadata.", default_factory=ObjectMeta)

    @classmethod
    def resource(cls) -> Resource:
        """Where the API serves this kind (what :class:`~controlplane.runtime.client` needs)."""
        return Resource(GROUP, VERSION, cls.PLURAL, cls.KIND)

    @property
    def name(self) -> str:
        if self.metadata.name is None:
            raise ValueError(f"this {self.KIND} has no metadata.name")
        return self.metadata.name

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    def to_dict(self) -> dict[str, Any]:
        encoded = super().to_dict()
        return {"apiVersion": API_VERSION, "kind": self.KIND, **encoded}
