"""The monitors of manifests/monitoring select what they promise in a real cluster, and a swap
shows in what they scrape.

A real Prometheus, run by prometheus-operator, scrapes through the same monitors in
tests/e2e/test_kind_prometheus.py; this test reads what the monitors select more closely than
Prometheus' API shows it (which replica's metrics say what), by hand, from the monitors' own
fields: every pod or Service their selectors match (across namespaces, as
``namespaceSelector: any`` says), the port their endpoint names, the path they scrape, read
through the API server's proxy (which, like a scraper in the node's network, the members'
NetworkPolicy admits). So a selector that selects nothing, a port name that no container has, or
a metric that is not there fails here, which the schema check on the local tier cannot see.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import PODS, SERVICES
from tests.e2e.clusters import TestCluster
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kubectl import MANIFESTS, kubectl
from tests.e2e.test_kind_cluster import (
    ask_in_cluster,
    chat_url,
    pool_behind_router,
    wait_resident,
)
from tests.e2e.test_storm import swaps_in

pytestmark = pytest.mark.kind


async def _monitors(cluster: TestCluster) -> dict[str, dict[str, Any]]:
    _, rendered, _ = await kubectl(cluster, "kustomize", str(MANIFESTS / "monitoring"))
    return {
        doc["metadata"]["name"]: doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] in ("PodMonitor", "ServiceMonitor")
    }


def _selector(monitor: dict[str, Any]) -> str:
    labels = monitor["spec"]["selector"]["matchLabels"]
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


async def _scrape_pods(
    admin: KubeClient, cluster: TestCluster, monitor: dict[str, Any]
) -> dict[str, str]:
    """What a Prometheus scrapes through a PodMonitor: per selected running pod, its metrics."""
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    pods = await admin.list(PODS, None, label_selector=_selector(monitor))
    scraped: dict[str, str] = {}
    for pod in pods.items:
        if (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get(
            "deletionTimestamp"
        ):
            continue
        ports = [
            port["containerPort"]
            for container in pod["spec"]["containers"]
            for port in container.get("ports") or ()
            if port.get("name") == endpoint["port"]
        ]
        assert len(ports) == 1, f"{pod['metadata']['name']} has no port {endpoint['port']}"
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        path = f"/api/v1/namespaces/{namespace}/pods/{name}:{ports[0]}/proxy{endpoint['path']}"
        _, text, _ = await kubectl(cluster, "get", "--raw", path)
        scraped[f"{namespace}/{name}"] = text
    return scraped


def _reports_resident(text: str, namespace: str, pool: str, member: str) -> bool:
    """Whether an operator's metrics say ``member`` holds ``pool``'s slot."""
    wanted = {"namespace": namespace, "pool": pool, "member": member}
    return any(
        sample.name == "modelpool_pool_resident_member" and sample.labels == wanted and sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    )


async def test_the_monitors_select_the_operator_proxies_and_members_and_see_a_swap(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    monitors = await _monitors(cluster)
    monitor = PoolInvariantMonitor(cluster.admin_config(), namespace, sample_processes=False)
    monitor.start()
    try:
        await pool_behind_router(admin, cluster, namespace, proxies=2)
        cold = await ask_in_cluster(cluster, namespace, "cold", chat_url(namespace), "b")
        assert cold["status"] == 200, cold
        await wait_resident(admin, namespace, "b")
        monitor.settle()
        monitor.check()
    finally:
        monitor.stop()

    # The proxies: both replicas of this router selected, and the swap counted by its driver.
    proxies = await _scrape_pods(admin, cluster, monitors["modelpool-router-proxy"])
    ours = {pod: text for pod, text in proxies.items() if pod.startswith(f"{namespace}/chat-")}
    assert len(ours) == 2, sorted(proxies)
    swaps = sum((swaps_in(text) for text in ours.values()), start=swaps_in(""))
    assert sum(n for (_, _, target), n in swaps.items() if target == "b") >= 1, swaps

    # The members: the resident's pod selected (the released one has none), llama.cpp's metrics.
    members = await _scrape_pods(admin, cluster, monitors["modelpool-members"])
    ours = {pod: text for pod, text in members.items() if pod.startswith(f"{namespace}/")}
    assert [pod.split("/")[1].split("-")[0] for pod in ours] == ["b"], sorted(members)
    assert "llamacpp:requests_processing" in next(iter(ours.values()))

    # The operator: its ServiceMonitor (no namespaceSelector: its own namespace) selects its
    # metrics Service; a Prometheus scrapes every endpoint of it, each replica, and the leader's
    # says which member the pool made resident.
    service_monitor = monitors["modelpool-operator"]
    assert "namespaceSelector" not in service_monitor["spec"]
    services = await admin.list(
        SERVICES, OPERATOR_NAMESPACE, label_selector=_selector(service_monitor)
    )
    (service,) = services.items
    (endpoint,) = service_monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p.get("name") == endpoint["port"]]
    target = port["targetPort"]
    selected = ",".join(f"{k}={v}" for k, v in sorted(service["spec"]["selector"].items()))
    pods = await admin.list(PODS, OPERATOR_NAMESPACE, label_selector=selected)
    seen = []
    for pod in pods.items:
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        name = pod["metadata"]["name"]
        # The Service's targetPort names a container port; the pod proxy takes its number.
        (number,) = [
            p["containerPort"]
            for container in pod["spec"]["containers"]
            for p in container.get("ports") or ()
            if target in (p.get("name"), p["containerPort"])
        ]
        path = (
            f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/{name}:{number}/proxy{endpoint['path']}"
        )
        _, text, _ = await kubectl(cluster, "get", "--raw", path)
        seen.append(_reports_resident(text, namespace, "gpu", "b"))
    assert len(seen) >= 1
    assert seen.count(True) == 1, f"the leader alone reports the pool: {seen}"
