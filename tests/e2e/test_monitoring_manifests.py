"""The monitors and the PrometheusRule in manifests/monitoring are what prometheus-operator accepts.

No prometheus-operator runs here; its CRDs do. ``make prometheus-operator-crds`` caches them from
prometheus-operator's Go module (``PROMETHEUS_OPERATOR_CRDS``); they are installed on the real API
server, and ``kubectl apply -k manifests/monitoring``'s objects are applied server side, as a dry
run: the server checks every field against the CRDs' OpenAPI schemas and refuses an unknown or
mistyped one, which no YAML lint does. A monitor with a field of the wrong type is refused, so the
check is known to be on.
"""

from __future__ import annotations

import pytest
import yaml

from controlplane.envtest.errors import BinaryNotFoundError
from controlplane.envtest.prometheus import find_prometheus_operator_crds
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import MANIFESTS, install, kubectl

MONITORING = MANIFESTS / "monitoring"


async def install_prometheus_operator_crds(cluster: TestCluster) -> None:
    try:
        crds = find_prometheus_operator_crds()
    except BinaryNotFoundError as err:
        pytest.fail(f"prometheus-operator's CRDs are needed: {err}")
    files = [arg for path in crds for arg in ("-f", str(path))]
    # Server side: the CRDs are too large for client-side apply's last-applied annotation.
    await kubectl(cluster, "apply", "--server-side", "--force-conflicts", *files)
    # monitoring.coreos.com_servicemonitors.yaml holds servicemonitors.monitoring.coreos.com.
    groups_and_plurals = [path.name.removesuffix(".yaml").split("_", 1) for path in crds]
    names = [f"crd/{plural}.{group}" for group, plural in groups_and_plurals]
    await kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", *names)


async def dry_run(cluster: TestCluster, manifests: str, *, check: bool = True) -> tuple[int, str]:
    code, out, err = await kubectl(
        cluster, "apply", "--server-side", "--dry-run=server", "--field-manager=e2e",
        "-f", "-", stdin=manifests, check=check,
    )  # fmt: skip
    return code, out + err


async def test_the_monitors_and_the_rule_pass_the_real_servers_schema(
    cluster: TestCluster,
) -> None:
    await install(cluster)  # the modelpool-system namespace
    await install_prometheus_operator_crds(cluster)
    _, rendered, _ = await kubectl(cluster, "kustomize", str(MONITORING))
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert sorted(doc["kind"] for doc in documents) == sorted(
        ["ServiceMonitor", "PodMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"]
    )
    _, out = await dry_run(cluster, rendered)
    for doc in documents:
        group = doc["apiVersion"].rpartition("/")[0]
        kind = f"{doc['kind'].lower()}.{group}" if group else doc["kind"].lower()
        assert f"{kind}/{doc['metadata']['name']} serverside-applied (server dry run)" in out, out


async def test_a_mistyped_monitor_is_refused_by_the_schema(cluster: TestCluster) -> None:
    await install(cluster)
    await install_prometheus_operator_crds(cluster)
    monitor = yaml.safe_load((MONITORING / "podmonitor-members.yaml").read_text())
    monitor["spec"]["namespaceSelector"]["any"] = "yes"
    code, out = await dry_run(cluster, yaml.safe_dump(monitor), check=False)
    assert code != 0
    assert "spec.namespaceSelector.any" in out, out
