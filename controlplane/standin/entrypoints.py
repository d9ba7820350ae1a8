"""Which containers other than servers the stand-in can run, and how a missing model crashes one.

The stand-in runs no images. A member's server is a simulator or a real llama-server and a
router-proxy is a ``controlplane router-proxy`` (:mod:`controlplane.standin.controller`); any
other container (an init container, a Job's) runs only when it is one of the project's own
subcommands in :data:`RUNNABLE_SUBCOMMANDS`: no ``command`` (or ``["controlplane"]``, the image's
entrypoint) and ``args[0]`` that subcommand. It runs as ``python -m controlplane.cli ARGS`` with
its arguments rewritten to the pod's volumes (:func:`controlplane.standin.volumes.rewrite_args`).
An allow-list, not any command: the stand-in runs as the cluster admin's user on a developer's
machine, and whoever can create a pod must not run what they like there. Anything else is
reported as a kubelet reports a container it cannot create (``CreateContainerError``).

Termination messages: a container's ``terminationMessagePath`` is played by a file of the pod
(:func:`controlplane.standin.termination.termination_file`). An argument equal to that path is
rewritten to the file; a subcommand that takes its message path as a flag
(:data:`TERMINATION_FLAGS`: ``fetch-model --termination-log``) and whose arguments do not give it
is given the file, since its default (``/dev/termination-log``) means the node's ``/dev`` here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from controlplane.standin.termination import termination_path
from controlplane.standin.volumes import Mount, local_path, mount_of

#: The project's subcommands a container may run on the stand-in.
#: ``collect-model-cache``: the node cache's collection Job (``controllers/modelcache``).
RUNNABLE_SUBCOMMANDS: Final = frozenset({"fetch-model", "collect-model-cache"})
#: The flag each runnable subcommand takes its termination message path from.
TERMINATION_FLAGS: Final = {"fetch-model": "--termination-log"}
#: The image's entrypoint: a container's ``command`` may name it, or be left out.
ENTRYPOINT: Final = "controlplane"


class NotRunnable(Exception):
    """The stand-in cannot play this container (its message is the container's waiting
    message, reason ``CreateContainerError``)."""


def subcommand_argv(
    container: Mapping[str, Any], args: Sequence[str], message_file: Path
) -> list[str]:
    """The command line playing ``container`` whose (already rewritten) arguments are
    ``args``; raises :class:`NotRunnable` unless it is a runnable subcommand."""
    command = [str(c) for c in container.get("command") or ()]
    subcommand = args[0] if args else ""
    if command not in ([], [ENTRYPOINT]) or subcommand not in RUNNABLE_SUBCOMMANDS:
        shown = " ".join([*command, *args[:1]]) or "the image's default command"
        raise NotRunnable(
            f"the node stand-in runs only the subcommands {', '.join(sorted(RUNNABLE_SUBCOMMANDS))}"
            f" of {ENTRYPOINT}; container {container.get('name')!r} runs {shown!r}"
        )
    wanted = termination_path(container)
    argv = [str(message_file) if arg == wanted else arg for arg in args]
    flag = TERMINATION_FLAGS.get(subcommand)
    if flag is not None and not any(a == flag or a.startswith(f"{flag}=") for a in argv):
        argv += [flag, str(message_file)]
    return [sys.executable, "-m", "controlplane.cli", *argv]


def missing_model(model: str | None, mounts: Sequence[Mount]) -> str | None:
    """What llama-server prints before it exits 1 when its ``--model`` (as the container sees
    it) lies under a mounted volume and the file is not there; None when it is there, or when
    it is not under a volume (a file of the image, which the stand-in cannot look into)."""
    if not model or mount_of(mounts, model) is None:
        return None
    found = local_path(mounts, model)
    if found is not None and found.is_file():
        return None
    return (
        f"gguf_init_from_file: failed to open GGUF file '{model}' (No such file or directory)\n"
        f"llama_model_load: error loading model: failed to load model from {model}\n"
        "main: exiting due to model loading error\n"
    )
