"""The monitors in manifests/monitoring select what the operator really runs, labelled as the
alert rules expect.

A monitor whose selector misses the pods, or names a port they do not have, scrapes nothing and
says nothing; an alert on a job no monitor produces never fires. So the selectors are checked
against the labels and ports of the children the controllers build (their pure ``desired``
functions) and of the operator's Service manifest, and the job labels against the rules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from controlplane.api.v1alpha1 import InferenceService, ModelRouter
from controlplane.controllers.inferenceservice.desired import (
    desired_deployment as member_deployment,
)
from controlplane.controllers.modelpool import metrics as pool_metrics
from controlplane.controllers.modelrouter.desired import (
    desired_deployment as proxy_deployment,
)
from controlplane.monitoringrules import RULES_FILE

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "monitoring"


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def member_pod() -> dict[str, Any]:
    isvc = InferenceService.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "llama", "namespace": "team-a", "uid": "u-1"},
            "spec": {"model": {"name": "llama-3-8b", "source": "/m/llama.gguf"}},
        }
    )
    template: dict[str, Any] = member_deployment(isvc)["spec"]["template"]
    return template


def proxy_pod() -> dict[str, Any]:
    router = ModelRouter.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelRouter",
            "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-2"},
            "spec": {"backends": [{"name": "gpu-0", "poolRef": {"name": "gpu-0"}}]},
        }
    )
    template: dict[str, Any] = proxy_deployment(router, "image:1")["spec"]["template"]
    return template


def port_names(pod: dict[str, Any]) -> set[str]:
    return {port["name"] for c in pod["spec"]["containers"] for port in c.get("ports", ())}


def relabeled_job(endpoint: dict[str, Any]) -> str:
    (job,) = [r["replacement"] for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
    return str(job)


def test_the_operators_service_monitor_selects_its_metrics_service_and_port() -> None:
    monitor = load(MONITORING / "servicemonitor-operator.yaml")
    service = load(REPO / "manifests" / "operator" / "metrics_service.yaml")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert "namespaceSelector" not in monitor["spec"], "the Service is in the monitor's namespace"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}


def test_the_operators_metrics_keep_their_own_namespace_label() -> None:
    """Pool metrics carry the pool's namespace; without honorLabels Prometheus would overwrite it
    with the operator's, and the rules' ``on (namespace, pool)`` joins would mix pools up."""
    joined = (pool_metrics.SWAPPING_SINCE, pool_metrics.SWAP_BUDGET, pool_metrics.DRAIN_DEFERRALS)
    # prometheus_client keeps a family's label names private; these are what the rules join on.
    assert all("namespace" in metric._labelnames for metric in joined)
    [endpoint] = load(MONITORING / "servicemonitor-operator.yaml")["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True


def test_the_proxies_pod_monitor_selects_every_router_proxy_pod_in_any_namespace() -> None:
    monitor = load(MONITORING / "podmonitor-router-proxy.yaml")
    pod = proxy_pod()
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in port_names(pod)
    assert endpoint["path"] == "/metrics"


def test_the_members_pod_monitor_selects_every_member_pod_which_serves_metrics() -> None:
    monitor = load(MONITORING / "podmonitor-members.yaml")
    pod = member_pod()
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in port_names(pod)
    [container] = pod["spec"]["containers"]
    assert "--metrics" in container["args"], "llama-server serves /metrics only with --metrics"


def test_the_monitors_do_not_select_each_others_pods() -> None:
    members = load(MONITORING / "podmonitor-members.yaml")["spec"]["selector"]["matchLabels"]
    proxies = load(MONITORING / "podmonitor-router-proxy.yaml")["spec"]["selector"]["matchLabels"]
    assert not members.items() <= proxy_pod()["metadata"]["labels"].items()
    assert not proxies.items() <= member_pod()["metadata"]["labels"].items()


def test_the_operator_down_alert_watches_the_job_the_service_monitor_sets() -> None:
    [endpoint] = load(MONITORING / "servicemonitor-operator.yaml")["spec"]["endpoints"]
    rules = load(MONITORING / RULES_FILE)
    [down] = [
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "ModelPoolOperatorDown"
    ]
    assert re.findall(r'job="([^"]+)"', down["expr"]) == [relabeled_job(endpoint)]


def test_the_kustomization_ships_every_monitor_and_the_rule() -> None:
    kustomization = load(MONITORING / "kustomization.yaml")
    shipped = set(kustomization["resources"])
    manifests = {p.name for p in MONITORING.glob("*.yaml")} - {"kustomization.yaml"}
    assert shipped == manifests
    kinds = sorted(load(MONITORING / name)["kind"] for name in shipped)
    assert kinds == ["PodMonitor", "PodMonitor", "PrometheusRule", "ServiceMonitor"]
