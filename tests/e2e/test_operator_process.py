"""The operator process under its own ServiceAccount: preflight, readiness, Lease, exit codes.

The operator runs as ``controlplane operator``, a separate process authenticated by a
TokenRequest token of ``modelpool-system/modelpool-operator`` and bound only by the generated
RBAC manifests, so every permission it uses is one the manifests grant.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from controlplane.controllers.rbac import OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT
from controlplane.envtest.process import free_port
from controlplane.preflight import EXIT_DENIED
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import LEASES, SERVICE_ACCOUNTS
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import REPO, install
from tests.e2e.waiting import eventually


async def _token(admin: KubeClient, namespace: str, account: str) -> str:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "metadata": {"name": account}, "spec": {"expirationSeconds": 3600}}  # fmt: skip
    answer = await admin.create(SERVICE_ACCOUNTS, request, namespace, subresource="token")
    return str(answer["status"]["token"])


class OperatorProcess:
    def __init__(self, kubeconfig: Path, workdir: Path, lease: str, identity: str) -> None:
        self.probe_port = free_port()
        self.metrics_port = free_port()
        self.log = workdir / f"{identity}.log"
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "operator",
             "--kubeconfig", str(kubeconfig), "--namespace", OPERATOR_NAMESPACE,
             "--identity", identity, "--leader-election-id", lease,
             "--health-probe-bind-address", f"127.0.0.1:{self.probe_port}",
             "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
             "--preflight-cache-dir", str(workdir / "preflight")],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def processes() -> Iterator[list[OperatorProcess]]:
    started: list[OperatorProcess] = []
    yield started
    for process in started:
        if process.popen.poll() is None:
            process.popen.kill()
            process.popen.wait()
        print(f"--- operator output\n{process.output()[-4000:]}")


async def test_operator_becomes_ready_leads_and_releases_on_sigterm(
    cluster: TestCluster, admin: KubeClient, tmp_path: Path, processes: list[OperatorProcess]
) -> None:
    await install(cluster)
    token = await _token(admin, OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT)
    kubeconfig = cluster.kubeconfig_for_token(token, tmp_path / "operator.kubeconfig")
    lease = f"operator-e2e-{secrets.token_hex(3)}"
    operator = OperatorProcess(kubeconfig, tmp_path, lease, "operator-0")
    processes.append(operator)

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{operator.probe_port}") as probes:

        async def ready() -> bool:
            return (await probes.get("/readyz")).status_code == 200

        await eventually(ready, timeout=60, interval=0.2, what="the operator to be ready")

        async def holder() -> str:
            found = await admin.get(LEASES, lease, OPERATOR_NAMESPACE)
            return str(found["spec"].get("holderIdentity") or "")

        assert await eventually(holder, what="the operator to take its Lease") == "operator-0"
        metrics_url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
        metrics = (await probes.get(metrics_url)).text
        assert f'leader_election_master_status{{name="{lease}"}} 1.0' in metrics

    operator.popen.send_signal(signal.SIGTERM)
    code = await anyio.to_thread.run_sync(lambda: operator.popen.wait(timeout=30))
    assert code == 0, operator.output()
    released = await admin.get(LEASES, lease, OPERATOR_NAMESPACE)
    assert not released["spec"].get("holderIdentity"), "a graceful stop releases the Lease"
    await admin.delete(LEASES, lease, OPERATOR_NAMESPACE)


async def test_operator_without_its_rbac_stops_at_start_naming_what_is_missing(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    processes: list[OperatorProcess],
) -> None:
    await install(cluster)  # CRDs exist; this account simply is not bound to the ClusterRole
    await admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": "unbound"}}, namespace)
    token = await _token(admin, namespace, "unbound")
    kubeconfig = cluster.kubeconfig_for_token(token, tmp_path / "unbound.kubeconfig")
    operator = OperatorProcess(kubeconfig, tmp_path, "unbound-operator", "unbound-0")
    processes.append(operator)
    code = await anyio.to_thread.run_sync(lambda: operator.popen.wait(timeout=90))
    output = operator.output()
    assert code == EXIT_DENIED, output
    assert "update inferenceservices.inference.modelpool.dev" in output
    assert "leases.coordination.k8s.io" in output
    with pytest.raises(NotFound):  # it never campaigned
        await admin.get(LEASES, "unbound-operator", OPERATOR_NAMESPACE)
