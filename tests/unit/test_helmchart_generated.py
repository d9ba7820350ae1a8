"""The chart's generated templates (CRDs, RBAC) are what the manifests render today, and the
generator refuses what Helm would evaluate instead of copying."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controlplane.helmchart import (
    crd_template,
    main,
    monitor_template,
    rbac_template,
    rendered_templates,
)

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
CHART = REPO / "charts" / "modelpool"


def test_the_committed_chart_templates_are_what_the_manifests_render() -> None:
    rendered = rendered_templates(MANIFESTS)
    assert main([str(MANIFESTS), str(CHART), "--check"]) == 0, "run `make manifests`"
    folders = ("crds", "rbac", "monitoring", "network-policy")
    committed = {
        str(path.relative_to(CHART))
        for folder in folders
        for path in (CHART / "templates" / folder).glob("*.yaml")
    }
    committed |= {str(path.relative_to(CHART)) for path in (CHART / "dashboards").glob("*")}
    assert committed == set(rendered), "a generated file with no manifest behind it"
    assert {name.split("/")[1] for name in rendered if name.startswith("templates/")} == set(
        folders
    )
    assert len([n for n in rendered if n.startswith("templates/crds/")]) == 3


def test_check_reports_a_template_left_behind(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    assert main([str(MANIFESTS), str(chart)]) == 0
    assert main([str(MANIFESTS), str(chart), "--check"]) == 0
    stale = chart / "templates" / "rbac" / "cluster_role.yaml"
    stale.write_text(stale.read_text().replace("- watch\n", "", 1))
    assert main([str(MANIFESTS), str(chart), "--check"]) == 1


CRD = """# a comment the chart drops
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.dev
  labels:
    app.kubernetes.io/part-of: modelpool
spec:
  group: example.dev
"""


def _without_actions(template: str) -> str:
    """The template as YAML with its Helm actions' lines taken out (both branches kept)."""
    return "\n".join(line for line in template.splitlines() if "{{" not in line)


def test_a_crd_is_installed_only_when_asked_and_kept_on_uninstall_when_asked() -> None:
    out = crd_template(CRD, Path("things.yaml"))
    lines = out.splitlines()
    assert lines[2] == "{{- if .Values.crds.install }}"
    assert lines[-1] == "{{- end }}"
    assert "# a comment" not in out
    doc = yaml.safe_load(_without_actions(out))
    assert doc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert doc["metadata"]["name"] == "things.example.dev"
    assert doc["metadata"]["labels"] == {"app.kubernetes.io/part-of": "modelpool"}
    assert '    {{- include "modelpool.helmLabels" . | nindent 4 }}' in lines
    keep = lines.index("  {{- if .Values.crds.keep }}")
    assert lines[keep - 1] == "metadata:"


def test_a_monitor_is_switched_labelled_and_keeps_the_alerts_own_templates() -> None:
    text = (
        "kind: PrometheusRule\nmetadata:\n  name: r\n  namespace: modelpool-system\n"
        "  labels:\n    a: b\nspec:\n  summary: '{{ $labels.pool }} is down'\n"
    )
    out = monitor_template(text, Path("monitoring/rule.yaml"), "prometheusRule")
    assert out.splitlines()[2] == "{{- if .Values.monitoring.prometheusRule.enabled }}"
    assert "    {{- with .Values.monitoring.labels }}\n" in out
    assert """'{{ "{{" }} $labels.pool }} is down'""" in out
    assert "namespace: {{ .Release.Namespace }}\n" in out
    with pytest.raises(ValueError, match=r"no metadata\.labels"):
        monitor_template("kind: X\nmetadata:\n  name: r\n", Path("x.yaml"), "x")


def test_rbac_names_the_release_namespace() -> None:
    text = "kind: ServiceAccount\nmetadata:\n  name: op\n  namespace: modelpool-system\n"
    with pytest.raises(ValueError, match=r"no metadata\.labels to add the release's"):
        rbac_template(text, Path("sa.yaml"))
    out = rbac_template(text + "  labels:\n    a: b\n", Path("sa.yaml"))
    assert "namespace: {{ .Release.Namespace }}\n" in out
    assert "modelpool-system" not in out
    assert '  labels:\n    {{- include "modelpool.helmLabels" . | nindent 4 }}\n    a: b' in out


@pytest.mark.parametrize("render", [crd_template, rbac_template])
def test_a_manifest_helm_would_evaluate_is_refused(render: object) -> None:
    assert callable(render)
    with pytest.raises(ValueError, match=r"x\.yaml contains '\{\{'"):
        render(CRD.replace("example.dev\n", "{{ .oops }}\n"), Path("x.yaml"))
