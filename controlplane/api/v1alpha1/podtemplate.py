"""What a real cluster needs in a member's pod: placement, pull secrets, env, extra volumes.

GPU nodes are usually tainted, labelled and reached through a runtime class, and a model server
often needs a token in its environment or a config file mounted. These fields are copied into the
server's pod as they are (``controlplane/controllers/inferenceservice/desired.py``); their
schemas follow the Kubernetes types they copy. Small types are typed in full, so the API server
refuses a bad toleration or env var on ``kubectl apply``; ``affinity`` and each volume's source are
Kubernetes' own large types, kept whole (``x-kubernetes-preserve-unknown-fields``) with only their
names typed: a malformed one is refused when the operator applies the Deployment, and the
InferenceService's ``Ready`` condition says so with the API server's message.

Names the operator uses itself are refused: the volumes ``model`` and ``kv-cache`` and mount paths
under ``/var/lib/modelpool`` (where the weights and the KV cache are mounted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from controlplane.api.fields import Rule, api_field
from controlplane.api.struct import ApiObject

#: RFC 1123 subdomain: the names of Secrets, ConfigMaps, PriorityClasses and RuntimeClasses.
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
#: RFC 1123 label: a volume's name.
DNS_1123_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: What the API server accepts as an environment variable's name.
ENV_NAME_PATTERN: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
#: Volume names the operator gives its own volumes (the weights, the KV cache).
RESERVED_VOLUMES: Final = ("model", "model-ca", "fetch-scratch", "kv-cache")
#: Where the operator mounts its own volumes: no mount of the user's may go there.
RESERVED_MOUNT_ROOT: Final = "/var/lib/modelpool"

TOLERATION_OPERATORS: Final = ("Exists", "Equal")
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def subdomain_field(description: str, *, required: bool = False) -> Any:
    return api_field(
        description,
        required=required,
        pattern=DNS_SUBDOMAIN_PATTERN,
        min_length=1,
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
    )


@dataclass(kw_only=True)
class Toleration(ApiObject):
    """A taint the server's pod tolerates (core/v1 Toleration), e.g. a GPU node's."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.operator) || self.operator != 'Exists' || !has(self.value) "
            "|| self.value == ''",
            "a toleration with operator Exists has no value",
            field_path=".value",
        ),
        Rule(
            "has(self.key) || (has(self.operator) && self.operator == 'Exists')",
            "a toleration without a key must have operator Exists (it tolerates every taint)",
            field_path=".key",
        ),
    )

    key: str | None = api_field("The taint key; empty with Exists tolerates every taint.")
    operator: str | None = api_field("Exists or Equal (the default).", enum=TOLERATION_OPERATORS)
    value: str | None = api_field("The taint value, with Equal.")
    effect: str | None = api_field(
        "The taint effect to tolerate; empty means every effect.", enum=TAINT_EFFECTS
    )
    toleration_seconds: int | None = api_field(
        "With NoExecute: how long the pod stays bound once the taint appears.", format="int64"
    )


@dataclass(kw_only=True)
class NameReference(ApiObject):
    """A Secret or ConfigMap of the namespace, by name."""

    name: str | None = subdomain_field("Its name.", required=True)


@dataclass(kw_only=True)
class OptionalNameReference(ApiObject):
    """A Secret or ConfigMap of the namespace, by name, which may be allowed to be missing."""

    name: str | None = subdomain_field("Its name.", required=True)
    optional: bool | None = api_field("Start without it when it does not exist.")


@dataclass(kw_only=True)
class EnvVar(ApiObject):
    """One environment variable of the server (core/v1 EnvVar)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!(has(self.value) && has(self.valueFrom))",
            "an env var has either value or valueFrom, not both",
        ),
    )

    name: str | None = api_field(
        "The variable's name.", required=True, pattern=ENV_NAME_PATTERN, max_length=1024
    )
    value: str | None = api_field("Its value.")
    value_from: dict[str, Any] | None = api_field(
        "Its source (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef), as in a pod."
    )


@dataclass(kw_only=True)
class EnvFromSource(ApiObject):
    """Every key of a Secret or ConfigMap as environment variables (core/v1 EnvFromSource)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.configMapRef) != has(self.secretRef)",
            "an envFrom entry names exactly one of configMapRef and secretRef",
        ),
    )

    prefix: str | None = api_field("Prepended to every key.", pattern=ENV_NAME_PATTERN)
    config_map_ref: OptionalNameReference | None = api_field("The ConfigMap.")
    secret_ref: OptionalNameReference | None = api_field("The Secret.")


@dataclass(kw_only=True)
class Volume(ApiObject):
    """An extra volume of the server's pod (core/v1 Volume: a name and one volume source,
    e.g. ``persistentVolumeClaim``, ``configMap``, ``secret``, ``emptyDir``, ``csi``)."""

    KEEP_UNKNOWN_FIELDS: ClassVar[bool] = True
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!(self.name in " + str(list(RESERVED_VOLUMES)).replace('"', "'") + ")",
            f"volume names {', '.join(RESERVED_VOLUMES)} are the operator's",
            field_path=".name",
        ),
    )

    name: str | None = api_field(
        "The volume's name, as volumeMounts refer to it.",
        required=True,
        pattern=DNS_1123_LABEL_PATTERN,
        max_length=63,
    )


@dataclass(kw_only=True)
class VolumeMount(ApiObject):
    """Where one of ``volumes`` is mounted in the server's container (core/v1 VolumeMount)."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            f"self.mountPath != '{RESERVED_MOUNT_ROOT}' && "
            f"!self.mountPath.startsWith('{RESERVED_MOUNT_ROOT}/')",
            f"mount paths under {RESERVED_MOUNT_ROOT} are the operator's",
            field_path=".mountPath",
        ),
    )

    name: str | None = api_field("The volume's name.", required=True, min_length=1)
    mount_path: str | None = api_field(
        "Absolute path in the container.", required=True, pattern=r"^/", max_length=4096
    )
    read_only: bool | None = api_field("Mount read-only.")
    sub_path: str | None = api_field("A path inside the volume to mount instead of its root.")


@dataclass(kw_only=True)
class PodTemplateFields(ApiObject):
    """The parts of the server's pod a cluster decides: copied into the pod as they are."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && "
            "self.volumes.exists(v, v.name == m.name))",
            "every volumeMount names one of pod.volumes",
            field_path=".volumeMounts",
        ),
    )

    tolerations: list[Toleration] = api_field(
        "Taints the pod tolerates (a GPU node's, typically).",
        default_factory=list,
        list_type="atomic",
        max_items=64,
    )
    affinity: dict[str, Any] | None = api_field(
        "The pod's affinity (core/v1 Affinity: nodeAffinity, podAffinity, podAntiAffinity)."
    )
    priority_class_name: str | None = subdomain_field("The pod's PriorityClass.")
    runtime_class_name: str | None = subdomain_field(
        "The pod's RuntimeClass (e.g. nvidia, for the NVIDIA container runtime)."
    )
    image_pull_secrets: list[NameReference] = api_field(
        "Secrets to pull the server's image with.",
        default_factory=list,
        list_type="map",
        list_map_keys=("name",),
        max_items=16,
    )
    env: list[EnvVar] = api_field(
        "Environment of the server, and of the weights' fetcher (HF_ENDPOINT, HTTPS_PROXY, "
        "SSL_CERT_FILE apply to downloads).",
        default_factory=list,
        list_type="map",
        list_map_keys=("name",),
        max_items=128,
    )
    env_from: list[EnvFromSource] = api_field(
        "Secrets and ConfigMaps whose keys become the environment of the server and of the "
        "fetcher.",
        default_factory=list,
        list_type="atomic",
        max_items=16,
    )
    volumes: list[Volume] = api_field(
        "Extra volumes of the pod.",
        default_factory=list,
        list_type="map",
        list_map_keys=("name",),
        max_items=32,
    )
    volume_mounts: list[VolumeMount] = api_field(
        "Where the server's container mounts them.",
        default_factory=list,
        list_type="atomic",
        max_items=32,
    )
    annotations: dict[str, str] = api_field(
        "Annotations of the pod (not of the Deployment).", default_factory=dict
    )
    labels: dict[str, str] = api_field(
        "Labels of the pod; the operator's own labels win over these.", default_factory=dict
    )
