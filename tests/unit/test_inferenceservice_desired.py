"""What the InferenceService controller wants: its Deployment and Service, and when to apply."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.children import SPEC_HASH_ANNOTATION, needs_apply
from controlplane.controllers.inferenceservice.desired import (
    ISVC_LABEL,
    desired_deployment,
    desired_service,
    endpoint,
)


def isvc(**spec: Any) -> InferenceService:
    return InferenceService.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1", "generation": 3},
            "spec": {"model": {"name": "llama-3-8b", "source": "/m/llama.gguf"}, **spec},
        }
    )


OWNER = {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "InferenceService",
         "name": "llama", "uid": "u-1", "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def test_deployment_runs_llama_server_with_the_model_alias_port_and_extra_args() -> None:
    wanted = desired_deployment(isvc(args=["--ctx-size", "8192"], port=9000))
    (container,) = wanted["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "server"
    expected = ["--model", "/m/llama.gguf", "--alias", "llama-3-8b", "--host", "0.0.0.0",
                "--port", "9000", "--metrics", "--ctx-size", "8192"]  # fmt: skip
    assert container["args"] == expected
    assert container["ports"] == [{"name": "http", "containerPort": 9000, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    startup = container["startupProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] == 1, "Ready about a second after the load, not a period later"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600, "loads take minutes"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_metrics_is_given_once_even_when_the_user_asks_for_it_too() -> None:
    """The members' PodMonitor scrapes llama-server's /metrics, which needs ``--metrics``."""
    (container,) = desired_deployment(isvc(args=["--metrics", "-np", "2"]))["spec"]["template"][
        "spec"
    ]["containers"]
    assert container["args"].count("--metrics") == 1
    assert container["args"][-3:] == ["--metrics", "-np", "2"]


@pytest.mark.parametrize(("replicas", "expected"), [(None, 1), (1, 1), (0, 0)])
def test_replicas_are_copied_and_absent_means_one(replicas: int | None, expected: int) -> None:
    spec = {} if replicas is None else {"replicas": replicas}
    assert desired_deployment(isvc(**spec))["spec"]["replicas"] == expected


def test_deployment_is_recreate_owned_labelled_and_selected_by_the_isvc_label() -> None:
    wanted = desired_deployment(isvc())
    assert wanted["spec"]["strategy"] == {"type": "Recreate"}
    assert wanted["metadata"]["ownerReferences"] == [OWNER]
    assert wanted["spec"]["selector"] == {"matchLabels": {ISVC_LABEL: "llama"}}
    labels = {
        "app.kubernetes.io/name": "llama-server",
        "app.kubernetes.io/instance": "llama",
        "app.kubernetes.io/managed-by": "modelpool-operator",
        "app.kubernetes.io/component": "member",
        ISVC_LABEL: "llama",
    }
    assert wanted["metadata"]["labels"] == labels
    assert wanted["spec"]["template"]["metadata"]["labels"] == labels


def test_resources_and_node_selector_reach_the_pod_with_quantities_as_strings() -> None:
    wanted = desired_deployment(
        isvc(
            resources={"limits": {"nvidia.com/gpu": 1, "memory": "16Gi"}}, nodeSelector={"g": "l4"}
        )
    )
    pod = wanted["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}
    }
    assert pod["nodeSelector"] == {"g": "l4"}
    assert "nodeSelector" not in desired_deployment(isvc())["spec"]["template"]["spec"]


def test_service_is_cluster_ip_on_the_server_port_with_the_same_selector() -> None:
    wanted = desired_service(isvc(port=9000))
    assert wanted["metadata"]["ownerReferences"] == [OWNER]
    assert wanted["spec"] == {
        "type": "ClusterIP",
        "selector": {ISVC_LABEL: "llama"},
        "ports": [{"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"}],
    }
    assert endpoint(isvc(port=9000)) == "http://llama.ml.svc:9000"
    assert endpoint(isvc()) == "http://llama.ml.svc:8080"


def test_an_isvc_never_stored_has_no_uid_and_cannot_own_anything() -> None:
    unsaved = isvc()
    unsaved.metadata.uid = None
    with pytest.raises(ValueError, match="no uid"):
        desired_deployment(unsaved)


def _as_stored(wanted: dict[str, Any]) -> dict[str, Any]:
    """What the API server would return: defaults added, status, other metadata."""
    stored = copy.deepcopy(wanted)
    stored["metadata"].update(resourceVersion="7", uid="d-1", generation=2)
    stored["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
    stored["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = "/dev/x"
    stored["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "500m"}}
    stored["status"] = {"replicas": 1}
    return stored


def test_no_apply_when_the_cache_holds_everything_wanted_plus_server_defaults() -> None:
    wanted = desired_deployment(isvc(resources={"limits": {"cpu": "0.5"}}))
    assert not needs_apply(_as_stored(wanted), wanted)
    assert needs_apply(None, wanted)


def test_apply_when_a_wanted_value_drifted() -> None:
    wanted = desired_deployment(isvc())
    stored = _as_stored(wanted)
    stored["spec"]["replicas"] = 0  # someone scaled it by hand
    assert needs_apply(stored, wanted)


def test_apply_when_a_field_is_no_longer_wanted_thanks_to_the_spec_hash() -> None:
    before = desired_deployment(isvc(args=["--ctx-size", "8192"], nodeSelector={"g": "l4"}))
    after = desired_deployment(isvc(args=["--ctx-size", "8192"]))
    assert (
        before["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        != (after["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    )
    assert needs_apply(_as_stored(before), after), "a dropped node selector must be applied away"


def test_the_spec_hash_is_stable() -> None:
    assert desired_deployment(isvc()) == desired_deployment(isvc())
    assert desired_service(isvc()) == desired_service(isvc())


# -- the KV cache carried across a swap (spec.kvCache) ---------------------------------------------


def test_an_enabled_kv_cache_mounts_its_folder_points_the_server_at_it_and_gates_readiness() -> (
    None
):
    wanted = desired_deployment(
        isvc(args=["--slot-save-path", "/elsewhere"], kvCache={"enabled": True, "hostPath": "/kv/"})
    )
    pod = wanted["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][-4:] == [
        "--slot-save-path", "/elsewhere", "--slot-save-path", "/var/lib/modelpool/kv-cache"
    ], "ours comes last, so it wins"  # fmt: skip
    assert container["volumeMounts"] == [
        {"name": "kv-cache", "mountPath": "/var/lib/modelpool/kv-cache"}
    ]
    assert pod["volumes"] == [
        {"name": "kv-cache", "hostPath": {"path": "/kv/ml/llama", "type": "DirectoryOrCreate"}}
    ]
    assert pod["readinessGates"] == [{"conditionType": "inference.modelpool.dev/kv-cache-restored"}]


def test_the_kv_cache_folder_defaults_under_var_lib() -> None:
    pod = desired_deployment(isvc(kvCache={"enabled": True}))["spec"]["template"]["spec"]
    assert pod["volumes"][0]["hostPath"]["path"] == "/var/lib/modelpool/kv-cache/ml/llama"


@pytest.mark.parametrize("kv_cache", [None, {"enabled": False}, {"hostPath": "/kv"}])
def test_without_an_enabled_kv_cache_the_pod_has_no_volume_gate_or_save_path(
    kv_cache: dict[str, Any] | None,
) -> None:
    spec = {} if kv_cache is None else {"kvCache": kv_cache}
    pod = desired_deployment(isvc(**spec))["spec"]["template"]["spec"]
    assert "volumes" not in pod
    assert "readinessGates" not in pod
    assert "--slot-save-path" not in pod["containers"][0]["args"]
    assert "volumeMounts" not in pod["containers"][0]


def test_turning_the_kv_cache_on_changes_the_deployment() -> None:
    assert needs_apply(
        desired_deployment(isvc()), desired_deployment(isvc(kvCache={"enabled": True}))
    )
