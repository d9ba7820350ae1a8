"""The node stand-in's pure parts: what it reads from a pod, and what it writes for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane.standin.builders import (
    NODE_NAME,
    POD_TEMPLATE_HASH_LABEL,
    Backend,
    ServerArgs,
    deployment_status,
    deployment_status_summary,
    endpoint_slice,
    host_folder,
    is_pod_ready,
    llama_server_argv,
    loopback_name,
    model_source,
    new_pod,
    pod_status,
    pod_status_summary,
    selects,
    server_args,
    template_hash,
    with_slot_save_path,
)
from controlplane.standin.process import is_gguf

IP = "127.0.0.1"


def deployment(replicas: int | None = 1, generation: int = 4) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "m"}},
        "template": {
            "metadata": {"labels": {"app": "m", "app.kubernetes.io/managed-by": "x"}},
            "spec": {
                "containers": [
                    {
                        "name": "server",
                        "image": "img",
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "args": [
                            "--model",
                            "/m/a.gguf",
                            "--alias",
                            "alpha",
                            "--parallel",
                            "2",
                            "--ctx-size",
                            "8192",
                        ],
                    }
                ]
            },
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "metadata": {"name": "m", "namespace": "ns", "uid": "d-1", "generation": generation},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--alias", "alpha", "--parallel", "2", "--ctx-size", "8192"],
            ServerArgs("alpha", 2, 4096),
        ),
        (["--model=/models/beta.Q4.gguf"], ServerArgs("beta.Q4", 1, None)),
        (["-np", "4", "-c", "1000", "-a", "g"], ServerArgs("g", 4, 250)),
        ([], ServerArgs("fallback", 1, None)),
        (["--parallel", "x"], ServerArgs("fallback", 1, None)),
        (["--sim-load-seconds", "14"], ServerArgs("fallback", 1, None, 14.0)),
        (["--sim-load-seconds=0.5"], ServerArgs("fallback", 1, None, 0.5)),
        (["--sim-load-seconds", "-1"], ServerArgs("fallback", 1, None)),
        (["--sim-load-seconds", "soon"], ServerArgs("fallback", 1, None)),
        (
            ["--slot-save-path", "/kv", "--sim-slot-restore-seconds", "30"],
            ServerArgs("fallback", 1, None, None, "/kv", 30.0),
        ),
        (["--alias", "a", "--metrics"], ServerArgs("a", 1, None, metrics=True)),
    ],
)
def test_server_args_come_from_llama_server_flags(args: list[str], expected: ServerArgs) -> None:
    assert server_args({"args": args}, "fallback") == expected


OPERATOR_ARGS = ["--model", "/m/a.gguf", "--alias", "a", "--host", "0.0.0.0", "--port", "8080"]


@pytest.mark.parametrize(
    ("spec_args", "expected_tail"),
    [
        ([], ["--threads", "1"]),
        (["--parallel", "2", "-c", "4096"], ["--parallel", "2", "-c", "4096", "--threads", "1"]),
        (["--threads", "3"], ["--threads", "3"]),  # the member's own choice stands
        (["-t=2"], ["-t=2"]),
        (["--sim-load-seconds", "4", "--parallel", "2"], ["--parallel", "2", "--threads", "1"]),
        (["--sim-slot-restore-seconds=3"], ["--threads", "1"]),  # stand-in flags never reach it
        (["--port=9000", "--host", "::"], ["--threads", "1"]),  # where it listens is the node's
    ],
)
def test_a_real_server_gets_the_members_args_on_a_loopback_port_of_the_nodes_choosing(
    spec_args: list[str], expected_tail: list[str]
) -> None:
    container = {"args": [*OPERATOR_ARGS, *spec_args]}
    argv = llama_server_argv(Path("/bin/llama-server"), container, port=41000)
    assert argv == [
        "/bin/llama-server", "--model", "/m/a.gguf", "--alias", "a", *expected_tail,
        "--host", "127.0.0.1", "--port", "41000",
    ]  # fmt: skip
    assert model_source(container) == "/m/a.gguf"


def test_only_a_file_that_starts_as_gguf_is_a_model_here(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF\x03\x00\x00\x00")
    text = tmp_path / "t.gguf"
    text.write_text("not a model")
    assert is_gguf(str(model))
    assert not is_gguf(str(text))
    assert not is_gguf(str(tmp_path / "missing.gguf"))
    assert not is_gguf(str(tmp_path))  # a folder
    assert not is_gguf("hf://org/model")


def test_new_pod_is_bound_owned_labelled_with_the_template_hash() -> None:
    found = deployment()
    hash_ = template_hash(found)
    pod = new_pod(found, hash_, "abcde")
    assert pod["metadata"]["name"] == f"m-{hash_}-abcde"
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL] == hash_
    assert pod["metadata"]["labels"]["app"] == "m"
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Deployment", "d-1", True)


def test_template_hash_follows_the_template_only() -> None:
    assert template_hash(deployment(replicas=1)) == template_hash(deployment(replicas=0))
    changed = deployment()
    changed["spec"]["template"]["spec"]["containers"][0]["args"].append("--x")
    assert template_hash(changed) != template_hash(deployment())


def _running_pod(ready: bool) -> dict[str, Any]:
    pod = new_pod(deployment(), template_hash(deployment()), "abcde")
    pod["metadata"]["uid"] = "p-1"
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    pod["status"] = pod_status(pod, ip=IP, ready=ready, restarts=0, started_at="t0",
                               container_id="sim://1")  # fmt: skip
    return pod


def test_pod_status_keeps_server_fields_and_reports_readiness() -> None:
    pod = _running_pod(ready=False)
    status = pod["status"]
    assert status["qosClass"] == "BestEffort"
    assert (status["phase"], status["podIP"]) == ("Running", IP)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "False"
    ready = pod_status(pod, ip=IP, ready=True, restarts=0, started_at="t0", container_id="sim://1")
    assert pod_status_summary(ready) != pod_status_summary(status)
    same = pod_status(pod, ip=IP, ready=False, restarts=0, started_at="t0", container_id="sim://1")
    assert pod_status_summary(same) == pod_status_summary(status)


GATE = "inference.modelpool.dev/kv-cache-restored"


def _gated_pod(gate_status: str | None) -> dict[str, Any]:
    pod = _running_pod(ready=False)
    pod["spec"]["readinessGates"] = [{"conditionType": GATE}]
    if gate_status is not None:
        stamp = "2026-01-01T00:00:00Z"
        pod["status"]["conditions"].append(
            {"type": GATE, "status": gate_status, "reason": "R", "lastTransitionTime": stamp}
        )
    return pod


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_gated_pod_is_ready_only_once_its_gate_condition_is_true() -> None:
    missing = pod_status(_gated_pod(None), ip=IP, ready=True, restarts=0, started_at="t0",
                         container_id="sim://1")  # fmt: skip
    found = _conditions(missing)
    assert (found["ContainersReady"]["status"], found["Ready"]["status"]) == ("True", "False")
    assert found["Ready"]["reason"] == "ReadinessGatesNotReady"
    assert GATE in found["Ready"]["message"]
    assert not is_pod_ready({"status": missing})
    false = pod_status(_gated_pod("False"), ip=IP, ready=True, restarts=0, started_at="t0",
                       container_id="sim://1")  # fmt: skip
    assert _conditions(false)["Ready"]["status"] == "False"
    true = pod_status(_gated_pod("True"), ip=IP, ready=True, restarts=0, started_at="t0",
                      container_id="sim://1")  # fmt: skip
    assert _conditions(true)["Ready"]["status"] == "True"
    unready = pod_status(_gated_pod("True"), ip=IP, ready=False, restarts=0, started_at="t0",
                         container_id="sim://1")  # fmt: skip
    assert _conditions(unready)["Ready"]["status"] == "False", "the gate alone is not enough"


def test_conditions_written_by_others_are_kept_as_they_are() -> None:
    pod = _gated_pod("True")
    pod["status"]["conditions"].append({"type": "example.com/other", "status": "False"})
    status = pod_status(pod, ip=IP, ready=True, restarts=0, started_at="t0", container_id="c")
    found = _conditions(status)
    assert found[GATE] == {"type": GATE, "status": "True", "reason": "R",
                           "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    assert found["example.com/other"] == {"type": "example.com/other", "status": "False"}
    assert len(status["conditions"]) == 7


def test_a_path_under_a_host_path_mount_is_a_folder_of_the_node(tmp_path: Any) -> None:
    spec = {"volumes": [{"name": "kv", "hostPath": {"path": "/var/kv/ns/a"}},
                        {"name": "tmp", "emptyDir": {}}]}  # fmt: skip
    container = {"volumeMounts": [{"name": "kv", "mountPath": "/cache"},
                                  {"name": "tmp", "mountPath": "/cache/tmp"}]}  # fmt: skip
    root, scratch = tmp_path / "host", tmp_path / "pod"
    assert host_folder(spec, container, "/cache", root, scratch) == root / "var/kv/ns/a"
    assert host_folder(spec, container, "/cache/x/y", root, scratch) == root / "var/kv/ns/a/x/y"
    assert host_folder(spec, container, "/cachex", root, scratch) == scratch / "cachex"
    assert host_folder(spec, container, "/cache/tmp/z", root, scratch) == scratch / "cache/tmp/z"


def test_deployment_status_counts_live_pods_and_sets_conditions() -> None:
    found = deployment()
    hash_ = template_hash(found)
    starting = deployment_status(found, [_running_pod(ready=False)], hash_)
    assert (starting["observedGeneration"], starting["replicas"], starting["readyReplicas"]) == (
        4, 1, 0,
    )  # fmt: skip
    assert starting["unavailableReplicas"] == 1
    conditions = {c["type"]: (c["status"], c["reason"]) for c in starting["conditions"]}
    assert conditions["Available"] == ("False", "MinimumReplicasUnavailable")
    assert conditions["Progressing"] == ("True", "ReplicaSetUpdated")

    ready = deployment_status(found, [_running_pod(ready=True)], hash_)
    conditions = {c["type"]: (c["status"], c["reason"]) for c in ready["conditions"]}
    assert (ready["readyReplicas"], ready["availableReplicas"], ready["updatedReplicas"]) == (
        1,
        1,
        1,
    )
    assert conditions == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }
    found["status"] = ready
    assert deployment_status_summary(deployment_status(found, [_running_pod(True)], hash_)) == (
        deployment_status_summary(ready)
    ), "the same observation is no change"

    scaled_down = deployment(replicas=0)
    stopped = deployment_status(scaled_down, [], template_hash(scaled_down))
    assert stopped["replicas"] == 0
    assert {c["type"]: c["status"] for c in stopped["conditions"]}["Available"] == "True"


def service(selector: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "m", "namespace": "ns", "uid": "s-1"},
        "spec": {
            "selector": {"app": "m"} if selector is None else selector,
            "ports": [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def test_endpoint_slice_carries_the_simulator_port_not_the_service_port() -> None:
    container = deployment()["spec"]["template"]["spec"]["containers"][0]
    pod = _running_pod(ready=True)
    slice_ = endpoint_slice(service(), container, [Backend(pod, loopback_name(pod), 41234, True)])
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "m"
    assert slice_["metadata"]["ownerReferences"][0]["uid"] == "s-1"
    assert slice_["addressType"] == "FQDN"  # loopback IPs are refused in IPv4 slices
    assert slice_["ports"] == [{"name": "http", "port": 41234, "protocol": "TCP"}]
    (endpoint,) = slice_["endpoints"]
    assert endpoint["addresses"] == [
        f"{pod['metadata']['name']}.{pod['metadata']['namespace']}.localhost"
    ]
    assert endpoint["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert endpoint["targetRef"]["uid"] == "p-1"
    empty = endpoint_slice(service(), container, [])
    assert (empty["endpoints"], empty["ports"]) == ([], [])


def test_a_service_selects_by_its_selector_and_an_empty_one_selects_nothing() -> None:
    labels = {"app": "m", "other": "x"}
    assert selects(service(), labels)
    assert not selects(service({"app": "n"}), labels)
    assert not selects(service({}), labels)


def test_a_real_server_is_pointed_at_the_nodes_folder(tmp_path: Any) -> None:
    args = ["--model", "/m", "--slot-save-path", "/kv", "--alias", "a", "--slot-save-path=/kv"]
    assert with_slot_save_path(args, tmp_path) == [
        "--model", "/m", "--slot-save-path", str(tmp_path), "--alias", "a",
        f"--slot-save-path={tmp_path}",
    ]  # fmt: skip
