"""A slot server pod: llama-server in router mode over the models mounted into its ``--models-dir``.

Why: the pool's slot runtime runs one long-lived ``llama-server --models-dir D --models-max 1
--no-models-autoload`` per pool and loads models into it through its HTTP API. Each model is
mounted into the pod as a file, ``D/<name>.gguf`` (a ``hostPath`` of type ``File``, or a
``subPath`` of a claim or a hostPath folder). A local process has no mount namespace, so the
stand-in lays ``D`` out on this machine instead: a folder of the pod's with one symbolic link per
such mount, pointing at the mount's file here (llama.cpp follows links), and ``--models-dir``
pointed at it.

The pod is recognised by its label (:data:`SLOT_SERVER_LABEL`, the pool's name); its server
container is named ``server`` and its port ``http``, as a member's. It runs the real llama-server
when the stand-in has one and every model is a GGUF file here, else the simulator's router mode
(``controlplane llama-sim`` with the same arguments). Either listens on a loopback port of the
stand-in's choosing and is Ready when its ``/health`` answers 200; stopping the pod stops the
router's process group, its children included (each router also stops its children on SIGTERM).

Pure but for :func:`lay_out_models_dir`.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from controlplane.runtime.endpoints import LOOPBACK
from controlplane.standin.process import POD_ENV
from controlplane.standin.volumes import Mount

#: The label of a slot server pod: the name of the pool it serves.
SLOT_SERVER_LABEL: Final = "inference.modelpool.dev/slot-server"
MODELS_DIR_ARG: Final = "--models-dir"
MODEL_SUFFIX: Final = ".gguf"
#: The environment variable naming the pool a slot server process serves (``namespace/pool``),
#: beside ``MODELPOOL_POD``; no ``MODELPOOL_MEMBER``: which models it runs is its own business.
SLOT_SERVER_ENV: Final = "MODELPOOL_SLOT_SERVER"
#: The simulator-only flags of a slot server's arguments (a real llama-server refuses them).
_SIM_ONLY_PREFIX: Final = "--sim-"
_LISTEN_FLAGS: Final = ("--host", "--port")
_THREADS_FLAGS: Final = ("--threads", "-t")
#: As for a member's real server: at llama.cpp's default a shared 2-core machine spins.
REAL_SERVER_THREADS: Final = 1


def models_dir(args: Sequence[str]) -> str | None:
    """The ``--models-dir`` of a container's arguments (the last one wins)."""
    found = None
    for index, arg in enumerate(args):
        if arg == MODELS_DIR_ARG and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(f"{MODELS_DIR_ARG}="):
            found = arg.partition("=")[2]
    return found


def model_links(mounts: Sequence[Mount], folder: str) -> dict[str, Path]:
    """The links that lay out the container's ``folder`` here: each mount of a ``.gguf`` file
    directly in it, by file name, to the mount's local file."""
    inside = PurePosixPath("/" + folder.strip("/"))
    links: dict[str, Path] = {}
    for mount in mounts:
        path = PurePosixPath(mount.mount_path)
        if path.parent == inside and path.name.endswith(MODEL_SUFFIX):
            links[path.name] = mount.local
    return dict(sorted(links.items()))


def lay_out_models_dir(here: Path, links: Mapping[str, Path]) -> None:
    """Make ``here`` hold exactly ``links`` (a restarted container gets a fresh layout)."""
    if here.exists():
        shutil.rmtree(here)
    here.mkdir(parents=True)
    for name, target in links.items():
        (here / name).symlink_to(target)


def _without(args: Sequence[str], drop: Sequence[str], prefix: str | None = None) -> list[str]:
    """``args`` without the flags ``drop`` (``--flag VALUE`` and ``--flag=VALUE``) and, given
    ``prefix``, every flag starting with it (with its value)."""
    kept: list[str] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        name = arg.partition("=")[0]
        if name in drop or (prefix is not None and name.startswith(prefix)):
            skip_next = "=" not in arg  # every flag dropped here takes a value
            continue
        kept.append(arg)
    return kept


def _with_models_dir(args: Sequence[str], here: Path) -> list[str]:
    out = _without(args, (MODELS_DIR_ARG,))
    return [*out, MODELS_DIR_ARG, str(here)]


def real_router_argv(binary: Path, args: Sequence[str], *, here: Path, port: int) -> list[str]:
    """The real llama-server in router mode: the container's arguments with ``--models-dir`` at
    ``here``, listening on ``LOOPBACK:port``, without the simulator's ``--sim-*`` flags, and
    ``--threads`` :data:`REAL_SERVER_THREADS` unless given (the children inherit it)."""
    kept = _without(_with_models_dir(args, here), _LISTEN_FLAGS, _SIM_ONLY_PREFIX)
    if not any(arg.partition("=")[0] in _THREADS_FLAGS for arg in kept):
        kept += ["--threads", str(REAL_SERVER_THREADS)]
    return [str(binary), *kept, "--host", LOOPBACK, "--port", str(port)]


def sim_router_argv(
    args: Sequence[str], *, here: Path, port: int, load_seconds: float, token_seconds: float
) -> list[str]:
    """The simulator's router mode with the same arguments, ``--models-dir`` at ``here``, on
    ``LOOPBACK:port``; the node's load and token times unless the arguments give them."""
    kept = _without(_with_models_dir(args, here), _LISTEN_FLAGS)
    names = {arg.partition("=")[0] for arg in kept}
    if "--sim-load-seconds" not in names:
        kept += ["--sim-load-seconds", str(load_seconds)]
    if "--sim-token-seconds" not in names:
        kept += ["--sim-token-seconds", str(token_seconds)]
    return [
        sys.executable, "-m", "controlplane.cli", "llama-sim", *kept,
        "--host", LOOPBACK, "--port", str(port),
    ]  # fmt: skip


def slot_server_env(namespace: str, pod: str, pool: str) -> dict[str, str]:
    """The identity a slot server carries: ``namespace/pod`` and ``namespace/pool``."""
    return {POD_ENV: f"{namespace}/{pod}", SLOT_SERVER_ENV: f"{namespace}/{pool}"}
