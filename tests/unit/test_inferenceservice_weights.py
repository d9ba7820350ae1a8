"""How the weights reach the server's pod, per form of ``spec.model.source``, and the fetch Job."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.modelsource import SourceError, SourceKind, parse_source
from controlplane.controllers.inferenceservice.desired import desired_deployment
from controlplane.controllers.inferenceservice.weights import (
    FETCH_CONTAINER,
    MODEL_MOUNT_DIR,
    MODEL_OF_LABEL,
    PERMANENT_EXIT_CODE,
    TOKEN_ENV,
    WeightsPlacement,
    desired_fetch_job,
    pinned_affinity,
)

PLACEMENT = WeightsPlacement(cache_path="/srv/cache", fetch_image="example/controlplane:1")
DIGEST = "0" * 64
OWNER = {"apiVersion": "v", "kind": "InferenceService", "name": "llama", "uid": "u-1"}


def isvc(source: str, **spec: Any) -> InferenceService:
    model = {"name": "llama-3", "source": source, **spec.pop("model", {})}
    return InferenceService.from_dict(
        {
            "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1"},
            "spec": {"model": model, **spec},
        }
    )


def pod_spec(obj: InferenceService, node: str | None = None) -> dict[str, Any]:
    deployment = desired_deployment(obj, 1, placement=PLACEMENT, node=node)
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def model_arg(spec: dict[str, Any]) -> str:
    args = spec["containers"][0]["args"]
    return str(args[args.index("--model") + 1])


def test_a_path_in_the_image_mounts_nothing() -> None:
    spec = pod_spec(isvc("/models/x.gguf"))
    assert model_arg(spec) == "/models/x.gguf"
    assert "volumes" not in spec
    assert "initContainers" not in spec
    assert "volumeMounts" not in spec["containers"][0]


def test_a_node_file_is_a_read_only_hostpath_of_the_file_itself() -> None:
    spec = pod_spec(isvc("file:///data/models/x.gguf"))
    assert spec["volumes"] == [
        {"name": "model", "hostPath": {"path": "/data/models/x.gguf", "type": "File"}}
    ]
    mount = spec["containers"][0]["volumeMounts"][0]
    assert mount == {"name": "model", "mountPath": f"{MODEL_MOUNT_DIR}/x.gguf", "readOnly": True}
    assert model_arg(spec) == f"{MODEL_MOUNT_DIR}/x.gguf"
    assert "initContainers" not in spec, "a file on the node is never fetched"


def test_a_claim_is_mounted_read_only_and_the_model_is_its_path_inside() -> None:
    spec = pod_spec(isvc("pvc://weights/llama/x.gguf"))
    assert spec["volumes"] == [
        {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    ]
    assert spec["containers"][0]["volumeMounts"][0]["readOnly"] is True
    assert model_arg(spec) == f"{MODEL_MOUNT_DIR}/llama/x.gguf"


@pytest.mark.parametrize(
    ("source", "folder", "file"),
    [
        ("https://h.example/a/x.gguf", "/srv/cache/https/", "x.gguf"),
        ("hf://org/repo/sub/x.gguf@v2", "/srv/cache/hf/org/repo/v2", "sub/x.gguf"),
    ],
)
def test_a_fetched_source_is_its_cache_folder_written_by_the_fetcher_read_by_the_server(
    source: str, folder: str, file: str
) -> None:
    spec = pod_spec(isvc(source, model={"sha256": DIGEST}))
    (volume, _scratch) = spec["volumes"]
    assert volume["hostPath"]["path"].startswith(folder)
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"
    assert model_arg(spec) == f"{MODEL_MOUNT_DIR}/{file}"
    server_mount = spec["containers"][0]["volumeMounts"][0]
    assert server_mount == {"name": "model", "mountPath": MODEL_MOUNT_DIR, "readOnly": True}
    (fetcher,) = spec["initContainers"]
    assert fetcher["name"] == FETCH_CONTAINER
    assert fetcher["image"] == PLACEMENT.fetch_image
    assert fetcher["args"] == ["fetch-model", "--source", source, "--sha256", DIGEST,
                               "--dest", MODEL_MOUNT_DIR]  # fmt: skip
    assert {"name": "model", "mountPath": MODEL_MOUNT_DIR} in fetcher["volumeMounts"]
    assert fetcher["securityContext"]["readOnlyRootFilesystem"] is True
    assert fetcher["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_two_members_of_one_source_share_a_cache_folder_and_two_revisions_do_not() -> None:
    first = parse_source("hf://org/repo/x.gguf@v1")
    again = parse_source("hf://org/repo/x.gguf@v1")
    other = parse_source("hf://org/repo/x.gguf@v2")
    assert first.cache_key == again.cache_key != other.cache_key
    assert parse_source("hf://org/repo/x.gguf").revision == "main"
    assert parse_source("https://a/x.gguf").cache_key != parse_source("https://b/x.gguf").cache_key


def test_the_token_goes_to_the_fetcher_only_never_to_the_server() -> None:
    obj = isvc("hf://org/repo/x.gguf", model={"tokenSecret": {"name": "hub"}},
               pod={"env": [{"name": "HF_ENDPOINT", "value": "http://hub.local"}]})  # fmt: skip
    spec = pod_spec(obj)
    fetcher_env = {e["name"]: e for e in spec["initContainers"][0]["env"]}
    assert fetcher_env[TOKEN_ENV]["valueFrom"] == {"secretKeyRef": {"name": "hub", "key": "token"}}
    assert fetcher_env["HF_ENDPOINT"]["value"] == "http://hub.local", "the user's env applies"
    server_env = {e["name"] for e in spec["containers"][0].get("env", [])}
    assert server_env == {"HF_ENDPOINT"}


def test_the_pod_fields_reach_the_pod_and_the_operators_labels_win() -> None:
    obj = isvc(
        "/m/x.gguf",
        nodeSelector={"gpu": "a100"},
        pod={
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "runtimeClassName": "nvidia",
            "priorityClassName": "gpu",
            "imagePullSecrets": [{"name": "registry"}],
            "envFrom": [{"secretRef": {"name": "s"}}],
            "volumes": [{"name": "cfg", "configMap": {"name": "c"}}],
            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
            "labels": {"team": "a", "inference.modelpool.dev/inferenceservice": "other"},
            "annotations": {"a": "b"},
        },
    )
    deployment = desired_deployment(obj, 1, placement=PLACEMENT)
    template = deployment["spec"]["template"]
    spec = template["spec"]
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "gpu"
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["nodeSelector"] == {"gpu": "a100"}
    assert spec["volumes"] == [{"name": "cfg", "configMap": {"name": "c"}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "cfg", "mountPath": "/etc/cfg"}]
    assert spec["containers"][0]["envFrom"] == [{"secretRef": {"name": "s"}}]
    assert template["metadata"]["labels"]["team"] == "a"
    assert template["metadata"]["labels"]["inference.modelpool.dev/inferenceservice"] == "llama"
    assert template["metadata"]["annotations"] == {"a": "b"}


def test_the_pod_is_pinned_to_the_node_that_holds_the_weights_within_the_users_terms() -> None:
    users = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "tpu", "operator": "Exists"}]},
                ]
            }
        }
    }
    pinned = pinned_affinity(users, "node-7")
    terms = pinned["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]  # fmt: skip
    assert len(terms) == 2, "each of the user's (ORed) terms keeps its own expressions"
    for term in terms:
        assert term["matchFields"] == [
            {"key": "metadata.name", "operator": "In", "values": ["node-7"]}
        ]
    assert (
        "matchFields"
        not in users["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]
    ), "copied"
    spec = pod_spec(isvc("https://h/x.gguf"), node="node-7")
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-7"]


def test_the_fetch_job_lands_where_the_server_will_and_fails_at_once_on_a_permanent_error() -> None:
    obj = isvc("hf://org/repo/x.gguf", nodeSelector={"gpu": "a100"},
               pod={"tolerations": [{"key": "gpu", "operator": "Exists"}]},
               resources={"limits": {"nvidia.com/gpu": 1}})  # fmt: skip
    job = desired_fetch_job(obj, PLACEMENT, OWNER)
    assert job["metadata"]["name"].startswith("llama-model-")
    assert job["metadata"]["ownerReferences"] == [OWNER]
    template = job["spec"]["template"]
    assert template["metadata"]["labels"][MODEL_OF_LABEL] == "llama"
    assert "inference.modelpool.dev/inferenceservice" not in template["metadata"]["labels"], (
        "the member's Service must not select the fetch pod"
    )
    spec = template["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"gpu": "a100"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert "resources" not in spec["containers"][0], "a download takes no GPU"
    (rule,) = job["spec"]["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob"
    assert rule["onExitCodes"]["values"] == [PERMANENT_EXIT_CODE]


def test_a_changed_source_is_a_new_job_and_the_same_source_the_same_job() -> None:
    first = desired_fetch_job(isvc("hf://org/repo/x.gguf@v1"), PLACEMENT, OWNER)
    same = desired_fetch_job(isvc("hf://org/repo/x.gguf@v1"), PLACEMENT, OWNER)
    other = desired_fetch_job(isvc("hf://org/repo/x.gguf@v2"), PLACEMENT, OWNER)
    assert first["metadata"]["name"] == same["metadata"]["name"] != other["metadata"]["name"]
    assert len(first["metadata"]["name"]) <= 63


def test_a_source_that_is_not_fetched_has_no_job() -> None:
    with pytest.raises(ValueError, match="not fetched"):
        desired_fetch_job(isvc("pvc://c/x.gguf"), PLACEMENT, OWNER)


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ("/m/x.gguf", SourceKind.IMAGE),
        ("file:///m/x.gguf", SourceKind.FILE),
        ("pvc://c/x.gguf", SourceKind.PVC),
        ("https://h/x.gguf", SourceKind.HTTPS),
        ("hf://o/r/x.gguf", SourceKind.HF),
    ],
)
def test_each_form_is_parsed_to_its_kind(raw: str, kind: SourceKind) -> None:
    assert parse_source(raw, DIGEST).kind is kind


def test_a_plain_http_source_without_a_digest_is_refused() -> None:
    with pytest.raises(SourceError, match="needs sha256"):
        parse_source("http://h/x.gguf")
    assert parse_source("http://h/x.gguf", DIGEST).kind is SourceKind.HTTP


def test_a_private_ca_is_mounted_in_the_fetcher_only_and_named_by_ssl_cert_file() -> None:
    obj = isvc("https://mirror.internal/x.gguf", model={"caBundle": {"name": "mirror-ca"}})
    spec = pod_spec(obj)
    (ca,) = [v for v in spec["volumes"] if v["name"] == "model-ca"]
    assert ca["configMap"] == {"name": "mirror-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    fetcher = spec["initContainers"][0]
    env = {e["name"]: e.get("value") for e in fetcher["env"]}
    assert env["SSL_CERT_FILE"] == "/var/lib/modelpool/ca/ca.crt"
    assert {"name": "model-ca", "mountPath": "/var/lib/modelpool/ca", "readOnly": True} in (
        fetcher["volumeMounts"]
    )
    server = spec["containers"][0]
    assert "model-ca" not in {m["name"] for m in server["volumeMounts"]}
    assert "SSL_CERT_FILE" not in {e["name"] for e in server.get("env", [])}
    job = desired_fetch_job(obj, PLACEMENT, OWNER)
    assert "model-ca" in {v["name"] for v in job["spec"]["template"]["spec"]["volumes"]}
