"""The Helm chart (charts/modelpool): it lints, it renders what kustomize installs, every values
file renders objects the real API server accepts (a server-side dry run, so the server's own
OpenAPI and the CRDs' schemas judge them), its RBAC is enough for the code and no more, and a value
the operator would not take is refused by the chart's schema, naming the value.

The chart's CRDs and RBAC are generated from the manifests (controlplane/helmchart.py, checked by
tests/unit/test_helmchart_generated.py); what is hand-written here is compared with kustomize.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from controlplane.cli import build_parser
from tests.e2e.clusters import TestCluster
from tests.e2e.helm import CHART, CI_VALUES, HELM_ONLY_LABELS, documents, helm, template
from tests.e2e.kubectl import MANIFESTS, kubectl
from tests.e2e.test_monitoring_manifests import install_prometheus_operator_crds

# Marked here, not only by conftest after collection: anyio must see the mark while pytest
# parametrizes, or the tables' parameters are lost.
pytestmark = pytest.mark.anyio

#: Every monitoring switch on (the monitors, the rule, the dashboard).
ALL_MONITORING = tuple(
    f"monitoring.{switch}.enabled=true"
    for switch in ("serviceMonitor", "podMonitors", "prometheusRule", "dashboard")
)


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda p: p.stem)
async def test_the_chart_lints_strictly_under_each_values_file(values_file: Path) -> None:
    _, out, err = await helm("lint", "--strict", str(CHART), "--values", str(values_file))
    assert "1 chart(s) linted, 0 chart(s) failed" in out + err


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def _without_helm_marks(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without what only Helm adds: its labels, and the CRDs' keep annotation."""
    doc = copy.deepcopy(doc)
    for holder in (
        doc["metadata"],
        ((doc.get("spec") or {}).get("template") or {}).get("metadata"),
    ):
        if not holder:
            continue
        for label in HELM_ONLY_LABELS:
            (holder.get("labels") or {}).pop(label, None)
        annotations = holder.get("annotations") or {}
        annotations.pop("helm.sh/resource-policy", None)
        if not annotations:
            holder.pop("annotations", None)
    return doc


async def _kustomize(cluster: TestCluster, *folders: str) -> dict[tuple[str, str], Any]:
    found: dict[tuple[str, str], Any] = {}
    for folder in folders:
        _, rendered, _ = await kubectl(cluster, "kustomize", str(MANIFESTS / folder))
        found.update((_key(d), d) for d in documents(rendered))
    return found


async def test_with_its_defaults_the_chart_installs_what_kustomize_installs(
    cluster: TestCluster,
) -> None:
    chart = {_key(d): d for d in documents(await template("modelpool-system"))}
    kustomize = await _kustomize(cluster, "default")
    # The release's namespace is Helm's to create (`helm install --create-namespace`); the
    # chart does not own it, so uninstalling never deletes a namespace full of users' objects.
    namespace = kustomize.pop(("Namespace", "modelpool-system"))
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert sorted(chart) == sorted(kustomize)
    for key, doc in chart.items():
        assert _without_helm_marks(doc) == kustomize[key], f"{key} differs from kustomize's"
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", key


async def test_with_monitoring_on_the_chart_adds_what_kustomize_monitoring_has(
    cluster: TestCluster,
) -> None:
    sets = (*ALL_MONITORING, "monitoring.labels.release=prom")
    chart = {_key(d): d for d in documents(await template("modelpool-system", sets=sets))}
    kustomize = await _kustomize(cluster, "default", "monitoring")
    kustomize.pop(("Namespace", "modelpool-system"))
    assert sorted(chart) == sorted(kustomize)
    for key, doc in chart.items():
        labels = doc["metadata"].get("labels") or {}
        if key[0] in ("ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"):
            assert labels.pop("release") == "prom", key
        assert _without_helm_marks(doc) == kustomize[key], f"{key} differs from kustomize's"


async def _server_dry_run(cluster: TestCluster, rendered: str) -> list[str]:
    """The objects the API server accepted in a server-side dry run of ``rendered``."""
    _, out, _ = await kubectl(
        cluster, "apply", "--server-side", "--dry-run=server", "--force-conflicts",
        "--field-manager=helm-chart-test", "-f", "-", stdin=rendered,
    )  # fmt: skip
    return [line for line in out.splitlines() if line.endswith("(server dry run)")]


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda p: p.stem)
async def test_each_values_file_renders_objects_the_api_server_accepts(
    cluster: TestCluster, namespace: str, values_file: Path, tmp_path: Path
) -> None:
    rendered = await template(namespace, values_file)
    objects = documents(rendered)
    if any(doc["apiVersion"].startswith("monitoring.coreos.com/") for doc in objects):
        await install_prometheus_operator_crds(cluster)
    accepted = await _server_dry_run(cluster, rendered)
    assert len(accepted) == len(objects), "\n".join(accepted)
    assert all(doc["metadata"].get("namespace") in (None, namespace) for doc in objects), (
        "an object outside the release's namespace"
    )
    # The chart's RBAC is enough for the code and no more (the check `make check-rbac` runs, on
    # the operator's namespace, the one the check knows).
    (tmp_path / "chart.yaml").write_text(await template("modelpool-system", values_file))
    done = await anyio.run_process(
        [sys.executable, "-m", "controlplane.rbacmanifests", "check", str(tmp_path / "chart.yaml")],
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()


def _operator(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in objects if d["kind"] == "Deployment"]
    return deployment


async def test_values_reach_the_operator_as_flags_env_and_scheduling() -> None:
    values = CHART / "ci" / "production-values.yaml"
    given = yaml.safe_load(values.read_text())
    objects = documents(await template("ops", values))
    deployment = _operator(objects)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == given["replicaCount"]
    assert container["image"] == f"{given['image']['repository']}:{given['image']['tag']}"
    election = given["leaderElection"]
    assert container["args"] == [
        "operator",
        f"--leader-elect-lease-duration={election['leaseDuration']}",
        f"--leader-elect-renew-deadline={election['renewDeadline']}",
        f"--leader-elect-retry-period={election['retryPeriod']}",
        f"--log-level={given['logLevel']}",
        f"--log-format={given['logFormat']}",
        *(
            f"--member-network-policy-allow-namespace={n}"
            for n in given["networkPolicy"]["allowNamespaces"]
        ),
        *given["extraArgs"],
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == given["tracing"]["endpoint"]
    assert env["OTEL_SERVICE_NAME"] == given["tracing"]["serviceName"]
    assert container["resources"] == given["resources"]
    for field in (
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
        "imagePullSecrets",
    ):
        assert pod[field] == given[field], field
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "platform"
    crds = [d for d in objects if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 3
    assert all(d["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for d in crds)

    # The operator takes these flags: its own parser accepts the rendered command line.
    parsed = build_parser(only="operator").parse_args(container["args"])
    assert parsed.leader_elect_lease_duration == election["leaseDuration"]


async def test_crds_and_network_policies_can_be_left_to_others() -> None:
    objects = documents(await template("ops", CHART / "ci" / "without-crds-values.yaml"))
    assert not [d for d in objects if d["kind"] == "CustomResourceDefinition"]
    assert (
        "--no-leader-elect"
        in _operator(objects)["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    objects = documents(await template("ops", sets=("crds.keep=false",)))
    crds = [d for d in objects if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 3
    assert not any(d["metadata"].get("annotations") for d in crds)


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (("logFormat=xml",), "logFormat"),
        (("replicaCount=-1",), "replicaCount"),
        (("imag.tag=latest",), "imag"),
        (("leaderElection.leaseDuration=0",), "leaseDuration"),
        (("tracing.endpoint=jaeger:4318",), "endpoint"),
        (("image.pullPolicy=Sometimes",), "pullPolicy"),
        (("extraArgs[0]=fetch-env",), "extraArgs"),
        (("leaderElection.enabled=false", "replicaCount=2"), "leaderElection.enabled"),
    ],
)
async def test_a_value_the_operator_would_not_take_is_refused_by_name(
    sets: tuple[str, ...], named: str
) -> None:
    args = ["template", "modelpool", str(CHART)]
    for item in sets:
        args += ["--set", item]
    code, out, err = await helm(*args, check=False)
    assert code != 0, out
    assert named in err, err
