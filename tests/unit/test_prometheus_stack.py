"""The kind tier's real Prometheus, as objects: what the test applies selects only our monitors,
binds each account only its own role, and reads Prometheus' answers strictly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.clusters import MonitoringImages
from tests.e2e.prometheusstack import (
    MONITORS_NAMESPACE,
    SELECTOR_LABEL,
    Stack,
    api_path,
    labelled_monitors,
    operator_objects,
    prometheus_objects,
    vector,
)

IMAGES = MonitoringImages(
    prometheus="modelpool.dev/prometheus:v3.16.0-0123456789ab",
    operator="modelpool.dev/prometheus-operator:v0.93.1-0123456789ab",
    config_reloader="modelpool.dev/prometheus-config-reloader:v0.93.1-ba9876543210",
    crds="/cache/crds/prometheus-operator-v0.93.1",
)
STACK = Stack("monitoring-e2e", IMAGES)
REPO = Path(__file__).resolve().parents[2]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def test_the_prometheus_version_is_the_release_its_image_is_tagged_with() -> None:
    assert STACK.version == "v3.16.0"
    untagged = MonitoringImages("modelpool.dev/prometheus:latest", "o:v1-x", "r:v1-x", "/crds")
    with pytest.raises(ValueError, match="not tagged v<release>-<hash>"):
        _ = Stack("x", untagged).version


def test_each_account_is_bound_to_its_own_cluster_role_and_nothing_is_a_wildcard() -> None:
    objects = operator_objects(STACK)
    assert by_kind(objects, "Namespace")[0]["metadata"]["name"] == "monitoring-e2e"
    accounts = {obj["metadata"]["name"] for obj in by_kind(objects, "ServiceAccount")}
    assert accounts == {"prometheus-operator", "prometheus"}
    roles = {obj["metadata"]["name"]: obj["rules"] for obj in by_kind(objects, "ClusterRole")}
    for binding in by_kind(objects, "ClusterRoleBinding"):
        name = binding["metadata"]["name"]
        assert binding["roleRef"]["name"] == name
        assert name in roles
        (subject,) = binding["subjects"]
        assert name == f"monitoring-e2e-{subject['name']}"
        assert subject["namespace"] == "monitoring-e2e"
    for rules in roles.values():
        for rule in rules:
            assert "*" not in rule["verbs"]
            assert "*" not in rule["resources"]
    # Prometheus only reads what its service discovery lists.
    prometheus_verbs = {
        verb for rule in roles["monitoring-e2e-prometheus"] for verb in rule["verbs"]
    }
    assert prometheus_verbs == {"get", "list", "watch"}


def test_the_operator_runs_the_reloader_built_here_for_its_own_namespace_only() -> None:
    (deployment,) = by_kind(operator_objects(STACK), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGES.operator
    assert container["imagePullPolicy"] == "Never"
    assert f"--prometheus-config-reloader={IMAGES.config_reloader}" in container["args"]
    assert "--prometheus-instance-namespaces=monitoring-e2e" in container["args"]
    assert pod["serviceAccountName"] == "prometheus-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_prometheus_selects_monitors_and_rules_by_our_label_in_the_operators_namespace() -> (
    None
):
    (prometheus,) = prometheus_objects(STACK, scrape_interval="2s")
    spec = prometheus["spec"]
    assert spec["image"] == IMAGES.prometheus
    assert spec["version"] == "v3.16.0"
    assert spec["scrapeInterval"] == spec["evaluationInterval"] == "2s"
    assert spec["serviceAccountName"] == "prometheus"
    for kind in ("serviceMonitor", "podMonitor", "rule"):
        assert spec[f"{kind}Selector"] == {"matchLabels": {SELECTOR_LABEL: "monitoring-e2e"}}
        assert spec[f"{kind}NamespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": MONITORS_NAMESPACE}
        }
    # Nothing else is selected: no probes, no scrape configs (a nil selector selects none).
    assert "probeSelector" not in spec
    assert "scrapeConfigSelector" not in spec


def test_the_overlay_labels_the_monitors_metadata_not_their_selectors() -> None:
    overlay = yaml.safe_load(labelled_monitors(STACK, "/repo/manifests/monitoring"))
    assert overlay["kind"] == "Kustomization"
    assert overlay["resources"] == ["/repo/manifests/monitoring"]
    (labels,) = overlay["labels"]
    assert labels == {
        "pairs": {SELECTOR_LABEL: "monitoring-e2e"},
        "includeSelectors": False,
        "includeTemplates": False,
    }


def test_the_overlay_replaces_every_monitors_own_interval_when_asked() -> None:
    assert "patches" not in yaml.safe_load(labelled_monitors(STACK, "/m"))
    overlay = yaml.safe_load(labelled_monitors(STACK, "/m", interval="5s"))
    by_target = {
        patch["target"]["kind"]: yaml.safe_load(patch["patch"]) for patch in overlay["patches"]
    }
    monitors = [
        doc
        for path in sorted((REPO / "manifests" / "monitoring").glob("*monitor*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] in ("ServiceMonitor", "PodMonitor")
    ]
    assert {doc["kind"] for doc in monitors} == set(by_target)
    for doc in monitors:
        (operation,) = by_target[doc["kind"]]
        assert (operation["op"], operation["value"]) == ("replace", "5s")
        # The path names the field the monitor has (a replace of a missing one fails kustomize).
        *parents, field = operation["path"].strip("/").split("/")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert node[field] == "30s", (doc["metadata"]["name"], operation["path"])


def test_the_api_is_reached_through_the_governing_services_web_port() -> None:
    assert api_path(STACK, "/api/v1/query?query=up") == (
        "/api/v1/namespaces/monitoring-e2e/services/prometheus-operated:web/proxy"
        "/api/v1/query?query=up"
    )


def test_a_vector_answer_is_read_and_anything_else_is_refused() -> None:
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"job": "modelpool-operator"}, "value": [1.5, "1"]}],
        },
    }
    assert vector(answer) == [({"job": "modelpool-operator"}, 1.0)]
    with pytest.raises(AssertionError):
        vector({"status": "error", "error": "parse error"})
    with pytest.raises(AssertionError):
        vector({"status": "success", "data": {"resultType": "matrix", "result": []}})
