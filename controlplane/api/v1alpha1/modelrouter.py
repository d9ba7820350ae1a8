"""ModelRouter (``mr``): one router-proxy Deployment and its Service in front of backends.

A backend is either a single InferenceService or a whole ModelPool, never both and never neither;
the API server enforces that, along with unique backend names and a ``defaultBackend`` that names
one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from controlplane.api.fields import Rule, api_field
from controlplane.api.struct import ApiObject
from controlplane.api.v1alpha1.conditions import Condition, conditions_field
from controlplane.api.v1alpha1.meta import (
    AGE,
    CustomObject,
    LocalObjectReference,
    PrinterColumn,
    ResourceRequirements,
)

#: The release image, for a proxy whose router names none when the operator cannot read its own
#: (outside a Pod): see :mod:`controlplane.operator.proxyimage`. The proxy is a subcommand of the
#: same console script as the operator.
DEFAULT_PROXY_IMAGE: Final = "ghcr.io/modelpool/controlplane:0.1.0"
MIN_PROXY_REPLICAS: Final = 1
MAX_PROXY_REPLICAS: Final = 10
MAX_BACKENDS: Final = 64
#: ``spec.proxy.terminationGracePeriodSeconds``: how long a stopping proxy pod may take, its
#: streams relayed to their end within it (docs/router.md, "Stopping"). The default is sized for a
#: long generation: 8,000 tokens at 15 tokens/s is about 9 minutes. An idle proxy exits after its
#: endpoint-propagation delay whatever this says; only a stream still relayed makes it wait.
DEFAULT_PROXY_TERMINATION_GRACE_SECONDS: Final = 600
#: The proxy's endpoint-propagation delay (5 s) and its exit margin (5 s) come out of it first;
#: below this a stream in flight would get almost nothing.
MIN_PROXY_TERMINATION_GRACE_SECONDS: Final = 15
#: An hour: a pod that may hold a node drain longer than that is a mistake, not a long stream.
MAX_PROXY_TERMINATION_GRACE_SECONDS: Final = 3600
#: A backend name may look like a model name (``llama-3.1-8b``), so dots and underscores are
#: allowed; it is never used as an object name.
BACKEND_NAME_PATTERN: Final = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
#: A Secret's name: a DNS-1123 subdomain (lower-case labels joined by dots), at most 253 long.
SECRET_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_NAME_MAX_LENGTH: Final = 253
#: Room for the suffix of the objects a router owns (``<name>-activation`` is 11 characters more).
ROUTER_NAME_MAX_LENGTH: Final = 52

PHASE_PENDING: Final = "Pending"
PHASE_PROVISIONING: Final = "Provisioning"
PHASE_READY: Final = "Ready"
PHASE_DEGRADED: Final = "Degraded"
PHASE_FAILED: Final = "Failed"
PHASES: Final = (PHASE_PENDING, PHASE_PROVISIONING, PHASE_READY, PHASE_DEGRADED, PHASE_FAILED)

CONDITION_AVAILABLE: Final = "Available"
CONDITION_BACKENDS_READY: Final = "BackendsReady"
#: The router can take traffic: ``Available`` and ``BackendsReady`` both True (what ``kubectl
#: wait`` and Helm read; reasons in ``controllers/modelrouter/status.py``).
CONDITION_READY: Final = "Ready"
#: ``Available`` is False with this reason when the activation Role cannot be written (a 403).
REASON_ACTIVATION_RBAC: Final = "ActivationRBAC"


@dataclass(kw_only=True)
class Backend(ApiObject):
    """One model the router serves: exactly one of inferenceServiceRef or poolRef."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.inferenceServiceRef) != has(self.poolRef)",
            "each spec.backends[] entry must set exactly one of inferenceServiceRef or poolRef",
            reason="FieldValueInvalid",
        ),
    )

    name: str | None = api_field(
        "Name of the backend, unique within the router.",
        required=True,
        pattern=BACKEND_NAME_PATTERN,
        min_length=1,
        max_length=128,
    )
    inference_service_ref: LocalObjectReference | None = api_field(
        "A single InferenceService of the router's namespace."
    )
    pool_ref: LocalObjectReference | None = api_field("A ModelPool of the router's namespace.")


@dataclass(kw_only=True)
class ProxySpec(ApiObject):
    """The router-proxy Deployment."""

    replicas: int | None = api_field(
        "Proxy replicas; pooled routers elect one swap driver per pool through a Lease.",
        default=MIN_PROXY_REPLICAS,
        format="int32",
        minimum=MIN_PROXY_REPLICAS,
        maximum=MAX_PROXY_REPLICAS,
    )
    image: str | None = api_field(
        "Container image of the proxy; unset runs the operator's own image.", min_length=1
    )
    resources: ResourceRequirements | None = api_field("Compute resources of each replica.")
    termination_grace_period_seconds: int | None = api_field(
        "Seconds a stopping proxy pod (a rollout, an eviction, a node drain) has to finish: it "
        "stops being Ready at once, answers the requests it holds 503 with Retry-After, and "
        "relays its streams to their end within this; an idle proxy exits within seconds.",
        default=DEFAULT_PROXY_TERMINATION_GRACE_SECONDS,
        format="int64",
        minimum=MIN_PROXY_TERMINATION_GRACE_SECONDS,
        maximum=MAX_PROXY_TERMINATION_GRACE_SECONDS,
    )


@dataclass(kw_only=True)
class SecretReference(ApiObject):
    """A Secret of the router's namespace, by name (a DNS-1123 subdomain, as Secret names are)."""

    name: str | None = api_field(
        "Name of the Secret, in the router's namespace.",
        required=True,
        pattern=SECRET_NAME_PATTERN,
        min_length=1,
        max_length=SECRET_NAME_MAX_LENGTH,
    )


@dataclass(kw_only=True)
class RouterAuth(ApiObject):
    """Who may use the router: API keys the proxy asks for (docs/router.md, "API keys")."""

    api_key_secret: SecretReference | None = api_field(
        "Secret whose every data value is one accepted API key, sent as 'Authorization: Bearer "
        "KEY'; add a key before removing the old one to rotate. Mounted into the proxy pods and "
        "re-read while they run; a Secret that does not exist keeps them from starting.",
        required=True,
    )


@dataclass(kw_only=True)
class ModelRouterSpec(ApiObject):
    """Desired state of a ModelRouter."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.defaultBackend) || self.backends.exists(b, b.name == self.defaultBackend)",
            "spec.defaultBackend must name one of spec.backends[].name",
            field_path=".defaultBackend",
            reason="FieldValueInvalid",
        ),
    )

    backends: list[Backend] = api_field(
        "Models the router serves (unique names, at least one).",
        default_factory=list,
        required=True,
        min_items=1,
        max_items=MAX_BACKENDS,
        list_type="map",
        list_map_keys=("name",),
    )
    default_backend: str | None = api_field(
        "Backend for requests that name no model.", max_length=128
    )
    proxy: ProxySpec | None = api_field("The proxy Deployment.", default={})
    auth: RouterAuth | None = api_field(
        "Ask every request to /v1/ for an API key; unset, the router is open to whatever can "
        "reach it."
    )


@dataclass(kw_only=True)
class BackendStatus(ApiObject):
    """Which path one backend's requests take (docs/modelrouter.md, "A backend in a pool")."""

    name: str | None = api_field("The backend (spec.backends[].name).", required=True)
    pool: str | None = api_field(
        "The ModelPool its requests go through, with that pool's admission, demand and drain: "
        "its poolRef, or the pool that holds the InferenceService its inferenceServiceRef names; "
        "unset for an InferenceService no pool lists."
    )


@dataclass(kw_only=True)
class ModelRouterStatus(ApiObject):
    """Observed state of a ModelRouter."""

    phase: str | None = api_field("Router phase.", enum=PHASES)
    endpoint: str | None = api_field("In-cluster URL of the proxy Service.")
    observed_generation: int | None = api_field(
        "The .metadata.generation this status describes.", format="int64", minimum=0
    )
    conditions: list[Condition] = conditions_field(
        "Ready (Available and BackendsReady both True), Available and BackendsReady; reasons "
        "name the failing step (e.g. ActivationRBAC)."
    )
    backends: list[BackendStatus] = api_field(
        "Each backend and the pool it is served through: a backend that names a pool's member "
        "is never reached around that pool.",
        default_factory=list,
        list_type="map",
        list_map_keys=("name",),
        max_items=MAX_BACKENDS,
    )


@dataclass(kw_only=True)
class ModelRouter(CustomObject):
    """One router-proxy Deployment and its Service, serving InferenceServices and ModelPools."""

    KIND: ClassVar[str] = "ModelRouter"
    PLURAL: ClassVar[str] = "modelrouters"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("mr",)
    NAME_MAX_LENGTH: ClassVar[int] = ROUTER_NAME_MAX_LENGTH
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Default", ".spec.defaultBackend", description="Default backend"),
        PrinterColumn("Replicas", ".spec.proxy.replicas", "integer", "Proxy replicas"),
        PrinterColumn("Phase", ".status.phase", description="Router phase"),
        PrinterColumn("Endpoint", ".status.endpoint", description="Proxy URL", priority=1),
        AGE,
    )

    spec: ModelRouterSpec = api_field(
        "Desired state.", required=True, default_factory=ModelRouterSpec
    )
    status: ModelRouterStatus = api_field("Observed state.", default_factory=ModelRouterStatus)
