"""The launcher's promises: clear errors for taken ports, and no process left behind on a crash."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from controlplane.envtest import ControlPlane, PortInUseError

CRASHING_PARENT = """
import os, signal
from controlplane.envtest import ControlPlane
plane = ControlPlane().start()
print(" ".join(str(p.pid) for p in plane.processes.values()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no cleanup code runs
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_processes_die_with_a_killed_parent() -> None:
    parent = subprocess.run(
        [sys.executable, "-c", CRASHING_PARENT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert parent.returncode == -9, parent.stderr
    pids = [int(p) for p in parent.stdout.split()]
    assert len(pids) == 2, parent.stdout  # etcd and kube-apiserver
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "control-plane processes outlived their parent"


def test_a_taken_port_is_named_in_the_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"127.0.0.1:{port}"):
            ControlPlane(apiserver_port=port)


def test_stop_leaves_no_process() -> None:
    plane = ControlPlane().start()
    pids = [p.pid for p in plane.processes.values() if p.pid is not None]
    workdir = plane.workdir
    plane.stop()
    assert not [p for p in pids if _alive(p)]
    assert not workdir.exists()
