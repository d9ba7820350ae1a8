"""``make dev`` has a live router: apply the samples, and the router answers at its printed address.

The dev system is started the way ``make dev`` starts it (``python -m controlplane.cli dev``, its
own control plane, in a temporary folder), watched by the pool invariant monitor. After
``kubectl apply -f manifests/samples/`` the node stand-in plays the router's proxy pods (as the
router's ServiceAccount), the ModelRouter becomes Ready, a chat completion through the printed
address is answered by the pool's resident model, and one for the parked model swaps and is
answered. Ctrl-C stops everything and the logs are kept where it says.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from controlplane.api.v1alpha1 import ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.standin.process import die_with_parent
from tests.e2e.clusters import TestCluster
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kubectl import MANIFESTS, REPO, kubectl
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.anyio

NAMESPACE = "default"
START_TIMEOUT = 180.0
TIMEOUT = 120.0


class DevProcess:
    """``controlplane dev`` in ``cwd``, its output read line by line as it comes."""

    def __init__(self, cwd: Path) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "dev"],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))},
            preexec_fn=die_with_parent,
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            self._new.put(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first output line (seen or to come) matching ``pattern``."""
        deadline = time.monotonic() + timeout
        compiled = re.compile(pattern)
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if found := compiled.search(line):
                    return found
            seen = len(self.lines)
            left = deadline - time.monotonic()
            if left <= 0 or (self.popen.poll() is not None and self._new.empty()):
                raise AssertionError(f"no {pattern!r} in the output:\n{self.output()}")
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=min(left, 0.5))

    def output(self) -> str:
        return "\n".join(self.lines[-200:])

    def interrupt(self, timeout: float = 60.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        return self.popen.returncode


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevProcess]:
    process = DevProcess(tmp_path)
    try:
        yield process
    finally:
        process.interrupt()
        print(f"--- controlplane dev output (last lines)\n{process.output()}")


def chat(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hello, router"}]}


async def test_make_dev_runs_a_live_router_that_swaps(dev: DevProcess) -> None:
    kubeconfig = Path(dev.wait_for(r"^kubeconfig: (\S+)", START_TIMEOUT)[1])
    logs = Path(dev.wait_for(r"^logs: (\S+)", 5)[1])
    cluster = TestCluster(mode="dev", admin_kubeconfig=kubeconfig)
    monitor = PoolInvariantMonitor(ClientConfig.from_kubeconfig(kubeconfig), NAMESPACE).start()
    try:
        await kubectl(cluster, "apply", "-n", NAMESPACE, "-f", str(MANIFESTS / "samples"))
        async with KubeClient(ClientConfig.from_kubeconfig(kubeconfig)) as admin:

            async def router_ready() -> bool:
                found = await admin.get(ModelRouter.resource(), "chat", NAMESPACE)
                return (found.get("status") or {}).get("phase") == "Ready"

            await eventually(router_ready, timeout=TIMEOUT, interval=0.5, what="router Ready")
            url = dev.wait_for(rf"router {NAMESPACE}/chat answers at (http://\S+)", 30)[1]
            # The sample pool warms its default, llama-3-8b (a request for it waits for that);
            # qwen-2-7b is parked until asked for.
            resident, parked = "llama-3-8b", "qwen-2-7b"
            async with httpx.AsyncClient(timeout=TIMEOUT, trust_env=False) as http:
                for model in (resident, parked):
                    response = await http.post(f"{url}/v1/chat/completions", json=chat(model))
                    assert response.status_code == 200, response.text
                    assert response.json()["model"] == model
            # The swap's driver forwards the held request once the new server answers /health,
            # before the kubelet's probe makes the InferenceService Ready; residentMember (the
            # owner once Ready) follows that, so it is awaited, not read once.

            async def parked_resident() -> bool:
                pool = await admin.get(ModelPool.resource(), "gpu-0", NAMESPACE)
                return (pool.get("status") or {}).get("residentMember") == parked

            await eventually(
                parked_resident, timeout=TIMEOUT, interval=0.2, what=f"{parked} resident"
            )
        monitor.settle()
    finally:
        monitor.stop()
        print(monitor.report())
    monitor.check()
    assert dev.interrupt() == 0, dev.output()
    kept = Path(dev.wait_for(r"logs kept in (\S+)", 10)[1])
    assert kept == logs
    assert_logs_kept(logs)


def assert_logs_kept(logs: Path) -> None:
    """The stand-in's, the operator's, the proxies' and the control plane's logs are all there."""
    assert (logs / "sim-node.log").is_file()
    assert (logs / "operator-local.log").is_file()
    assert (logs / "controlplane" / "kube-apiserver.log").is_file()
    proxies = sorted(p.name for p in (logs / "simulators").glob("default_chat-proxy-*.log"))
    assert len(proxies) >= 2, proxies  # spec.proxy.replicas: 2
