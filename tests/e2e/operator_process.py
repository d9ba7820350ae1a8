"""The operator and the node stand-in as separate processes, for e2e tests.

The processes themselves are :mod:`controlplane.local.system`'s (the demo runs the same ones):
the operator as ``modelpool-system/modelpool-operator`` through a TokenRequest token, bound only
by the generated RBAC manifests; the node stand-in as the admin. :func:`stopped_at_exit` stops every
process a test started, and prints the end of its output, even when the test fails.

A node stand-in started for a namespace (:func:`start_node`) comes with the pool invariant monitor
(:mod:`tests.e2e.invariants`) on that namespace, so every test that runs pools on the stand-in is
watched with no code of its own: when the node is stopped the pools must have settled (unless the
test already failed), and any overlap seen during the test fails it, with the monitor's record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from controlplane.local.system import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    operator_kubeconfig,
    service_account_token,
)
from controlplane.runtime.client import KubeClient
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.invariants import PoolInvariantMonitor, PoolInvariantViolated, last_test_failed
from tests.e2e.kubectl import REPO
from tests.e2e.waiting import eventually

__all__ = [
    "LocalProcess",
    "NodeStandInProcess",
    "OperatorProcess",
    "WatchedNode",
    "operator_kubeconfig_for",
    "service_account_token",
    "start_node",
    "start_operator",
    "stopped_at_exit",
    "wait_until_ready",
]


@contextlib.contextmanager
def stopped_at_exit() -> Iterator[list[LocalProcess]]:
    """A list to put started processes in; each is stopped (SIGTERM, then SIGKILL) at exit."""
    started: list[LocalProcess] = []
    violated: list[PoolInvariantViolated] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            try:
                process.stop(grace=15)
            except PoolInvariantViolated as err:  # stop the others first, then fail
                violated.append(err)
            print(f"--- {process.name} output (last lines)\n{process.output()[-4000:]}")
    if violated:
        raise violated[0]


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
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> OperatorProcess:
    """The operator under its ServiceAccount, waited on until ``/readyz`` answers 200; ``env``
    is added to its environment (the tracing test points ``OTEL_*`` at Jaeger), ``extra_args``
    to its command line."""
    kubeconfig = await operator_kubeconfig_for(cluster, admin, workdir / f"{identity}.kubeconfig")
    operator = OperatorProcess(
        kubeconfig, workdir, lease, identity, cwd=REPO, env=env, extra_args=extra_args
    )
    started.append(operator)
    await wait_until_ready(operator, f"{operator.probe_url}/readyz", timeout=60)
    return operator


async def wait_until_ready(
    process: LocalProcess, url: str, *, timeout: float = 90, interval: float = 0.2
) -> None:
    """Until ``url`` (the process's ``/readyz``) answers 200; fails at once, with the end of its
    output, if the process exits meanwhile."""
    async with http_client(timeout=5, trust_env=False) as http:

        async def ready() -> bool:
            assert process.running(), f"{process.name} exited:\n{process.output()[-3000:]}"
            try:
                return (await http.get(url)).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(ready, timeout=timeout, interval=interval, what=f"{process.name} ready")


class WatchedNode(NodeStandInProcess):
    """The node stand-in, with the pool invariant monitor on its namespace.

    :meth:`stop` first waits for the pools to settle (skipped when the test failed: its pools are
    wherever it stopped), then stops the monitor and the node, and raises
    :class:`PoolInvariantViolated` with the monitor's record if anything was violated. The
    monitor starts before the stand-in, so it sees every pod and simulator the stand-in makes.
    """

    monitor: PoolInvariantMonitor | None = None

    def stop(self, grace: float = 30.0) -> int:
        monitor, self.monitor = self.monitor, None
        if monitor is not None:
            try:
                if self.running() and not last_test_failed():
                    monitor.settle()
            finally:
                monitor.stop()
        code = super().stop(grace)
        if monitor is not None:
            print(monitor.report())
            monitor.check()
        return code


def start_node(
    cluster: TestCluster,
    workdir: Path,
    started: list[LocalProcess],
    *,
    namespace: str | None = None,
    load_seconds: float = 0.5,
    token_seconds: float | None = None,
    monitor: bool = True,
    llama_server: Path | None = None,
    router_proxies: bool = False,
    starting_poll_seconds: float | None = None,
) -> WatchedNode:
    """The node stand-in as the admin (it plays kubelet and built-in controllers); for a
    ``namespace``, with the pool invariant monitor (``monitor=False`` to go without); with
    ``router_proxies``, it plays the routers' proxy Deployments too."""
    watch = None
    if namespace is not None and monitor:
        watch = PoolInvariantMonitor(cluster.admin_config(), namespace).start()
    try:
        node = WatchedNode(
            cluster.admin_kubeconfig,
            workdir,
            namespace=namespace,
            load_seconds=load_seconds,
            token_seconds=token_seconds,
            llama_server=llama_server,
            router_proxies=router_proxies,
            starting_poll_seconds=starting_poll_seconds,
            cwd=REPO,
        )
    except BaseException:
        if watch is not None:
            watch.stop()
        raise
    node.monitor = watch
    started.append(node)
    return node


async def metric_sum(url: str, name: str, **labels: str) -> float:
    """The sum of a Prometheus family's samples named ``name`` whose labels include ``labels``."""
    async with http_client(timeout=10) as http:
        text = (await http.get(url)).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
