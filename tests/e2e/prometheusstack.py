"""A real Prometheus for the kind tier, run as users run it: prometheus-operator (its config
reloader beside it) watching a ``Prometheus`` resource, all three built here from their Go
modules (``hack/build-monitoring-images.sh``).

Pure: the objects to apply (:func:`operator_objects`, :func:`prometheus_objects`), the overlay
that labels manifests/monitoring for this Prometheus (:func:`labelled_monitors`), and readers of
Prometheus' HTTP API answers (:func:`vector`). tests/e2e/test_kind_prometheus.py applies them.

The RBAC is the least that works, cut down from prometheus-operator's own example ClusterRoles
(``example/rbac/`` in its module) to what running Prometheus takes: no Alertmanager, ThanosRuler,
PrometheusAgent, ScrapeConfig, kubelet Service, Ingress or node objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import yaml

from tests.e2e.clusters import MonitoringImages

#: The CRDs prometheus-operator needs to run a Prometheus: the monitors' and rules', the
#: Prometheus resource's, and Probe's (it watches Probes whenever it runs a Prometheus).
CRDS: Final = ("servicemonitors", "podmonitors", "prometheusrules", "probes", "prometheuses")
#: The namespace of the monitors (manifests/monitoring) and of the operator.
MONITORS_NAMESPACE: Final = "modelpool-system"
#: The label a Prometheus selects monitors and rules by, as kube-prometheus-stack's ``release``.
SELECTOR_LABEL: Final = "modelpool.dev/prometheus"
#: The Prometheus' name (its pods are ``prometheus-<name>-<ordinal>``).
PROMETHEUS_NAME: Final = "e2e"
#: The Service prometheus-operator makes for every Prometheus in a namespace, and its port's name.
GOVERNING_SERVICE: Final = "prometheus-operated"
WEB_PORT: Final = "web"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

_RBAC: Final = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Stack:
    """Where one Prometheus runs: its namespace, and the prefix of its cluster-scoped objects."""

    namespace: str
    images: MonitoringImages

    @property
    def version(self) -> str:
        """The Prometheus release its image holds, for ``spec.version`` (the operator chooses
        flags by it): hack/build-monitoring-images.sh tags ``v<release>-<binary's hash>``."""
        tag = self.images.prometheus.rpartition(":")[2]
        release = tag.partition("-")[0]
        if not re.fullmatch(r"v\d+\.\d+\.\d+", release):
            raise ValueError(f"{self.images.prometheus} is not tagged v<release>-<hash>")
        return release

    @property
    def operator_account(self) -> str:
        return "prometheus-operator"

    @property
    def prometheus_account(self) -> str:
        return "prometheus"

    def cluster_name(self, account: str) -> str:
        """A cluster-scoped object's name, unique per namespace (two stacks never share one)."""
        return f"{self.namespace}-{account}"

    @property
    def selector_value(self) -> str:
        return self.namespace


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


#: What prometheus-operator does running Prometheus: reads the Prometheus resources and the
#: monitors and rules, writes the Prometheus' status, makes its StatefulSet, its config Secret,
#: rule ConfigMaps and governing Service, deletes its pods on a rollout, reads namespaces (the
#: monitors' namespace selectors) and reports events. (StorageClasses and Endpoints it asks
#: about are optional: without them it logs a warning.)
OPERATOR_RULES: Final = (
    _rule(
        ["monitoring.coreos.com"],
        ["prometheuses", "servicemonitors", "podmonitors", "probes", "prometheusrules"],
        ["get", "list", "watch"],
    ),
    _rule(["monitoring.coreos.com"], ["prometheuses", "prometheuses/finalizers"], ["patch"]),
    _rule(["monitoring.coreos.com"], ["prometheuses/finalizers"], ["update"]),
    _rule(
        ["monitoring.coreos.com"],
        [
            "prometheuses/status",
            "servicemonitors/status",
            "podmonitors/status",
            "probes/status",
            "prometheusrules/status",
        ],
        ["create", "update", "patch", "delete"],
    ),
    _rule(
        ["apps"],
        ["statefulsets"],
        ["get", "list", "watch", "create", "update", "patch", "delete"],
    ),
    _rule([""], ["configmaps", "secrets"], ["get", "list", "watch", "create", "update", "delete"]),
    _rule([""], ["pods"], ["list", "delete"]),
    _rule([""], ["services", "services/finalizers"], ["get", "create", "update", "delete"]),
    _rule([""], ["namespaces"], ["get", "list", "watch"]),
    _rule(["events.k8s.io"], ["events"], ["create", "patch"]),
)

#: What the Prometheus' kubernetes_sd_configs read (pods for PodMonitors, Services with their
#: EndpointSlices and Endpoints for ServiceMonitors), in every namespace.
PROMETHEUS_RULES: Final = (
    _rule([""], ["pods", "services", "endpoints"], ["get", "list", "watch"]),
    _rule(["discovery.k8s.io"], ["endpointslices"], ["get", "list", "watch"]),
)


def _account_objects(stack: Stack, account: str, rules: tuple[dict[str, Any], ...]) -> list[Any]:
    name = stack.cluster_name(account)
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": stack.namespace},
        },
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [dict(rule) for rule in rules],
        },
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": stack.namespace}],
        },
    ]


def operator_objects(stack: Stack) -> list[dict[str, Any]]:
    """The namespace, both accounts with their ClusterRoles, and prometheus-operator's
    Deployment (one replica, non-root, read-only root, the reloader image built here)."""
    labels = {"app.kubernetes.io/name": "prometheus-operator"}
    container = {
        "name": "prometheus-operator",
        "image": stack.images.operator,
        "imagePullPolicy": "Never",
        "args": [
            f"--prometheus-config-reloader={stack.images.config_reloader}",
            # Only the Prometheus resources of this namespace are its to run.
            f"--prometheus-instance-namespaces={stack.namespace}",
            # Monitors are selected only by the Prometheus' selectors: nothing unmanaged.
            "--disable-unmanaged-prometheus-configuration=true",
            "--log-level=info",
        ],
        "ports": [{"name": "http", "containerPort": 8080}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "prometheus-operator", "namespace": stack.namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": stack.operator_account,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
                    "containers": [container],
                },
            },
        },
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": stack.namespace},
        },
        *_account_objects(stack, stack.operator_account, OPERATOR_RULES),
        *_account_objects(stack, stack.prometheus_account, PROMETHEUS_RULES),
        deployment,
    ]


def prometheus_objects(stack: Stack, scrape_interval: str = "2s") -> list[dict[str, Any]]:
    """The ``Prometheus``: it selects monitors and rules by :data:`SELECTOR_LABEL` only, in
    :data:`MONITORS_NAMESPACE` only; ``scrape_interval`` is its default and its rules' evaluation
    interval (a monitor endpoint's own ``interval`` wins for its targets)."""
    by_label = {"matchLabels": {SELECTOR_LABEL: stack.selector_value}}
    in_monitors_namespace = {"matchLabels": {NAMESPACE_NAME_LABEL: MONITORS_NAMESPACE}}
    spec: dict[str, Any] = {
        "image": stack.images.prometheus,
        "version": stack.version,
        "replicas": 1,
        "serviceAccountName": stack.prometheus_account,
        "scrapeInterval": scrape_interval,
        "evaluationInterval": scrape_interval,
        "podMetadata": {"labels": {"app.kubernetes.io/name": "prometheus"}},
    }
    for kind in ("serviceMonitor", "podMonitor", "rule"):
        spec[f"{kind}Selector"] = by_label
        spec[f"{kind}NamespaceSelector"] = in_monitors_namespace
    return [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": PROMETHEUS_NAME, "namespace": stack.namespace},
            "spec": spec,
        }
    ]


#: Where each monitor kind keeps its first endpoint's scrape ``interval``.
_INTERVAL_PATHS = {
    "ServiceMonitor": "/spec/endpoints/0/interval",
    "PodMonitor": "/spec/podMetricsEndpoints/0/interval",
}


def labelled_monitors(stack: Stack, monitors: str, interval: str | None = None) -> str:
    """A kustomization over ``monitors`` (manifests/monitoring's folder, relative to the
    kustomization's: kustomize refuses an absolute one) that adds this
    Prometheus' selector label to every object's metadata (not to selectors), as a user does
    for kube-prometheus-stack's ``release`` label (manifests/monitoring/kustomization.yaml).
    ``interval`` replaces the monitors' own scrape interval (30 s), as a user's overlay would,
    so that a test waits a few seconds for a series instead of half a minute."""
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [monitors],
        "labels": [
            {
                "pairs": {SELECTOR_LABEL: stack.selector_value},
                "includeSelectors": False,
                "includeTemplates": False,
            }
        ],
    }
    if interval is not None:
        kustomization["patches"] = [
            {
                "target": {"kind": kind},
                "patch": yaml.safe_dump([{"op": "replace", "path": path, "value": interval}]),
            }
            for kind, path in _INTERVAL_PATHS.items()
        ]
    return yaml.safe_dump(kustomization, sort_keys=False)


def crd_files(folder: str) -> list[str]:
    """The files of :data:`CRDS` in ``folder`` (as the module's example/prometheus-operator-crd/
    names them)."""
    return [f"{folder}/monitoring.coreos.com_{plural}.yaml" for plural in CRDS]


def api_path(stack: Stack, path: str) -> str:
    """``path`` of the Prometheus' HTTP API through the API server's service proxy."""
    return (
        f"/api/v1/namespaces/{stack.namespace}/services/{GOVERNING_SERVICE}:{WEB_PORT}/proxy{path}"
    )


def vector(answer: dict[str, Any]) -> list[tuple[dict[str, str], float]]:
    """An instant query's answer (``/api/v1/query``) as (labels, value) pairs; AssertionError
    when Prometheus said it failed or answered something other than a vector."""
    assert answer.get("status") == "success", answer
    data = answer["data"]
    assert data["resultType"] == "vector", data
    return [(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]
