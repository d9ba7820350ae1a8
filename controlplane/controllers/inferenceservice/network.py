"""Who may reach a member's server: the NetworkPolicy each InferenceService owns (docs/network.md).

llama-server answers everything on one port: inference, ``/props``, ``/metrics``, and ``/slots``
with its save, restore and erase actions. A member's Service would otherwise let every pod of the
cluster call all of it. So, per InferenceService, the operator writes a ``networking.k8s.io/v1``
NetworkPolicy of the same name, owned by it like its Service (deleting the InferenceService
cascades), that selects the member's pods and admits TCP on the member's port from:

* the router-proxies of the member's namespace (a router routes only to members of its own
  namespace): pods labelled ``app.kubernetes.io/name: router-proxy`` and managed by the
  operator. The proxy forwards only the OpenAI paths (``PROXIED_PATHS`` in
  :mod:`controlplane.router.app`), so through it nobody reaches ``/slots`` or ``/props``;
* the operator's pods (its idle probe on ``/slots``, the KV cache's save and restore): pods with
  :attr:`MemberNetworkPolicy.operator_pod_labels` in the namespace named
  :attr:`MemberNetworkPolicy.operator_namespace` (by the ``kubernetes.io/metadata.name`` label the
  API server sets on every namespace);
* every pod of each namespace in :attr:`MemberNetworkPolicy.allow_namespaces` (a metrics scraper's,
  for example), opted into by the operator's administrator.

Everything else is refused: once a policy selects a pod for ``Ingress``, the pod admits only what
some policy allows. A user who needs more adds a NetworkPolicy of their own (policies add up).

Pure: the reconciler applies what :func:`desired_network_policy` returns, as it does the Service,
only when the cached one differs (:func:`~controlplane.controllers.children.needs_apply`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.children import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    ROUTER_PROXY_NAME,
    with_spec_hash,
)
from controlplane.controllers.inferenceservice.desired import (
    PORT_NAME,
    child_labels,
    owner_reference,
    selector_labels,
    server_port,
)
from controlplane.controllers.rbac import OPERATOR_NAMESPACE

#: The label the API server sets on every namespace to its name (Kubernetes 1.22 and later).
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
#: The operator's pod labels in ``manifests/operator/deployment.yaml`` (its selector).
DEFAULT_OPERATOR_POD_LABELS: Final = (("app.kubernetes.io/name", "modelpool-operator"),)
#: The router-proxy pods' labels (``controllers/modelrouter/desired.py``): any router of the
#: member's namespace, since which routers name a member (directly or through a pool) changes
#: without the member changing.
PROXY_POD_LABELS: Final = {NAME_LABEL: ROUTER_PROXY_NAME, MANAGED_BY_LABEL: MANAGED_BY}

#: A namespace's name: an RFC 1123 label.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: A label key (optional DNS-subdomain prefix and a name) and a label value.
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"({_LABEL_NAME})?")


@dataclass(frozen=True)
class MemberNetworkPolicy:
    """What the operator's administrator decides about members' NetworkPolicies (its flags)."""

    #: Whether the operator writes them (``--member-network-policies``); when off, it deletes the
    #: ones it wrote.
    enabled: bool = True
    #: The operator's own namespace, whose pods matching :attr:`operator_pod_labels` may probe
    #: members (``--namespace``, ``$POD_NAMESPACE``).
    operator_namespace: str = OPERATOR_NAMESPACE
    #: The labels the operator's pods carry (``--member-network-policy-operator-labels``).
    operator_pod_labels: tuple[tuple[str, str], ...] = DEFAULT_OPERATOR_POD_LABELS
    #: Namespaces every pod of which may reach members' ports, e.g. a Prometheus's
    #: (``--member-network-policy-allow-namespace``, repeatable).
    allow_namespaces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for namespace in (self.operator_namespace, *self.allow_namespaces):
            if not _NAMESPACE.fullmatch(namespace):
                raise ValueError(f"{namespace!r} is not a namespace name (an RFC 1123 label)")
        if not self.operator_pod_labels:
            raise ValueError("the operator's pod labels are empty: they would select every pod")
        for key, value in self.operator_pod_labels:
            check_label(key, value)


def check_label(key: str, value: str) -> None:
    """Raise ValueError naming what is wrong when ``key=value`` is no valid label."""
    if not _LABEL_KEY.fullmatch(key) or len(key.rpartition("/")[2]) > 63:
        raise ValueError(f"{key!r} is not a label key")
    if not _LABEL_VALUE.fullmatch(value):
        raise ValueError(f"{value!r} (of label {key}) is not a label value")


def parse_labels(text: str) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE[,KEY=VALUE...]`` as label pairs; ValueError naming the bad part."""
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise ValueError(f"expected KEY=VALUE, got {part.strip()!r}")
        check_label(key, value)
        pairs.append((key, value))
    return tuple(pairs)


def _namespace(name: str) -> dict[str, Any]:
    return {"matchLabels": {NAMESPACE_NAME_LABEL: name}}


def allowed_peers(rules: MemberNetworkPolicy) -> list[dict[str, Any]]:
    """The ``from`` peers of the one ingress rule, in a fixed order (the apply body is stable)."""
    peers: list[dict[str, Any]] = [
        # No namespaceSelector: the policy's own namespace, the member's.
        {"podSelector": {"matchLabels": dict(PROXY_POD_LABELS)}},
        {
            "namespaceSelector": _namespace(rules.operator_namespace),
            "podSelector": {"matchLabels": dict(rules.operator_pod_labels)},
        },
    ]
    peers += [{"namespaceSelector": _namespace(ns)} for ns in sorted(set(rules.allow_namespaces))]
    return peers


def desired_network_policy(
    isvc: InferenceService,
    rules: MemberNetworkPolicy,
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The NetworkPolicy in front of the member's pods, as a server-side apply body; with
    ``selector``, in front of the pod its Service selects instead (a pool's slot server, on its
    named port: the server's port is the pool's, not the member's)."""
    port: int | str = PORT_NAME if selector else server_port(isvc)
    return with_spec_hash(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": isvc.name,
                "namespace": isvc.namespace,
                "labels": child_labels(isvc.name),
                "ownerReferences": [owner_reference(isvc)],
            },
            "spec": {
                "podSelector": {
                    "matchLabels": dict(selector) if selector else selector_labels(isvc.name)
                },
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": allowed_peers(rules),
                        "ports": [{"protocol": "TCP", "port": port}],
                    }
                ],
            },
        }
    )
