"""A pod's volumes as folders of this machine, and container arguments pointed at them.

A kubelet mounts each volume into the container's filesystem; a local process has no filesystem
of its own, so the stand-in gives it the volume's folder on this machine instead, and rewrites the
container's arguments to match. What each kind of volume is here:

* ``hostPath`` ``/P``: the folder (or file) ``host_root/P``, the node's disk, which outlives the
  pod. ``type: DirectoryOrCreate`` is created, ``FileOrCreate`` too (an empty file);
  ``Directory`` and ``File`` must exist, or the pod does not start (a kubelet's ``FailedMount``).
* ``persistentVolumeClaim`` ``CLAIM``: the folder ``pvc_root/NAMESPACE/CLAIM`` (tests put the
  claim's files there), created empty when missing. Nothing here binds claims to volumes: the
  claim object is not read, its folder is its volume.
* ``emptyDir``: a folder of the pod, ``scratch/volumes/NAME``.
* ``secret``: a folder of the pod too, ``scratch/volumes/NAME``, which
  :mod:`controlplane.standin.secretvolumes` fills with the Secret's keys and keeps up to date.
* anything else (``configMap``, ``projected``, ...): not played; a path under it is the
  container's own filesystem, ``scratch/PATH``.

A ``volumeMount`` with ``subPath`` mounts that part of the volume. ``readOnly`` is not enforced:
the processes run as the stand-in's user. No I/O here except :func:`prepare_volumes`, which makes
or checks the folders as a kubelet's volume manager would before the first container starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: The ``hostPath`` types the stand-in creates when missing, and the ones that must exist.
CREATE_DIRECTORY: Final = "DirectoryOrCreate"
CREATE_FILE: Final = "FileOrCreate"
MUST_BE_DIRECTORY: Final = "Directory"
MUST_BE_FILE: Final = "File"


@dataclass(frozen=True, slots=True)
class Roots:
    """Where a pod's volumes live on this machine."""

    #: The node's disk: hostPath ``/P`` is ``host_root/P``.
    host_root: Path
    #: Claims: ``pvc_root/NAMESPACE/CLAIM``.
    pvc_root: Path
    #: The pod's own folder: its emptyDirs, and any path of the container not under a volume.
    scratch: Path


@dataclass(frozen=True, slots=True)
class Mount:
    """One of a container's volume mounts: the path it sees, and the local path it is."""

    mount_path: str
    local: Path
    read_only: bool = False


def volume_path(volume: Mapping[str, Any], namespace: str, roots: Roots) -> Path | None:
    """The local path of one pod volume; None for a kind the stand-in does not play."""
    if (host := volume.get("hostPath")) is not None:
        return roots.host_root / str(host.get("path") or "").lstrip("/")
    if (claim := volume.get("persistentVolumeClaim")) is not None:
        return roots.pvc_root / namespace / str(claim.get("claimName") or "")
    if "emptyDir" in volume or "secret" in volume:
        return roots.scratch / "volumes" / str(volume.get("name") or "")
    return None


def container_mounts(
    pod: Mapping[str, Any], container: Mapping[str, Any], roots: Roots
) -> list[Mount]:
    """The container's mounts of played volumes, deepest mount path first."""
    namespace = str(pod["metadata"].get("namespace") or "")
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or ()}
    mounts: list[Mount] = []
    for mount in container.get("volumeMounts") or ():
        volume = volumes.get(mount.get("name"))
        local = volume_path(volume, namespace, roots) if volume is not None else None
        if local is None:
            continue
        if sub_path := str(mount.get("subPath") or "").strip("/"):
            local = local / sub_path
        path = "/" + str(mount.get("mountPath") or "").strip("/")
        mounts.append(Mount(path, local, bool(mount.get("readOnly"))))
    return sorted(mounts, key=lambda m: len(m.mount_path), reverse=True)


def mount_of(mounts: Sequence[Mount], path: str) -> Mount | None:
    """The mount holding the container's absolute ``path`` (the deepest), None if none does."""
    for mount in mounts:  # deepest first
        if mount.mount_path == "/" or path == mount.mount_path:
            return mount
        if path.startswith(mount.mount_path + "/"):
            return mount
    return None


def local_path(mounts: Sequence[Mount], path: str, scratch: Path | None = None) -> Path | None:
    """Where the container's absolute ``path`` is on this machine: under its mount's local
    path, else (given ``scratch``) ``scratch/PATH``, the container's own filesystem."""
    mount = mount_of(mounts, path)
    if mount is None:
        return scratch / path.lstrip("/") if scratch is not None else None
    rest = path[len(mount.mount_path) :].lstrip("/") if mount.mount_path != "/" else path[1:]
    return mount.local / rest if rest else mount.local


def rewrite_args(args: Sequence[str], mounts: Sequence[Mount]) -> list[str]:
    """``args`` with every absolute path under a mount (``/path`` and ``--flag=/path``) pointed
    at its local path: the server's ``--model``, the fetcher's ``--dest``, the KV cache's
    ``--slot-save-path``. Paths under no mount are left as they are (files of the image)."""
    out: list[str] = []
    for arg in args:
        flag, equals, value = arg.partition("=")
        if arg.startswith("/"):
            out.append(_rewritten(arg, mounts))
        elif equals and flag.startswith("-") and value.startswith("/"):
            out.append(f"{flag}={_rewritten(value, mounts)}")
        else:
            out.append(arg)
    return out


def _rewritten(path: str, mounts: Sequence[Mount]) -> str:
    found = local_path(mounts, path)
    return str(found) if found is not None else path


def prepare_volumes(pod: Mapping[str, Any], roots: Roots) -> str | None:
    """Make the pod's volumes as a kubelet's volume manager would; None when all are there, else
    why the pod cannot start (a kubelet's ``FailedMount`` message). Idempotent: called until it
    succeeds (a ``type: File`` hostPath may appear later)."""
    namespace = str(pod["metadata"].get("namespace") or "")
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        local = volume_path(volume, namespace, roots)
        if local is None:
            continue
        host = volume.get("hostPath")
        kind = str((host or {}).get("type") or "") if host is not None else CREATE_DIRECTORY
        path = str((host or {}).get("path") or local)
        if kind == CREATE_DIRECTORY:
            local.mkdir(parents=True, exist_ok=True)
        elif kind == CREATE_FILE:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.touch(exist_ok=True)
        elif kind == MUST_BE_DIRECTORY and not local.is_dir():
            return _mount_failed(volume, f"{path} is not a directory")
        elif kind == MUST_BE_FILE and not local.is_file():
            return _mount_failed(volume, f"{path} is not a file")
    return None


def _mount_failed(volume: Mapping[str, Any], why: str) -> str:
    name = volume.get("name")
    return f'MountVolume.SetUp failed for volume "{name}" : hostPath type check failed: {why}'
