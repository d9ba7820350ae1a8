"""How the weights reach the server's pod: volumes, mounts, the fetcher, and the prefetch Job.

Pure functions of the InferenceService and of :class:`WeightsPlacement` (the operator's node cache
and image), used by :mod:`~controlplane.controllers.inferenceservice.desired` for the pod and by
the reconciler for the Job. Per form of ``spec.model.source``
(:mod:`controlplane.api.v1alpha1.modelsource`; docs/inferenceservice.md, "Model weights"):

* a path in the image: nothing is mounted;
* ``file://``: a hostPath volume of the file itself (``type: File``: a missing file keeps the pod
  from starting, it never starts a server without weights), read-only;
* ``pvc://``: the claim, read-only;
* ``https://``/``http://``/``hf://``: the source's folder of the node cache
  (``CACHE/<cache key>``, hostPath ``DirectoryOrCreate``), written by the ``fetch-model``
  container and mounted read-only into the server. The fetcher runs twice: first as the **fetch
  Job** (:func:`desired_fetch_job`), which downloads ahead of any start without taking the slot or
  a GPU, and whose success is the ``ModelReady`` condition; then as the pod's **init container**,
  which finds the verified file by its marker and exits at once (it downloads only if the node
  lost the file, so the pod still never starts a server without weights).

Once the Job has put the file on a node, the Deployment's pod is pinned to that node
(:func:`pinned_affinity`, a ``metadata.name`` field selector as DaemonSets use): a start, and so a
pool's swap, never downloads. The fetcher's token (``spec.model.tokenSecret``) is given to the
fetcher only, never to the server.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.inferenceservice import DEFAULT_CA_KEY, DEFAULT_TOKEN_KEY
from controlplane.api.v1alpha1.modelrouter import DEFAULT_PROXY_IMAGE
from controlplane.api.v1alpha1.modelsource import ParsedSource, SourceKind
from controlplane.controllers.children import MANAGED_BY, MANAGED_BY_LABEL

#: The operator's own volume of the weights, and where it is mounted in every container.
MODEL_VOLUME: Final = "model"
MODEL_MOUNT_DIR: Final = "/var/lib/modelpool/model"
FETCH_CONTAINER: Final = "fetch-model"
#: The node folder of downloaded weights, by default (``controlplane operator --model-cache-path``).
DEFAULT_MODEL_CACHE_PATH: Final = "/var/lib/modelpool/models"
#: The label on a fetch Job's pods naming their InferenceService (never the member label: the
#: member's Service must not select them).
MODEL_OF_LABEL: Final = "inference.modelpool.dev/model-of"
#: The fetcher's exit code for a failure that a retry cannot mend (404, 401, a digest mismatch):
#: the Job fails at once instead of backing off (``podFailurePolicy``).
PERMANENT_EXIT_CODE: Final = 3
#: Retries of a failed fetch pod by the Job's exponential backoff (10 s doubling, capped 6 min).
FETCH_BACKOFF_LIMIT: Final = 6
TOKEN_ENV: Final = "HF_TOKEN"
#: The fetcher's scratch space (huggingface_hub's home); the root filesystem stays read-only.
SCRATCH_VOLUME: Final = "fetch-scratch"
SCRATCH_DIR: Final = "/tmp"
#: ``spec.model.caBundle``'s volume, where it is mounted in the fetcher, and the file it is.
CA_VOLUME: Final = "model-ca"
CA_MOUNT_DIR: Final = "/var/lib/modelpool/ca"
CA_FILE: Final = "ca.crt"
_FETCHER_ENV: Final = (
    {"name": "HF_HOME", "value": f"{SCRATCH_DIR}/hf-home"},
    {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
)
JOB_NAME_PREFIX_MAX: Final = 47


@dataclass(frozen=True, slots=True)
class WeightsPlacement:
    """The operator's side of the weights: where the node cache is and which image fetches."""

    cache_path: str = DEFAULT_MODEL_CACHE_PATH
    fetch_image: str = DEFAULT_PROXY_IMAGE
    #: Environment every fetcher gets (``--fetch-env``: a Hub mirror's ``HF_ENDPOINT``, a proxy),
    #: before the InferenceService's own ``spec.pod.env``, which wins on a name both set.
    fetch_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ModelPodParts:
    """What the source adds to the server's pod."""

    #: The server's ``--model``.
    model_path: str
    volumes: list[dict[str, Any]] = field(default_factory=list)
    server_mounts: list[dict[str, Any]] = field(default_factory=list)
    init_containers: list[dict[str, Any]] = field(default_factory=list)


def source_of(isvc: InferenceService) -> ParsedSource:
    if isvc.spec.model is None:
        raise ValueError(f"InferenceService {isvc.name} has no spec.model")
    return isvc.spec.model.parsed()


def cache_host_path(source: ParsedSource, placement: WeightsPlacement) -> str:
    """The node folder of a fetched source: ``CACHE/<cache key>``."""
    return f"{placement.cache_path.rstrip('/')}/{source.cache_key}"


def cached_file(source: ParsedSource, placement: WeightsPlacement) -> str:
    """Where a fetched source's file is on the node."""
    return f"{cache_host_path(source, placement)}/{source.file_in_cache}"


def model_pod_parts(isvc: InferenceService, placement: WeightsPlacement) -> ModelPodParts:
    """The volume, mount and init container of the source's form (module docstring)."""
    source = source_of(isvc)
    if source.kind is SourceKind.IMAGE:
        return ModelPodParts(source.path)
    if source.kind is SourceKind.FILE:
        mounted = f"{MODEL_MOUNT_DIR}/{source.filename}"
        return ModelPodParts(
            mounted,
            [{"name": MODEL_VOLUME, "hostPath": {"path": source.path, "type": "File"}}],
            [{"name": MODEL_VOLUME, "mountPath": mounted, "readOnly": True}],
        )
    if source.kind is SourceKind.PVC:
        return ModelPodParts(
            f"{MODEL_MOUNT_DIR}/{source.path}",
            [
                {
                    "name": MODEL_VOLUME,
                    "persistentVolumeClaim": {"claimName": source.claim, "readOnly": True},
                }
            ],
            [{"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT_DIR, "readOnly": True}],
        )
    return ModelPodParts(
        f"{MODEL_MOUNT_DIR}/{source.file_in_cache}",
        [*fetch_volumes(source, placement), *ca_volumes(isvc)],
        [{"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT_DIR, "readOnly": True}],
        [fetch_container(isvc, placement)],
    )


def fetch_volumes(source: ParsedSource, placement: WeightsPlacement) -> list[dict[str, Any]]:
    return [
        {
            "name": MODEL_VOLUME,
            "hostPath": {"path": cache_host_path(source, placement), "type": "DirectoryOrCreate"},
        },
        {"name": SCRATCH_VOLUME, "emptyDir": {}},
    ]


def ca_volumes(isvc: InferenceService) -> list[dict[str, Any]]:
    """``spec.model.caBundle`` as a ConfigMap volume of one file, when given."""
    model = isvc.spec.model
    if model is None or model.ca_bundle is None:
        return []
    key = model.ca_bundle.key or DEFAULT_CA_KEY
    return [
        {
            "name": CA_VOLUME,
            "configMap": {"name": model.ca_bundle.name, "items": [{"key": key, "path": CA_FILE}]},
        }
    ]


def fetch_args(isvc: InferenceService) -> list[str]:
    model = isvc.spec.model
    if model is None or not model.source:
        raise ValueError(f"InferenceService {isvc.name} has no spec.model.source")
    digest = ["--sha256", model.sha256] if model.sha256 else []
    return ["fetch-model", "--source", model.source, *digest, "--dest", MODEL_MOUNT_DIR]


def fetch_container(isvc: InferenceService, placement: WeightsPlacement) -> dict[str, Any]:
    """The ``fetch-model`` container, the same in the Job and as the pod's init container.

    It runs as root with every capability dropped: the node cache's folder is created by the
    kubelet as root (a hostPath ignores ``fsGroup``), and owning it is all the fetcher needs.
    """
    model = isvc.spec.model
    assert model is not None
    env: list[dict[str, Any]] = [
        *copy.deepcopy(list(_FETCHER_ENV)),
        *({"name": name, "value": value} for name, value in placement.fetch_env),
        *user_env(isvc),
    ]
    mounts: list[dict[str, Any]] = [
        {"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT_DIR},
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR},
    ]
    if model.ca_bundle is not None:
        env.append({"name": "SSL_CERT_FILE", "value": f"{CA_MOUNT_DIR}/{CA_FILE}"})
        mounts.append({"name": CA_VOLUME, "mountPath": CA_MOUNT_DIR, "readOnly": True})
    if model.token_secret is not None:
        env.append(
            {
                "name": TOKEN_ENV,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": model.token_secret.name,
                        "key": model.token_secret.key or DEFAULT_TOKEN_KEY,
                    }
                },
            }
        )
    container: dict[str, Any] = {
        "name": FETCH_CONTAINER,
        "image": placement.fetch_image,
        "args": fetch_args(isvc),
        "env": env,
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": node_cache_security_context(),
    }
    if env_from := user_env_from(isvc):
        container["envFrom"] = env_from
    return container


def node_cache_security_context() -> dict[str, Any]:
    """What a container that writes the node cache runs as (the fetcher, the cache's collector):
    root, to own the kubelet's root-owned hostPath folders, and nothing else of root's."""
    return {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def user_env(isvc: InferenceService) -> list[dict[str, Any]]:
    """``spec.pod.env``, as the server's and the fetcher's containers take it."""
    pod = isvc.spec.pod
    return [var.to_dict() for var in pod.env] if pod is not None else []


def user_env_from(isvc: InferenceService) -> list[dict[str, Any]]:
    pod = isvc.spec.pod
    return [source.to_dict() for source in pod.env_from] if pod is not None else []


def placement_fields(isvc: InferenceService) -> dict[str, Any]:
    """The pod-spec fields that decide where a pod may run (and may pull from), shared by the
    server's pod and the fetch Job's: the Job must land where the server will."""
    spec = isvc.spec
    fields: dict[str, Any] = {}
    if spec.node_selector:
        fields["nodeSelector"] = dict(spec.node_selector)
    pod = spec.pod
    if pod is None:
        return fields
    if pod.tolerations:
        fields["tolerations"] = [toleration.to_dict() for toleration in pod.tolerations]
    if pod.affinity:
        fields["affinity"] = copy.deepcopy(pod.affinity)
    if pod.priority_class_name:
        fields["priorityClassName"] = pod.priority_class_name
    if pod.image_pull_secrets:
        fields["imagePullSecrets"] = [ref.to_dict() for ref in pod.image_pull_secrets]
    return fields


def pinned_affinity(affinity: Mapping[str, Any] | None, node: str) -> dict[str, Any]:
    """``affinity`` with every required node term also requiring the node ``node`` (terms are
    ORed, so the node's field selector is added to each; none at all becomes one term)."""
    pinned = copy.deepcopy(dict(affinity or {}))
    node_affinity = pinned.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    on_node = {"key": "metadata.name", "operator": "In", "values": [node]}
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*term.get("matchFields", []), on_node]} for term in terms
    ]
    return pinned


def fetch_job_labels(isvc: InferenceService) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, MODEL_OF_LABEL: isvc.name}


def fetch_job_name(isvc: InferenceService, job: Mapping[str, Any]) -> str:
    """``NAME-model-HASH``: a Job's template cannot change, so a changed source (or placement)
    is a new Job of a new name; the hash is of the Job's spec."""
    digest = hashlib.sha256(msgspec.json.encode(job["spec"], order="sorted")).hexdigest()[:8]
    return f"{isvc.name[:JOB_NAME_PREFIX_MAX].rstrip('-')}-model-{digest}"


def desired_fetch_job(
    isvc: InferenceService, placement: WeightsPlacement, owner: Mapping[str, Any]
) -> dict[str, Any]:
    """The Job that downloads a fetched source onto a node the server may run on."""
    source = source_of(isvc)
    if not source.fetched:
        raise ValueError(
            f"InferenceService {isvc.name}: a {source.kind.value} source is not fetched"
        )
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [fetch_container(isvc, placement)],
        "volumes": [*fetch_volumes(source, placement), *ca_volumes(isvc)],
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        **placement_fields(isvc),
    }
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "namespace": isvc.namespace,
            "labels": fetch_job_labels(isvc),
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            "backoffLimit": FETCH_BACKOFF_LIMIT,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": FETCH_CONTAINER,
                            "operator": "In",
                            "values": [PERMANENT_EXIT_CODE],
                        },
                    }
                ]
            },
            "template": {"metadata": {"labels": fetch_job_labels(isvc)}, "spec": pod_spec},
        },
    }
    job["metadata"]["name"] = fetch_job_name(isvc, job)
    return job
