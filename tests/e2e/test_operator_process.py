"""The operator process under its own ServiceAccount: preflight, readiness, Lease, exit codes.

The operator runs as ``controlplane operator``, a separate process authenticated by a
TokenRequest token of ``modelpool-system/modelpool-operator`` and bound only by the generated
RBAC manifests, so every permission it uses is one the manifests grant.
"""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.local.system import kubeconfig_for_token
from controlplane.preflight import EXIT_DENIED
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import LEASES, SERVICE_ACCOUNTS
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.kubectl import REPO, install
from tests.e2e.operator_process import (
    LocalProcess,
    OperatorProcess,
    operator_kubeconfig_for,
    service_account_token,
    stopped_at_exit,
)
from tests.e2e.waiting import eventually


@pytest.fixture
def processes() -> Iterator[list[LocalProcess]]:
    with stopped_at_exit() as started:
        yield started


async def test_operator_becomes_ready_leads_and_releases_on_sigterm(
    cluster: TestCluster, admin: KubeClient, tmp_path: Path, processes: list[OperatorProcess]
) -> None:
    await install(cluster)
    kubeconfig = await operator_kubeconfig_for(cluster, admin, tmp_path / "operator.kubeconfig")
    lease = f"operator-e2e-{secrets.token_hex(3)}"
    operator = OperatorProcess(kubeconfig, tmp_path, lease, "operator-0", cwd=REPO)
    processes.append(operator)

    async with http_client(base_url=f"http://127.0.0.1:{operator.probe_port}") as probes:

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
    token = await service_account_token(admin, namespace, "unbound")
    kubeconfig = kubeconfig_for_token(
        cluster.admin_kubeconfig, token, tmp_path / "unbound.kubeconfig"
    )
    operator = OperatorProcess(kubeconfig, tmp_path, "unbound-operator", "unbound-0", cwd=REPO)
    processes.append(operator)
    code = await anyio.to_thread.run_sync(lambda: operator.popen.wait(timeout=90))
    output = operator.output()
    assert code == EXIT_DENIED, output
    assert "watch inferenceservices.inference.modelpool.dev" in output
    assert "update inferenceservices/status.inference.modelpool.dev" in output
    # Members are read, never written: the operator does not even ask to write one.
    assert "update inferenceservices.inference.modelpool.dev" not in output
    assert "patch inferenceservices.inference.modelpool.dev" not in output
    assert "leases.coordination.k8s.io" in output
    with pytest.raises(NotFound):  # it never campaigned
        await admin.get(LEASES, "unbound-operator", OPERATOR_NAMESPACE)
