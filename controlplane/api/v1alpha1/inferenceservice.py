"""InferenceService (``isvc``): one model served by one llama.cpp-compatible server.

``spec.replicas`` (0 or 1, absent means 1) is the user's, and it decides for an InferenceService
outside any pool, which simply runs. A member of a pool is sized by its pool alone: the pool's
decision lives in the pool's own status (``status.members[].slot``, see
``controlplane/controllers/modelpool/grant.py``), never in the member, so a member's manifest
re-applied by ``kubectl apply``, Helm or Argo CD moves nothing. ``status.pool`` names the pool that
decides, so ``kubectl get isvc`` shows why a member is Stopped.

``spec.replicas`` has no server-side default: what absent means is the operator's to say (today
1), and a default would be written into every stored object for good. The REPLICAS column shows
``status.desiredReplicas`` instead: the replicas the controller gives the Deployment (the 1 of an
absent field included, or its pool's decision).

``status.phase`` tells a pool's swap: the member being drained is ``Draining`` until its process
has exited (then ``Stopped``), the member being brought up is ``Starting`` from the moment its pool
chooses it until its server answers (then ``Ready``).

``spec.kvCache`` (opt-in) carries the server's KV cache across a drain: the slots it had filled are
saved to a folder on the node (``hostPath``/NAMESPACE/NAME) before its Deployment is scaled to zero
and restored into the next pod before that pod counts as Ready, each step bounded by
``timeoutSeconds`` (docs/kv-cache.md). ``status.kvCache`` records the last save and restore; its
one-line ``summary`` is the ``KV-Cache`` column of ``kubectl get isvc -o wide``.
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
    PrinterColumn,
    ResourceRequirements,
)
from controlplane.api.v1alpha1.modelsource import (
    SHA256_PATTERN,
    SOURCE_RULES,
    ParsedSource,
    parse_source,
)
from controlplane.api.v1alpha1.podtemplate import PodTemplateFields, subdomain_field
from controlplane.runtime.objects import ObjectView, status_condition

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
#: A change to the member's pod waits for it to be idle (docs/inferenceservice.md, "Changing a
#: serving member"): True while it waits, with the reason it waits.
CONDITION_UPDATE_PENDING: Final = "UpdatePending"
#: Where the per-InferenceService folders of saved KV caches live on the node, by default.
DEFAULT_KV_CACHE_HOST_PATH: Final = "/var/lib/modelpool/kv-cache"
#: Bound of a save and of a restore, each, by default and at most: a drain or a pod's readiness
#: is never held longer than this by the KV cache.
DEFAULT_KV_CACHE_TIMEOUT_SECONDS: Final = 10
MAX_KV_CACHE_TIMEOUT_SECONDS: Final = 300
#: An absolute path of plain segments (no ``//``); ``.`` and ``..`` segments are refused by a rule.
HOST_PATH_PATTERN: Final = r"^(/[A-Za-z0-9._-]+)+/?$"
HOST_PATH_MAX_LENGTH: Final = 1024
#: The key of ``spec.model.tokenSecret`` when it names none.
DEFAULT_TOKEN_KEY: Final = "token"
#: The key of ``spec.model.caBundle`` when it names none.
DEFAULT_CA_KEY: Final = "ca.crt"

#: How a save or a restore ended (``status.kvCache.lastSave.outcome``, ``.lastRestore.outcome``).
KV_SUCCEEDED: Final = "Succeeded"
#: Some slots were done, others failed.
KV_PARTIAL: Final = "Partial"
KV_FAILED: Final = "Failed"
#: ``timeoutSeconds`` ran out; the slots done before it are listed.
KV_TIMED_OUT: Final = "TimedOut"
#: No slot to save (none used) or nothing recorded as saved to restore.
KV_NOTHING: Final = "Nothing"
KV_OUTCOMES: Final = (KV_SUCCEEDED, KV_PARTIAL, KV_FAILED, KV_TIMED_OUT, KV_NOTHING)

#: ``status.model.state``: a fetched source's weights are not on the node yet (its fetch Job is
#: being created or has not started), are being downloaded, are there and verified, or failed.
MODEL_PENDING: Final = "Pending"
MODEL_DOWNLOADING: Final = "Downloading"
MODEL_READY: Final = "Ready"
MODEL_FAILED: Final = "Failed"
MODEL_STATES: Final = (MODEL_PENDING, MODEL_DOWNLOADING, MODEL_READY, MODEL_FAILED)

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
class SecretKey(ApiObject):
    """One key of a Secret of the namespace."""

    name: str | None = subdomain_field("The Secret's name.", required=True)
    key: str | None = api_field(
        "The key in it.", default=DEFAULT_TOKEN_KEY, min_length=1, max_length=253
    )


@dataclass(kw_only=True)
class ConfigMapKey(ApiObject):
    """One key of a ConfigMap of the namespace."""

    name: str | None = subdomain_field("The ConfigMap's name.", required=True)
    key: str | None = api_field(
        "The key in it.", default=DEFAULT_CA_KEY, min_length=1, max_length=253
    )


@dataclass(kw_only=True)
class ModelSource(ApiObject):
    """The model to serve: a name clients ask for, and where its weights come from."""

    RULES: ClassVar[tuple[Rule, ...]] = SOURCE_RULES

    name: str | None = api_field(
        "Model name as clients request it (the OpenAI `model` field).",
        required=True,
        min_length=1,
        max_length=253,
    )
    source: str | None = api_field(
        "Where the weights are (a GGUF file): /PATH (in the server's image), file:///PATH (on "
        "the node), pvc://CLAIM/PATH, https://HOST/PATH (http:// only with sha256) or "
        "hf://ORG/REPO/PATH[@REVISION]; https and hf sources are downloaded once into the "
        "node's cache.",
        required=True,
        min_length=1,
        max_length=2048,
    )
    sha256: str | None = api_field(
        "The weights' SHA-256, in lower-case hex: a download that does not match fails the "
        "InferenceService, naming both digests.",
        pattern=SHA256_PATTERN,
    )
    ca_bundle: ConfigMapKey | None = api_field(
        "A ConfigMap key holding the PEM certificates the fetcher trusts (in place of the public "
        "roots) for a server or Hub mirror under a private CA; given to the fetcher only."
    )
    token_secret: SecretKey | None = api_field(
        "A Secret key holding the token for the download (HF_TOKEN for hf://, a bearer token "
        "for https://); given to the fetcher only, never to the server."
    )

    def parsed(self) -> ParsedSource:
        """The parsed source (:func:`~controlplane.api.v1alpha1.modelsource.parse_source`)."""
        return parse_source(self.source or "", self.sha256)


@dataclass(kw_only=True)
class KvCacheSpec(ApiObject):
    """Carry the server's KV cache (its filled slots) across a scale to zero and back."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.hostPath) || !self.hostPath.matches('(^|/)[.][.]?(/|$)')",
            "hostPath must not contain '.' or '..' segments",
            field_path=".hostPath",
        ),
    )

    enabled: bool | None = api_field(
        "Save the filled slots before the server is scaled to zero and restore them into the "
        "next pod before it counts as Ready (llama.cpp --slot-save-path).",
        default=False,
    )
    host_path: str | None = api_field(
        "Folder on the node that keeps the saved slots across pods; each InferenceService uses "
        "HOSTPATH/NAMESPACE/NAME. An absolute path.",
        default=DEFAULT_KV_CACHE_HOST_PATH,
        pattern=HOST_PATH_PATTERN,
        max_length=HOST_PATH_MAX_LENGTH,
    )
    timeout_seconds: int | None = api_field(
        "Bound of the save, and of the restore, each: past it the scale-down or the readiness "
        "goes ahead without the cache.",
        default=DEFAULT_KV_CACHE_TIMEOUT_SECONDS,
        format="int32",
        minimum=1,
        maximum=MAX_KV_CACHE_TIMEOUT_SECONDS,
    )

    def is_enabled(self) -> bool:
        return bool(self.enabled)

    def timeout(self) -> int:
        return self.timeout_seconds or DEFAULT_KV_CACHE_TIMEOUT_SECONDS

    def root(self) -> str:
        return (self.host_path or DEFAULT_KV_CACHE_HOST_PATH).rstrip("/") or "/"


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
        "0 or 1; absent means 1. Ignored while a ModelPool lists this InferenceService: the pool "
        "decides whether a member runs (its status.members[].slot).",
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

    kv_cache: KvCacheSpec | None = api_field(
        "Carry the KV cache across a scale to zero (a pool's swap); off when absent."
    )
    pod: PodTemplateFields | None = api_field(
        "What the server's pod needs on this cluster: tolerations, affinity, priority and "
        "runtime class, pull secrets, env, extra volumes, pod labels and annotations."
    )
    idle_after: str | None = api_field(
        "Scale to zero when idle: once no router-proxy replica has reported a request in flight "
        "or held for this InferenceService this long, it is scaled to zero through its /slots "
        "gate, and a router-proxy holds its next request while it comes back. Unset: never. "
        "Ignored while a ModelPool lists it (the pool's spec.scheduling.idleAfter applies).",
        pattern=DURATION_PATTERN,
        max_length=32,
        rules=(
            Rule(
                "duration(self) > duration('0s')",
                "spec.idleAfter must be a positive duration (e.g. 15m)",
                reason="FieldValueInvalid",
            ),
        ),
    )

    def desired_replicas(self) -> int:
        """The replicas this spec asks for (absent means 1)."""
        return 1 if self.replicas is None else self.replicas

    def kv_cache_enabled(self) -> bool:
        return self.kv_cache is not None and self.kv_cache.is_enabled()


@dataclass(kw_only=True)
class KvCacheOperation(ApiObject):
    """One save or restore of the KV cache: of which pod, when, which slots, how it ended."""

    outcome: str | None = api_field("How it ended.", enum=KV_OUTCOMES)
    pod: str | None = api_field("The pod whose server saved or restored.")
    time: str | None = api_field("When it ended.", format="date-time")
    slots: list[int] = api_field(
        "Ids of the slots saved (or restored).", default_factory=list, list_type="atomic"
    )
    tokens: int | None = api_field(
        "Tokens saved (n_saved) or restored (n_restored), summed over the slots.",
        format="int64",
        minimum=0,
    )
    bytes_written: int | None = api_field(
        "Bytes written (n_written) by a save.", format="int64", minimum=0
    )
    duration_milliseconds: int | None = api_field(
        "How long it took, all slots together.", format="int64", minimum=0
    )
    message: str | None = api_field("What happened, in words (the failure, if any).")


@dataclass(kw_only=True)
class KvCacheStatus(ApiObject):
    """What was last saved and restored of the KV cache."""

    last_save: KvCacheOperation | None = api_field(
        "The last save; a restore loads the slots it lists."
    )
    last_restore: KvCacheOperation | None = api_field("The last restore.")
    summary: str | None = api_field("One line for kubectl: the last save and restore.")


@dataclass(kw_only=True)
class ModelStatus(ApiObject):
    """Where the weights are and, for a downloaded source, how far their download is."""

    source: str | None = api_field("The spec.model.source this describes.")
    state: str | None = api_field("Where the weights stand.", enum=MODEL_STATES)
    path: str | None = api_field(
        "Where the file is: on the node (the cache's file, or the file:// path), in the claim, "
        "or in the image."
    )
    node: str | None = api_field("The node whose cache holds the download.")
    sha256: str | None = api_field("The digest of the file as downloaded and verified.")
    bytes_done: int | None = api_field("Bytes downloaded so far.", format="int64", minimum=0)
    bytes_total: int | None = api_field("The file's size, once known.", format="int64", minimum=0)
    bytes_per_second: int | None = api_field(
        "The download's recent rate.", format="int64", minimum=0
    )
    fetch_job: str | None = api_field("The Job that downloads the weights into the node cache.")
    summary: str | None = api_field("One line for kubectl: Ready, Downloading 42%, Failed.")
    message: str | None = api_field("What happened, in words (the failure, if any).")


@dataclass(kw_only=True)
class PoolDecisionSeen(ApiObject):
    """The pool decision this InferenceService's Deployment was last sized by: the pool's
    acknowledgement that a release has been carried out (docs/modelpool.md, "The grant")."""

    pool: str | None = api_field("The ModelPool whose decision it is.", required=True)
    slot: str | None = api_field("Its status.members[].slot: Granted or Released.")
    since: str | None = api_field("Its status.members[].since: which decision this is.")
    deployment_generation: int | None = api_field(
        "The Deployment's metadata.generation once sized by it.", format="int64", minimum=0
    )


@dataclass(kw_only=True)
class InferenceServiceStatus(ApiObject):
    """Observed state of an InferenceService."""

    phase: str | None = api_field("Lifecycle phase.", enum=PHASES)
    desired_replicas: int | None = api_field(
        "Replicas the server's Deployment is given: spec.replicas (1 when absent), or for a member "
        "of a pool what that pool decided (see pool and the Ready condition).",
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
    kv_cache: KvCacheStatus | None = api_field(
        "The KV cache's last save and restore (spec.kvCache)."
    )
    pool_decision: PoolDecisionSeen | None = api_field(
        "The pool decision the Deployment was last sized by, once carried out."
    )
    model: ModelStatus | None = api_field(
        "Where the weights are, and how their download goes (the ModelReady condition)."
    )
    idle_since: str | None = api_field(
        "With spec.idleAfter set: since when no router-proxy replica has reported a request in "
        "flight or held for it; absent while one has.",
        format="date-time",
    )
    scaled_to_zero: bool | None = api_field(
        "Scaled to zero (or about to be) after spec.idleAfter without a request: every "
        "router-proxy replica holds its requests instead of forwarding them, and a request held "
        "brings it back."
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
        PrinterColumn(
            "Weights", ".status.model.summary", description="The weights: Ready, Downloading 42%"
        ),
        PrinterColumn("Endpoint", ".status.endpoint", description="URL", priority=1),
        PrinterColumn(
            "Update",
            '.status.conditions[?(@.type=="UpdatePending")].reason',
            description="Whether a change to the pod waits, and for what",
            priority=1,
        ),
        PrinterColumn(
            "KV-Cache",
            ".status.kvCache.summary",
            description="The KV cache's last save and restore",
            priority=1,
        ),
        AGE,
    )

    spec: InferenceServiceSpec = api_field(
        "Desired state.", required=True, default_factory=InferenceServiceSpec
    )
    status: InferenceServiceStatus = api_field(
        "Observed state.", default_factory=InferenceServiceStatus
    )


def scales_to_zero(isvc: ObjectView | None) -> bool:
    """``spec.idleAfter`` is set: a router-proxy holds a request for it while it has no ready
    endpoint, and reports its demand (docs/inferenceservice.md, "Scale to zero")."""
    return bool(((isvc or {}).get("spec") or {}).get("idleAfter"))


def is_scaled_to_zero(isvc: ObjectView | None) -> bool:
    """The controller scaled it to zero for idleness, or is about to (``status.scaledToZero``):
    a router-proxy holds its requests rather than forward them to a pod about to stop."""
    return ((isvc or {}).get("status") or {}).get("scaledToZero") is True


def update_pending(isvc: ObjectView | None) -> bool:
    """A change to the member's pod waits (``UpdatePending`` True), read from the object as the
    watch delivers it: its pool drains it, and every router-proxy replica holds its requests."""
    condition = status_condition(isvc, CONDITION_UPDATE_PENDING)
    return condition is not None and condition.get("status") == "True"
