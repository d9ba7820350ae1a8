"""The operator and the node stand-in as separate processes, for e2e tests.

The processes themselves are :mod:`controlplane.dev`'s (the demo runs the same ones): the operator
as ``modelpool-system/modelpool-operator`` through a TokenRequest token, bound only by the
generated RBAC manifests; the node stand-in as the admin. :func:`stopped_at_exit` stops every
process a test started, and prints the end of its output, even when the test fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from controlplane.dev import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    operator_kubeconfig,
    service_account_token,
)
from controlplane.runtime.client import KubeClient
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import REPO
from tests.e2e.waiting import eventually

__all__ = [
    "LocalProcess",
    "NodeStandInProcess",
    "OperatorProcess",
    "operator_kubeconfig_for",
    "service_account_token",
    "start_node",
    "start_operator",
    "stopped_at_exit",
]


@contextlib.contextmanager
def stopped_at_exit() -> Iterator[list[LocalProcess]]:
    """A list to put started processes in; each is stopped (SIGTERM, then SIGKILL) at exit."""
    started: list[LocalProcess] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            process.stop(grace=15)
            print(f"--- {process.name} output (last lines)\n{process.output()[-4000:]}")


async def operator_kubeconfig_for(cluster: TestCluster, admin: KubeClient, path: Path) -> Path:
    """A kubeconfig that authenticates as the operator's ServiceAccount."""
    return await operator_kubeconfig(admin, cluster.admin_kubeconfig, path)


async def start_operator(
    cluster: TestCluster,
    admin: KubeClient,
    workdir: Path,
    lease: str,
    identity: str,
    started: list[LocalProcess],
) -> OperatorProcess:
    """The operator under its ServiceAccount, waited on until ``/readyz`` answers 200."""
    kubeconfig = await operator_kubeconfig_for(cluster, admin, workdir / f"{identity}.kubeconfig")
    operator = OperatorProcess(kubeconfig, workdir, lease, identity, cwd=REPO)
    started.append(operator)
    async with httpx.AsyncClient(base_url=operator.probe_url) as probes:

        async def ready() -> bool:
            assert operator.running(), "the operator exited"
            return (await probes.get("/readyz")).status_code == 200

        await eventually(ready, timeout=60, interval=0.2, what="the operator to be ready")
    return operator


def start_node(
    cluster: TestCluster,
    workdir: Path,
    started: list[LocalProcess],
    *,
    namespace: str | None = None,
    load_seconds: float = 0.5,
    token_seconds: float | None = None,
) -> NodeStandInProcess:
    """The node stand-in as the admin (it plays kubelet and built-in controllers)."""
    node = NodeStandInProcess(
        cluster.admin_kubeconfig,
        workdir,
        namespace=namespace,
        load_seconds=load_seconds,
        token_seconds=token_seconds,
        cwd=REPO,
    )
    started.append(node)
    return node


async def metric_sum(url: str, name: str, **labels: str) -> float:
    """The sum of a Prometheus family's samples named ``name`` whose labels include ``labels``."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(url)).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
