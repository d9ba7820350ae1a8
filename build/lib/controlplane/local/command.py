"""``controlplane demo`` and ``controlplane dev``: the whole system locally, for a look or to work.

Both start a real control plane on loopback (:class:`~controlplane.envtest.ControlPlane`) and
drive it with the kubectl built beside it; ``demo`` shows one swap and stops everything, ``dev``
keeps it all running until Ctrl-C (:mod:`controlplane.local.system`). Kept light for the CLI to
import: the system is imported when a command runs.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

from controlplane.envtest import ControlPlane, EnvtestError


def _kubectl(plane: ControlPlane) -> str:
    if plane.binaries.kubectl is not None:
        return str(plane.binaries.kubectl)
    found = shutil.which("kubectl")
    if found is None:
        raise EnvtestError("kubectl not found: run `make controlplane-bins`")
    return found


def _run_kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> None:
    argv = [_kubectl(plane), *args]
    print(f"$ kubectl {' '.join(args)}", flush=True)
    env = {**os.environ, "KUBECONFIG": str(plane.admin_kubeconfig)}
    subprocess.run(argv, env=env, check=True, input=stdin, text=stdin is not None)


def _start_plane() -> ControlPlane:
    print("starting etcd, kube-apiserver and kube-controller-manager on loopback ...", flush=True)
    plane = ControlPlane(with_controller_manager=True).start()
    timings = ", ".join(f"{name} {secs:.1f} s" for name, secs in plane.startup_seconds.items())
    print(f"control plane ready at {plane.server} ({timings})", flush=True)
    return plane


#: What plays the members: the simulator, or the real llama.cpp server.
MEMBER_KINDS: Final = ("simulator", "llama-server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag: what plays the members; everything else is chosen for this machine."""
    parser.add_argument(
        "--members",
        choices=MEMBER_KINDS,
        default="simulator",
        help="llama-server: members whose model is a GGUF file here run the real llama-server "
        "($LLAMA_SERVER_BINARY or `make llama-server`'s build; the demo generates two tiny "
        "models for its members)",
    )


def _llama_server(args: argparse.Namespace) -> Path | None:
    """The real server's binary when asked for (a missing build is an error saying how to
    build it), else None."""
    if args.members != "llama-server":
        return None
    from controlplane.envtest.llamaserver import find_llama_server

    return find_llama_server()


def run_demo(args: argparse.Namespace) -> int:
    """Start the whole system locally, show it working, and stop it."""
    from controlplane.local.system import demo_inference_services

    llama_server = _llama_server(args)
    plane = _start_plane()
    try:
        _run_kubectl(plane, "version")
        _run_kubectl(plane, "get", "namespaces")
        demo_inference_services(
            plane.admin_kubeconfig,
            functools.partial(_run_kubectl, plane),
            plane.workdir,
            llama_server,
        )
    finally:
        plane.stop()
    print("demo finished; everything it started has stopped", flush=True)
    return 0


def run_dev(args: argparse.Namespace) -> int:
    """Run the control plane, the operator and the node stand-in until Ctrl-C or SIGTERM."""
    from controlplane.local.system import run_dev as run_system

    llama_server = _llama_server(args)
    plane = _start_plane()
    return run_system(plane, functools.partial(_run_kubectl, plane), llama_server)
