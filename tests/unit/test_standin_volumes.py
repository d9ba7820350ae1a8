"""A pod's volumes as folders here, and the container arguments pointed at them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane.standin.volumes import (
    Roots,
    container_mounts,
    local_path,
    prepare_volumes,
    rewrite_args,
)


def roots(tmp_path: Path) -> Roots:
    return Roots(tmp_path / "host", tmp_path / "pvc", tmp_path / "scratch")


def pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p"},
        "spec": {"volumes": volumes, "containers": [{"name": "c", "volumeMounts": mounts}]},
    }


def test_each_kind_of_volume_has_its_folder(tmp_path: Path) -> None:
    found = pod(
        [
            {"name": "cache", "hostPath": {"path": "/var/cache/m", "type": "DirectoryOrCreate"}},
            {"name": "weights", "persistentVolumeClaim": {"claimName": "w", "readOnly": True}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "conf", "configMap": {"name": "x"}},
        ],
        [
            {"name": "cache", "mountPath": "/cache"},
            {"name": "weights", "mountPath": "/models/", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp/work", "subPath": "a/b"},
            {"name": "conf", "mountPath": "/etc/conf"},
        ],
    )
    mounts = {m.mount_path: m for m in container_mounts(found, found["spec"]["containers"][0],
                                                          roots(tmp_path))}  # fmt: skip
    assert mounts["/cache"].local == tmp_path / "host/var/cache/m"
    assert mounts["/models"].local == tmp_path / "pvc/ns/w"
    assert mounts["/models"].read_only
    assert mounts["/tmp/work"].local == tmp_path / "scratch/volumes/tmp/a/b"
    assert "/etc/conf" not in mounts, "a configMap volume is not played"


def test_a_path_maps_to_its_deepest_mount_else_the_containers_own_disk(tmp_path: Path) -> None:
    found = pod(
        [
            {"name": "outer", "hostPath": {"path": "/o"}},
            {"name": "inner", "persistentVolumeClaim": {"claimName": "c"}},
        ],
        [{"name": "outer", "mountPath": "/data"}, {"name": "inner", "mountPath": "/data/in"}],
    )
    mounts = container_mounts(found, found["spec"]["containers"][0], roots(tmp_path))
    assert local_path(mounts, "/data") == tmp_path / "host/o"
    assert local_path(mounts, "/data/x/y") == tmp_path / "host/o/x/y"
    assert local_path(mounts, "/data/in/m.gguf") == tmp_path / "pvc/ns/c/m.gguf"
    assert local_path(mounts, "/datax") is None
    assert local_path(mounts, "/datax", tmp_path / "s") == tmp_path / "s/datax"


def test_arguments_under_a_mount_are_rewritten_and_others_kept(tmp_path: Path) -> None:
    found = pod(
        [{"name": "model", "hostPath": {"path": "/cache/k"}}],
        [{"name": "model", "mountPath": "/var/lib/modelpool/model"}],
    )
    mounts = container_mounts(found, found["spec"]["containers"][0], roots(tmp_path))
    local = tmp_path / "host/cache/k"
    args = [
        "--model", "/var/lib/modelpool/model/m.gguf", "--alias", "/var/lib/modelpool/model",
        "--dest=/var/lib/modelpool/model", "/models/image.gguf", "--x=/elsewhere", "-c=/var/lib"
    ]  # fmt: skip
    assert rewrite_args(args, mounts) == [
        "--model", str(local / "m.gguf"), "--alias", str(local), f"--dest={local}",
        "/models/image.gguf", "--x=/elsewhere", "-c=/var/lib",
    ]  # fmt: skip


def test_volumes_are_made_and_a_missing_file_keeps_the_pod_from_starting(tmp_path: Path) -> None:
    found = pod(
        [
            {"name": "d", "hostPath": {"path": "/made", "type": "DirectoryOrCreate"}},
            {"name": "f", "hostPath": {"path": "/touched", "type": "FileOrCreate"}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "claim"}},
            {"name": "m", "hostPath": {"path": "/models/m.gguf", "type": "File"}},
        ],
        [],
    )
    why = prepare_volumes(found, roots(tmp_path))
    assert why is not None
    assert 'volume "m"' in why
    assert "/models/m.gguf is not a file" in why
    assert (tmp_path / "host/made").is_dir()
    assert (tmp_path / "host/touched").is_file()
    assert (tmp_path / "pvc/ns/claim").is_dir()
    (tmp_path / "host/models").mkdir(parents=True)
    (tmp_path / "host/models/m.gguf").write_bytes(b"GGUF")
    assert prepare_volumes(found, roots(tmp_path)) is None


@pytest.mark.parametrize("kind", ["Directory", "File"])
def test_a_volume_that_must_exist_is_checked(tmp_path: Path, kind: str) -> None:
    found = pod([{"name": "v", "hostPath": {"path": "/nothing", "type": kind}}], [])
    assert "/nothing is not a" in (prepare_volumes(found, roots(tmp_path)) or "")
