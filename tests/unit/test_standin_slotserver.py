"""A slot server pod as the node stand-in plays it: its role, its models' folder laid out with
links, and the router's command line (real or simulated) pointed at it on a loopback port."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from controlplane.standin.builders import PodRole, max_replicas, pod_role
from controlplane.standin.slotserver import (
    SLOT_SERVER_LABEL,
    lay_out_models_dir,
    model_links,
    models_dir,
    real_router_argv,
    sim_router_argv,
    slot_server_env,
)
from controlplane.standin.volumes import Roots, container_mounts

ARGS = [
    "--models-dir", "/models", "--models-max", "1", "--no-models-autoload",
    "--host", "0.0.0.0", "--port", "8080", "--parallel", "2", "--sim-load-seconds", "0.5",
]  # fmt: skip


def deployment(labels: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"template": {"metadata": {"labels": labels}}}}


def test_the_slot_server_label_makes_a_one_pod_slot_server_role() -> None:
    managed = {"app.kubernetes.io/managed-by": "modelpool-operator"}
    role = pod_role(deployment({**managed, SLOT_SERVER_LABEL: "pool-a"}))
    assert role is PodRole.SLOT_SERVER
    assert max_replicas(role) == 1
    assert pod_role(deployment({SLOT_SERVER_LABEL: "pool-a"})) is None  # not the operator's


def test_each_model_file_mounted_in_the_models_dir_is_linked_by_its_file_name(
    tmp_path: Path,
) -> None:
    roots = Roots(tmp_path / "host", tmp_path / "pvc", tmp_path / "scratch")
    pod = {
        "metadata": {"namespace": "ns", "name": "slots-0"},
        "spec": {
            "volumes": [
                {"name": "a", "hostPath": {"path": "/cache/a.gguf", "type": "File"}},
                {"name": "weights", "persistentVolumeClaim": {"claimName": "w"}},
                {"name": "cache", "hostPath": {"path": "/cache", "type": "Directory"}},
            ]
        },
    }
    container = {
        "volumeMounts": [
            {"name": "a", "mountPath": "/models/a.gguf"},
            {"name": "weights", "mountPath": "/models/b.gguf", "subPath": "x/b.gguf"},
            {"name": "cache", "mountPath": "/models/c.gguf", "subPath": "c.gguf"},
            {"name": "cache", "mountPath": "/elsewhere/d.gguf", "subPath": "d.gguf"},
            {"name": "cache", "mountPath": "/models/sub/e.gguf", "subPath": "e.gguf"},
        ]
    }
    links = model_links(container_mounts(pod, container, roots), "/models/")
    assert links == {
        "a.gguf": tmp_path / "host" / "cache" / "a.gguf",
        "b.gguf": tmp_path / "pvc" / "ns" / "w" / "x" / "b.gguf",
        "c.gguf": tmp_path / "host" / "cache" / "c.gguf",
    }


def test_the_layout_holds_exactly_the_links(tmp_path: Path) -> None:
    target = tmp_path / "weights.gguf"
    target.write_bytes(b"GGUF")
    here = tmp_path / "scratch" / "models-dir"
    here.mkdir(parents=True)
    (here / "stale.gguf").write_bytes(b"old")
    lay_out_models_dir(here, {"a.gguf": target})
    assert [p.name for p in here.iterdir()] == ["a.gguf"]
    assert (here / "a.gguf").resolve() == target


def test_the_models_dir_is_read_in_both_spellings() -> None:
    assert models_dir(ARGS) == "/models"
    assert models_dir(["--models-dir=/m"]) == "/m"
    assert models_dir(["--port", "1"]) is None


def test_the_real_router_listens_on_loopback_over_the_local_folder_without_sim_flags() -> None:
    argv = real_router_argv(Path("/bin/llama-server"), ARGS, here=Path("/scratch/md"), port=4321)
    assert argv == [
        "/bin/llama-server", "--models-max", "1", "--no-models-autoload", "--parallel", "2",
        "--models-dir", "/scratch/md", "--threads", "1",
        "--host", "127.0.0.1", "--port", "4321",
    ]  # fmt: skip
    given = real_router_argv(Path("/s"), [*ARGS, "-t", "2"], here=Path("/md"), port=1)
    assert given.count("-t") == 1
    assert "--threads" not in given


def test_the_simulated_router_gets_the_same_arguments_and_the_nodes_timings() -> None:
    argv = sim_router_argv(
        ARGS, here=Path("/scratch/md"), port=4321, load_seconds=2.0, token_seconds=0.01
    )
    assert argv[:4] == [sys.executable, "-m", "controlplane.cli", "llama-sim"]
    rest = argv[4:]
    assert rest[rest.index("--models-dir") + 1] == "/scratch/md"
    assert rest[rest.index("--sim-load-seconds") + 1] == "0.5"  # the pod's own
    assert rest[rest.index("--sim-token-seconds") + 1] == "0.01"  # the node's
    assert rest[-4:] == ["--host", "127.0.0.1", "--port", "4321"]
    assert rest.count("--host") == 1
    assert "0.0.0.0" not in rest


def test_a_slot_server_carries_its_pod_and_pool_but_no_member() -> None:
    assert slot_server_env("ns", "slots-0", "pool-a") == {
        "MODELPOOL_POD": "ns/slots-0",
        "MODELPOOL_SLOT_SERVER": "ns/pool-a",
    }
