"""The API server refuses every malformed ``spec.model.source`` by name, and the parser agrees.

The source's forms are checked twice: by the CRD's CEL rules when an object is written, and by
:func:`~controlplane.api.v1alpha1.modelsource.parse_source` when the controller builds the pod.
Each case here goes to the real API server and to the parser, and both must give the same
verdict with the same message, so neither can drift from the other. The pod-template fields
(``spec.pod``) are checked the same way for what the schema types.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.modelsource import (
    MSG_DOTS,
    MSG_FILE,
    MSG_HF,
    MSG_HTTP_DIGEST,
    MSG_HTTPS,
    MSG_IMAGE,
    MSG_PVC,
    MSG_SCHEME,
    SourceError,
    parse_source,
)
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Invalid
from tests.e2e.test_api_validation import ISVC, changed, crds

pytestmark = [pytest.mark.anyio, pytest.mark.any_cluster, pytest.mark.usefixtures("crds")]
__all__ = ["crds"]

DIGEST = "a" * 64

#: (source, sha256 or None, the message both the API server and the parser give)
MALFORMED: list[tuple[str, str | None, str]] = [
    ("models/x.gguf", None, MSG_SCHEME),
    ("ftp://host/x.gguf", None, MSG_SCHEME),
    ("s3://bucket/x.gguf", None, MSG_SCHEME),
    ("/models/", None, MSG_IMAGE),
    ("/models/../etc/passwd", None, MSG_DOTS),
    ("file://host/x.gguf", None, MSG_FILE),
    ("file:///models/./x.gguf", None, MSG_DOTS),
    ("pvc://Models/x.gguf", None, MSG_PVC),
    ("pvc://models", None, MSG_PVC),
    ("pvc://models/", None, MSG_PVC),
    ("https://host", None, MSG_HTTPS),
    ("https://host/models/", None, MSG_HTTPS),
    ("https://user@host/x.gguf", None, MSG_HTTPS),
    ("http://host/x.gguf", None, MSG_HTTP_DIGEST),
    ("hf://org/repo", None, MSG_HF),
    ("hf://org/repo/", None, MSG_HF),
    ("hf://org/repo/x.gguf@", None, MSG_HF),
    ("hf://org/repo/x.gguf@..", None, MSG_HF),
    ("hf://-org/repo/x.gguf", None, MSG_HF),
]
WELL_FORMED: list[tuple[str, str | None]] = [
    ("/models/x.gguf", None),
    ("file:///var/lib/models/x.gguf", None),
    ("pvc://models/llama/x.gguf", None),
    ("https://host.example/a/x.gguf", None),
    ("https://host.example:8443/a/x.gguf?sig=abc&exp=1", None),
    ("http://files.ns.svc/x.gguf", DIGEST),
    ("hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf", None),
    ("hf://org/repo/sub/x.gguf@v1.0", DIGEST),
]


def with_source(source: str, sha256: str | None) -> dict[str, Any]:
    model: dict[str, Any] = {"name": "llama", "source": source}
    if sha256 is not None:
        model["sha256"] = sha256
    return changed(ISVC, spec__model=model)


@pytest.mark.parametrize(("source", "sha256", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_a_malformed_source_is_refused_by_the_server_and_the_parser_alike(
    admin: KubeClient, namespace: str, source: str, sha256: str | None, message: str
) -> None:
    with pytest.raises(Invalid) as refused:
        await admin.create(InferenceService.resource(), with_source(source, sha256), namespace)
    assert "spec.model.source:" in refused.value.message, refused.value.message
    assert message in refused.value.message, refused.value.message
    with pytest.raises(SourceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_source(source, sha256)


@pytest.mark.parametrize(("source", "sha256"), WELL_FORMED, ids=[w[0] for w in WELL_FORMED])
async def test_a_well_formed_source_is_accepted_by_the_server_and_the_parser_alike(
    admin: KubeClient, namespace: str, source: str, sha256: str | None
) -> None:
    created = await admin.create(
        InferenceService.resource(), with_source(source, sha256), namespace
    )
    assert created["spec"]["model"]["source"] == source
    parse_source(source, sha256)


def with_pod(**pod: Any) -> dict[str, Any]:
    obj = copy.deepcopy(ISVC)
    obj["spec"]["pod"] = pod
    return obj


#: (what is wrong, the object, the field the API server's message must name)
POD_INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("sha256 not hex", changed(ISVC, spec__model={"name": "l", "source": "/m", "sha256": "xyz"}),
     "spec.model.sha256"),
    ("sha256 upper case",
     changed(ISVC, spec__model={"name": "l", "source": "/m", "sha256": "A" * 64}),
     "spec.model.sha256"),
    ("token secret without a name",
     changed(ISVC, spec__model={"name": "l", "source": "/m", "tokenSecret": {"key": "t"}}),
     "spec.model.tokenSecret.name"),
    ("unknown toleration operator", with_pod(tolerations=[{"key": "k", "operator": "Maybe"}]),
     "spec.pod.tolerations[0].operator"),
    ("Exists toleration with a value",
     with_pod(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
     "spec.pod.tolerations[0].value"),
    ("toleration without key or Exists", with_pod(tolerations=[{"value": "v"}]),
     "spec.pod.tolerations[0].key"),
    ("env name with a space", with_pod(env=[{"name": "A B", "value": "1"}]),
     "spec.pod.env[0].name"),
    ("env with value and valueFrom",
     with_pod(env=[{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
     "spec.pod.env[0]"),
    ("envFrom naming both", with_pod(envFrom=[{"secretRef": {"name": "s"},
                                               "configMapRef": {"name": "c"}}]),
     "spec.pod.envFrom[0]"),
    ("a volume named model", with_pod(volumes=[{"name": "model", "emptyDir": {}}]),
     "spec.pod.volumes[0].name"),
    ("a mount under /var/lib/modelpool",
     with_pod(volumes=[{"name": "v", "emptyDir": {}}],
              volumeMounts=[{"name": "v", "mountPath": "/var/lib/modelpool/x"}]),
     "spec.pod.volumeMounts[0].mountPath"),
    ("a mount of no volume", with_pod(volumeMounts=[{"name": "v", "mountPath": "/data"}]),
     "spec.pod.volumeMounts"),
    ("runtime class with upper case", with_pod(runtimeClassName="NVIDIA"),
     "spec.pod.runtimeClassName"),
    ("pull secret without name", with_pod(imagePullSecrets=[{}]),
     "spec.pod.imagePullSecrets[0].name"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "obj", "field"), POD_INVALID, ids=[c[0].replace(" ", "-") for c in POD_INVALID]
)
async def test_a_malformed_pod_field_is_refused_naming_it(
    admin: KubeClient, namespace: str, what: str, obj: dict[str, Any], field: str
) -> None:
    with pytest.raises(Invalid) as refused:
        await admin.create(InferenceService.resource(), copy.deepcopy(obj), namespace)
    assert f"{field}:" in refused.value.message, f"{what}: {refused.value.message}"


async def test_the_pod_fields_a_gpu_node_needs_are_kept_whole(
    admin: KubeClient, namespace: str
) -> None:
    """Affinity and each volume's source are Kubernetes' own types, kept as written."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
                ]
            }
        }
    }
    volume = {"name": "cfg", "configMap": {"name": "server-config", "defaultMode": 420}}
    obj = with_pod(
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity=affinity,
        runtimeClassName="nvidia",
        priorityClassName="gpu-high",
        imagePullSecrets=[{"name": "registry"}],
        env=[{"name": "LLAMA_ARG_FLASH_ATTN", "value": "1"}],
        envFrom=[{"secretRef": {"name": "hub"}}],
        volumes=[volume],
        volumeMounts=[{"name": "cfg", "mountPath": "/etc/server", "readOnly": True}],
        annotations={"example.com/team": "search"},
        labels={"team": "search"},
    )
    created = await admin.create(InferenceService.resource(), obj, namespace)
    assert created["spec"]["pod"]["affinity"] == affinity
    assert created["spec"]["pod"]["volumes"] == [volume]
    parsed = InferenceService.from_dict(created)
    assert parsed.spec.pod is not None
    assert parsed.spec.pod.volumes[0].to_dict() == volume
