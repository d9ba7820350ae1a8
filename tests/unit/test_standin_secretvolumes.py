"""The stand-in's ``secret`` volumes: what a Secret projects, written as a kubelet writes it."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from controlplane.standin.secretvolumes import (
    MountFailed,
    current_files,
    projected_files,
    write_atomically,
)
from controlplane.standin.volumes import Roots, container_mounts, rewrite_args, volume_path


def secret(**values: str) -> dict[str, Any]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    return {"kind": "Secret", "metadata": {"name": "keys"}, "data": data}


def volume(**source: Any) -> dict[str, Any]:
    return {"name": "api-keys", "secret": {"secretName": "keys", **source}}


def test_every_key_is_a_file_or_only_the_items_asked_for() -> None:
    found = secret(a="one", b="two")
    assert projected_files(volume(), found, "ns") == {"a": b"one", "b": b"two"}
    items = [{"key": "b", "path": "sub/b.txt"}]
    assert projected_files(volume(items=items), found, "ns") == {"sub/b.txt": b"two"}


def test_a_missing_secret_or_key_fails_the_mount_unless_optional() -> None:
    with pytest.raises(MountFailed, match='volume "api-keys" : secret "keys" not found'):
        projected_files(volume(), None, "ns")
    assert projected_files(volume(optional=True), None, "ns") == {}
    items = [{"key": "c", "path": "c"}]
    with pytest.raises(MountFailed, match="couldn't find key c in Secret ns/keys"):
        projected_files(volume(items=items), secret(a="one"), "ns")
    assert projected_files(volume(items=items, optional=True), secret(a="one"), "ns") == {}


def test_written_as_the_kubelet_s_atomic_writer_and_only_when_changed(tmp_path: Path) -> None:
    folder = tmp_path / "vol"
    assert current_files(folder) is None
    assert write_atomically(folder, {"a": b"one", "b": b"two"}) is True
    assert (folder / "..data").is_symlink()
    assert os.readlink(folder / "a") == "..data/a"
    assert (folder / "a").read_bytes() == b"one"
    first = os.readlink(folder / "..data")
    assert write_atomically(folder, {"a": b"one", "b": b"two"}) is False
    assert os.readlink(folder / "..data") == first

    # The Secret changed: a key added, one removed, one edited; the old version is gone.
    assert write_atomically(folder, {"a": b"uno", "c": b"three"}) is True
    assert os.readlink(folder / "..data") != first
    assert not (folder / first).exists()
    assert not (folder / "b").exists()
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("..")) == ["a", "c"]
    assert current_files(folder) == {"a": b"uno", "c": b"three"}


def test_a_secret_volume_is_a_folder_of_the_pod_and_arguments_under_it_point_there(
    tmp_path: Path,
) -> None:
    roots = Roots(tmp_path / "host", tmp_path / "pvc", tmp_path / "scratch")
    pod = {
        "metadata": {"namespace": "ns", "name": "p"},
        "spec": {"volumes": [volume()]},
    }
    container = {
        "volumeMounts": [
            {"name": "api-keys", "mountPath": "/etc/modelpool/api-keys", "readOnly": True}
        ]
    }
    local = volume_path(volume(), "ns", roots)
    assert local == tmp_path / "scratch" / "volumes" / "api-keys"
    mounts = container_mounts(pod, container, roots)
    assert rewrite_args(["--api-keys-dir=/etc/modelpool/api-keys", "--x"], mounts) == [
        f"--api-keys-dir={local}",
        "--x",
    ]
