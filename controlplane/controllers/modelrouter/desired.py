"""What a ModelRouter wants: its six children, as server-side apply bodies.

Kept apart from the status rules and the reconciler because these are pure functions of the
router object, and the unit tests (``tests/unit/test_modelrouter_desired.py``) check them as such.

For each ModelRouter ``R`` in namespace ``NS``, every child carries a controller
``ownerReference`` to the router (``blockOwnerDeletion``: deletion cascades through the garbage
collector) and the labels of :func:`child_labels` (``app.kubernetes.io/managed-by:
modelpool-operator`` among them, which the informers of the RBAC kinds filter on, and
``app.kubernetes.io/component: router-proxy``, by which the proxies' PodMonitor selects them):

* ServiceAccount ``R-proxy``: the identity of the proxy pods;
* Role ``R-activation`` with exactly :data:`~controlplane.controllers.rbac.ROUTER_PROXY_RULES`
  (rendered compacted, one rule per resource) and RoleBinding ``R-activation`` to the
  ServiceAccount;
* Deployment ``R-proxy``: ``spec.proxy.replicas`` as is (no replica pin: replicas elect one swap
  driver per pool through a Lease), ``spec.proxy.image``, ``router-proxy --router R --namespace
  NS``; traffic, ``/healthz``, ``/readyz`` and ``/metrics`` on ``http`` (:data:`PROXY_PORT`,
  the proxy's default bind address), hardened like the operator; with ``spec.auth.apiKeySecret``,
  that Secret as a read-only volume at :data:`API_KEYS_DIR` and ``--api-keys-dir`` pointing there;
* Service ``R``: ClusterIP, port 80 to ``http``. ``status.endpoint`` is ``http://R.NS.svc``;
* PodDisruptionBudget ``R-proxy``: one replica evicted at a time.

A proxy stops without cutting what it relays (:mod:`controlplane.router.drain`): the Deployment
rolls one new replica in before one old one stops (:data:`ROLLOUT_STRATEGY`), the pod's grace
period is ``spec.proxy.terminationGracePeriodSeconds`` and the proxy is told it
(``--termination-grace-period``), so it knows how long its streams may still take.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from controlplane.api.v1alpha1.meta import API_VERSION
from controlplane.api.v1alpha1.modelrouter import (
    DEFAULT_PROXY_TERMINATION_GRACE_SECONDS,
    MIN_PROXY_REPLICAS,
    ModelRouter,
)
from controlplane.controllers.children import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    UNHEALTHY_POD_EVICTION_POLICY,
    resource_requirements,
    with_spec_hash,
)
from controlplane.controllers.rbac import ROUTER_PROXY_RULES
from controlplane.runtime.rbac import compact

ROUTER_LABEL: Final = "inference.modelpool.dev/modelrouter"
PROXY_NAME: Final = "router-proxy"

PROXY_SUFFIX: Final = "-proxy"
ACTIVATION_SUFFIX: Final = "-activation"
CONTAINER_NAME: Final = "proxy"
#: The proxy's port: OpenAI-compatible traffic, and also ``/healthz``, ``/readyz`` and
#: ``/metrics`` (the router-proxy serves all of them on its one bind address, default
#: ``0.0.0.0:8000``). The Service's port 80 targets it by name.
PROXY_PORT_NAME: Final = "http"
PROXY_PORT: Final = 8000
#: Where the probes go: the same port, by name.
PROBE_PORT_NAME: Final = PROXY_PORT_NAME
SERVICE_PORT: Final = 80
#: The root filesystem is read-only: the preflight's verdict cache goes to the tmp emptyDir.
TMP_VOLUME: Final = "tmp"
TMP_SIZE_LIMIT: Final = "64Mi"
CACHE_HOME: Final = "/tmp/cache"
#: ``spec.auth.apiKeySecret`` is mounted here, read-only (the kubelet keeps it up to date), and
#: the proxy told so with ``--api-keys-dir``: the operator itself never reads the Secret.
API_KEYS_VOLUME: Final = "api-keys"
API_KEYS_DIR: Final = "/etc/modelpool/api-keys"
#: The operator image's unprivileged user.
RUN_AS_USER: Final = 65532
#: Used when ``spec.proxy.resources`` is not given.
DEFAULT_RESOURCES: Final = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}
#: The rollout: a new replica is Ready before an old one is told to stop, one at a time, so a
#: rollout never takes every replica at once (a 1-replica router included).
ROLLOUT_STRATEGY: Final = {
    "type": "RollingUpdate",
    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
}
#: The PodDisruptionBudget's bound: an eviction (a node drain) takes one replica at a time. With
#: one replica that one may still be evicted: a ``minAvailable: 1`` would hold every drain of its
#: node forever; the pod drains itself instead (its streams relayed whole, its held requests
#: answered 503 with a Retry-After) and a router that must never be without a replica runs two.
DISRUPTION_MAX_UNAVAILABLE: Final = 1
#: The readiness probe: every 2 s, 2 failures, so a stopping replica (its ``/readyz`` 503 from
#: SIGTERM) turns the EndpointSlice's ``serving`` false within its 5 s endpoint-propagation delay,
#: while one slow answer does not take a busy replica out.
READINESS_PERIOD_SECONDS: Final = 2
READINESS_FAILURE_THRESHOLD: Final = 2
REVISION_HISTORY_LIMIT: Final = 2
PROGRESS_DEADLINE_SECONDS: Final = 600


def proxy_name(router: str) -> str:
    """The ServiceAccount's and the Deployment's name."""
    return f"{router}{PROXY_SUFFIX}"


def activation_name(router: str) -> str:
    """The Role's and the RoleBinding's name."""
    return f"{router}{ACTIVATION_SUFFIX}"


def selector_labels(router: str) -> dict[str, str]:
    return {ROUTER_LABEL: router}


def child_labels(router: str) -> dict[str, str]:
    return {
        NAME_LABEL: PROXY_NAME,
        INSTANCE_LABEL: router,
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: PROXY_NAME,
        ROUTER_LABEL: router,
    }


def endpoint(router: ModelRouter) -> str:
    return f"http://{router.name}.{router.namespace}.svc"


def owner_reference(router: ModelRouter) -> dict[str, Any]:
    if not router.metadata.uid:
        raise ValueError(f"ModelRouter {router.name} has no uid (it was never stored)")
    return {
        "apiVersion": API_VERSION,
        "kind": ModelRouter.KIND,
        "name": router.name,
        "uid": router.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(router: ModelRouter, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": router.namespace,
        "labels": child_labels(router.name or ""),
        "ownerReferences": [owner_reference(router)],
    }


def activation_rules() -> list[dict[str, Any]]:
    """The activation Role's rules: :data:`ROUTER_PROXY_RULES`, one rule per resource."""
    return [rule.to_manifest() for rule in compact(ROUTER_PROXY_RULES)]


def desired_service_account(router: ModelRouter) -> dict[str, Any]:
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _metadata(router, proxy_name(router.name or "")),
        }
    )


def desired_role(router: ModelRouter) -> dict[str, Any]:
    return with_spec_hash(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(router, activation_name(router.name or "")),
            "rules": activation_rules(),
        }
    )


def desired_role_binding(router: ModelRouter) -> dict[str, Any]:
    name = router.name or ""
    return with_spec_hash(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(router, activation_name(name)),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": activation_name(name),
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": proxy_name(name), "namespace": router.namespace}
            ],
        }
    )


def api_key_secret(router: ModelRouter) -> str | None:
    """The Secret of the router's API keys, None when it asks for none."""
    auth = router.spec.auth
    secret = auth.api_key_secret if auth is not None else None
    return secret.name if secret is not None and secret.name else None


def termination_grace_seconds(router: ModelRouter) -> int:
    """``spec.proxy.terminationGracePeriodSeconds``, its default when unset (an object stored
    before the field existed): the pod's grace period and the proxy's own budget."""
    proxy = router.spec.proxy
    grace = proxy.termination_grace_period_seconds if proxy is not None else None
    return grace if grace is not None else DEFAULT_PROXY_TERMINATION_GRACE_SECONDS


def proxy_args(router: ModelRouter) -> list[str]:
    args = [PROXY_NAME, "--router", router.name or "", "--namespace", router.namespace or ""]
    args.append(f"--termination-grace-period={termination_grace_seconds(router)}")
    if api_key_secret(router) is not None:
        args.append(f"--api-keys-dir={API_KEYS_DIR}")
    return args


def _volumes(router: ModelRouter) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts: the tmp emptyDir, and the API keys'
    Secret when the router names one. The Secret is not ``optional``: a router whose Secret is
    missing has no proxy serving (the kubelet's FailedMount), never an open one."""
    volumes: list[dict[str, Any]] = [
        {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}
    ]
    mounts: list[dict[str, Any]] = [{"name": TMP_VOLUME, "mountPath": "/tmp"}]
    if (secret := api_key_secret(router)) is not None:
        volumes.append({"name": API_KEYS_VOLUME, "secret": {"secretName": secret}})
        mounts.append({"name": API_KEYS_VOLUME, "mountPath": API_KEYS_DIR, "readOnly": True})
    return volumes, mounts


def desired_replicas(router: ModelRouter) -> int:
    proxy = router.spec.proxy
    return proxy.replicas if proxy is not None and proxy.replicas else MIN_PROXY_REPLICAS


def _resources(router: ModelRouter) -> dict[str, Any]:
    wanted = router.spec.proxy.resources if router.spec.proxy is not None else None
    if wanted is None or not (wanted.limits or wanted.requests):
        return {kind: dict(values) for kind, values in DEFAULT_RESOURCES.items()}
    return resource_requirements(wanted.limits, wanted.requests)


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _probe(path: str, initial_delay: int, period: int, failures: int = 3) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PROBE_PORT_NAME},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def desired_deployment(router: ModelRouter, default_image: str) -> dict[str, Any]:
    """The router-proxy Deployment, as a server-side apply body; its image is the router's
    ``spec.proxy.image``, else ``default_image`` (the operator's own)."""
    name = router.name or ""
    image = (router.spec.proxy.image if router.spec.proxy is not None else None) or default_image
    volumes, mounts = _volumes(router)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "args": proxy_args(router),
        "env": [
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
            {"name": "XDG_CACHE_HOME", "value": CACHE_HOME},
        ],
        "ports": [
            {"name": PROXY_PORT_NAME, "containerPort": PROXY_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": _probe("/healthz", 10, 20),
        "readinessProbe": _probe(
            "/readyz", 5, READINESS_PERIOD_SECONDS, READINESS_FAILURE_THRESHOLD
        ),
        "resources": _resources(router),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    return with_spec_hash(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(router, proxy_name(name)),
            "spec": {
                "replicas": desired_replicas(router),
                "selector": {"matchLabels": selector_labels(name)},
                "strategy": copy.deepcopy(ROLLOUT_STRATEGY),
                "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
                "revisionHistoryLimit": REVISION_HISTORY_LIMIT,
                "template": {
                    "metadata": {"labels": child_labels(name)},
                    "spec": {
                        "serviceAccountName": proxy_name(name),
                        "automountServiceAccountToken": True,
                        "terminationGracePeriodSeconds": termination_grace_seconds(router),
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": RUN_AS_USER,
                            "runAsGroup": RUN_AS_USER,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                        "volumes": volumes,
                    },
                },
            },
        }
    )


def desired_disruption_budget(router: ModelRouter) -> dict[str, Any]:
    """The proxies' PodDisruptionBudget (``R-proxy``), as a server-side apply body: evictions
    take one replica at a time (:data:`DISRUPTION_MAX_UNAVAILABLE` says why not fewer)."""
    name = router.name or ""
    return with_spec_hash(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _metadata(router, proxy_name(name)),
            "spec": {
                "selector": {"matchLabels": selector_labels(name)},
                "maxUnavailable": DISRUPTION_MAX_UNAVAILABLE,
                "unhealthyPodEvictionPolicy": UNHEALTHY_POD_EVICTION_POLICY,
            },
        }
    )


def desired_service(router: ModelRouter) -> dict[str, Any]:
    """The ClusterIP Service in front of the proxy, as a server-side apply body."""
    name = router.name or ""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(router, name),
            "spec": {
                "type": "ClusterIP",
                "selector": selector_labels(name),
                "ports": [
                    {
                        "name": PROXY_PORT_NAME,
                        "port": SERVICE_PORT,
                        "targetPort": PROXY_PORT_NAME,
                        "protocol": "TCP",
                    }
                ],
            },
        }
    )
