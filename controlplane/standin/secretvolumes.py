"""A pod's ``secret`` volumes, written and kept up to date as a kubelet does.

A kubelet writes a Secret volume with its atomic writer: the files go into a new timestamped
folder (``..2026_12_03_07_50_00.1234``), the symlink ``..data`` is swapped to it in one rename, and
each top-level name is a symlink into ``..data``. A reader therefore sees the old files or the new
ones, never half of each; and the kubelet does it again whenever the Secret changes, so a process
that re-reads its files sees rotated credentials without a restart (the router-proxy's API keys:
docs/router.md). The stand-in does the same in the volume's folder
(:func:`controlplane.standin.volumes.volume_path`: ``scratch/volumes/NAME``), on every step of
the pod (every :attr:`~controlplane.standin.settings.NodeSettings.resync_seconds` once it runs),
writing only when the Secret's content changed.

What is projected: every data key as a file of that name, or with ``items`` only those keys, at
their ``path``. A Secret that does not exist, or an ``items`` key it lacks, keeps the pod's
containers from starting (the kubelet's ``FailedMount``) unless the volume is ``optional`` (then
an empty folder, or the key left out). Once the pod runs, a Secret that cannot be read leaves the
files as they were, as a kubelet does. ``defaultMode`` and ``mode`` are not played: the files
belong to the stand-in's user.

:func:`projected_files` is pure; :func:`write_atomically` and :func:`sync_secret_volumes` do the
I/O.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import SECRETS
from controlplane.standin.volumes import Roots, volume_path

#: The symlink to the current files, and the one swapped over it.
DATA_LINK: Final = "..data"
DATA_LINK_TMP: Final = "..data_tmp"
#: The kubelet's own entries in the volume's folder start with this.
KUBELET_PREFIX: Final = ".."


class MountFailed(Exception):
    """A Secret volume cannot be set up (the kubelet's ``FailedMount`` message)."""


def secret_values(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's ``data`` (base64), decoded; a value that is not base64 is taken as it is."""
    values: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            values[str(key)] = base64.b64decode(str(value), validate=True)
        except binascii.Error:
            values[str(key)] = str(value).encode()
    return values


def projected_files(
    volume: Mapping[str, Any], secret: Mapping[str, Any] | None, namespace: str
) -> dict[str, bytes]:
    """The files of one ``secret`` volume (relative path → content), from its Secret (None when
    it does not exist). Raises :class:`MountFailed` as a kubelet would refuse to mount it."""
    source = volume.get("secret") or {}
    name = str(source.get("secretName") or "")
    optional = bool(source.get("optional"))
    if secret is None:
        if optional:
            return {}
        raise MountFailed(_failed(volume, f'secret "{name}" not found'))
    values = secret_values(secret)
    items = source.get("items")
    if not items:
        return values
    files: dict[str, bytes] = {}
    for item in items:
        key = str(item.get("key") or "")
        if key not in values:
            if optional:
                continue
            raise MountFailed(
                _failed(volume, f"couldn't find key {key} in Secret {namespace}/{name}")
            )
        files[str(item.get("path") or key).strip("/")] = values[key]
    return files


def _failed(volume: Mapping[str, Any], why: str) -> str:
    return f'MountVolume.SetUp failed for volume "{volume.get("name")}" : {why}'


def current_files(folder: Path) -> dict[str, bytes] | None:
    """What the volume's folder holds now (under ``..data``), None when nothing was written."""
    data = folder / DATA_LINK
    if not data.is_dir():
        return None
    found: dict[str, bytes] = {}
    for path in data.rglob("*"):
        if path.is_file():
            found[path.relative_to(data).as_posix()] = path.read_bytes()
    return found


def write_atomically(folder: Path, files: Mapping[str, bytes]) -> bool:
    """Make ``folder`` hold exactly ``files``, switched over in one rename; False when it held
    them already (nothing written)."""
    if current_files(folder) == dict(files):
        return False
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    version = folder / f"{KUBELET_PREFIX}{stamp}.{secrets.token_hex(4)}"
    version.mkdir()
    for relative, content in files.items():
        target = version / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    swap = folder / DATA_LINK_TMP
    swap.unlink(missing_ok=True)
    swap.symlink_to(version.name)
    os.replace(swap, folder / DATA_LINK)
    tops = {relative.split("/", 1)[0] for relative in files}
    for top in tops:
        link = folder / top
        if not link.is_symlink():
            link.symlink_to(f"{DATA_LINK}/{top}")
    for entry in folder.iterdir():
        if entry.name.startswith(KUBELET_PREFIX):
            if entry.name != version.name and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)  # an older version: nothing points at it any more
        elif entry.name not in tops:
            entry.unlink()  # a key the Secret no longer has
    return True


def secret_volumes(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's ``secret`` volumes."""
    return [v for v in (pod.get("spec") or {}).get("volumes") or () if "secret" in v]


async def sync_secret_volumes(client: KubeClient, pod: Mapping[str, Any], roots: Roots) -> None:
    """Read each ``secret`` volume's Secret and write what changed. Raises
    :class:`MountFailed`."""
    namespace = str(pod["metadata"].get("namespace") or "")
    for volume in secret_volumes(pod):
        name = str((volume.get("secret") or {}).get("secretName") or "")
        try:
            secret: Mapping[str, Any] | None = await client.get(SECRETS, name, namespace)
        except NotFound:
            secret = None
        files = projected_files(volume, secret, namespace)
        folder = volume_path(volume, namespace, roots)
        assert folder is not None  # a secret volume always has a folder of the pod
        write_atomically(folder, files)
