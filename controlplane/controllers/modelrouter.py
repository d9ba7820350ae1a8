"""The ModelRouter controller: one router-proxy Deployment, its Service, and its activation RBAC.

For each ModelRouter ``R`` in namespace ``NS`` the controller keeps five children, each with a
controller ``ownerReference`` to the router (``blockOwnerDeletion``: deletion cascades through the
garbage collector) and the labels of :func:`child_labels` (``app.kubernetes.io/managed-by:
modelpool-operator`` among them, which the informers of the RBAC kinds filter on):

* ServiceAccount ``R-proxy``: the identity of the proxy pods;
* Role ``R-activation`` with exactly :data:`~controlplane.controllers.rbac.ROUTER_PROXY_RULES`
  (rendered compacted, one rule per resource) and RoleBinding ``R-activation`` to the
  ServiceAccount. The operator writes them as itself, so the API server refuses a Role holding a
  rule the operator's ClusterRole lacks ("is attempting to grant RBAC permissions not currently
  held"). Such a 403 is reported, never retried hot: ``Available=False`` with reason
  ``ActivationRBAC`` and the server's message (which lists the rules), phase ``Failed``, a
  Warning event, and a rate-limited requeue (the workqueue's per-key exponential backoff). The
  Deployment is not written while its RBAC is refused: a proxy without it could not activate.
* Deployment ``R-proxy``: ``spec.proxy.replicas`` as is (no replica pin: replicas elect one swap
  driver per pool through a Lease), ``spec.proxy.image``, ``router-proxy --router R --namespace
  NS``; traffic, ``/healthz``, ``/readyz`` and ``/metrics`` on ``http`` (:data:`PROXY_PORT`,
  the proxy's default bind address), hardened like the operator;
* Service ``R``: ClusterIP, port 80 to ``http``. ``status.endpoint`` is ``http://R.NS.svc``.

Children are written with server-side apply as ``modelpool-operator`` only when the cached one
differs (:mod:`controlplane.controllers.children`). A Deployment or Service of those names that this
router does not control is never taken over: the router is Pending (reason ``NotOwned``).

**Phase** (first rule that matches, :func:`compute_phase`):

1. Pending: a Deployment or Service of our names is controlled by something else (``NotOwned``).
2. Failed: writing the activation Role or RoleBinding was refused (``ActivationRBAC``).
3. Provisioning: the Deployment is not in the cache yet, or its status does not describe its
   current generation (``DeploymentCreating``, ``DeploymentNotObserved``).
4. Failed: its ``Progressing`` condition is False with ``ProgressDeadlineExceeded``.
5. Ready: its ``Available`` condition is True and every backend is ready; Degraded when available
   but some backend is not (``Available`` stays True: the proxy serves the others).
6. Degraded: not Available but some replica is (under strength); Provisioning otherwise.

**BackendsReady**: True when every backend's object exists and is usable: an InferenceService
that is not ``Failed``; a ModelPool that is not ``Degraded`` (a cold pool, with no resident, is
ready: the proxy warms it on the first request). The message names the backends that are not.
InferenceServices and ModelPools are watched and mapped to the routers of their namespace that
reference them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, ModelPool, set_condition
from controlplane.api.v1alpha1.conditions import FALSE, TRUE
from controlplane.api.v1alpha1.inferenceservice import PHASE_FAILED as ISVC_PHASE_FAILED
from controlplane.api.v1alpha1.meta import API_VERSION
from controlplane.api.v1alpha1.modelpool import PHASE_DEGRADED as POOL_PHASE_DEGRADED
from controlplane.api.v1alpha1.modelrouter import (
    CONDITION_AVAILABLE,
    CONDITION_BACKENDS_READY,
    DEFAULT_PROXY_IMAGE,
    MIN_PROXY_REPLICAS,
    PHASE_DEGRADED,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_PROVISIONING,
    PHASE_READY,
    REASON_ACTIVATION_RBAC,
    ModelRouter,
    ModelRouterStatus,
)
from controlplane.controllers.children import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PROGRESS_DEADLINE_EXCEEDED,
    deployment_condition,
    foreign_child,
    needs_apply,
    progress_deadline_exceeded,
    resource_requirements,
    with_spec_hash,
)
from controlplane.controllers.rbac import ROUTER_PROXY_RULES
from controlplane.runtime.cache import NAMESPACE_INDEX
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.errors import Conflict, Forbidden, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.rbac import compact
from controlplane.runtime.resources import (
    DEPLOYMENTS,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    SERVICES,
    Resource,
)

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "modelrouter"
FIELD_MANAGER: Final = "modelpool-operator"
EVENT_REPORTER: Final = "modelpool-operator/modelrouter"
MAX_CONCURRENT_RECONCILES: Final = 2

NAME_LABEL: Final = "app.kubernetes.io/name"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
ROUTER_LABEL: Final = "inference.modelpool.dev/modelrouter"
PROXY_NAME: Final = "router-proxy"
#: What the informers of the kinds only routers create (ServiceAccounts, Roles, RoleBindings)
#: select, so their caches hold the operator's objects only.
MANAGED_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MANAGED_BY}"

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
#: The operator image's unprivileged user.
RUN_AS_USER: Final = 65532
#: Used when ``spec.proxy.resources`` is not given.
DEFAULT_RESOURCES: Final = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}
TERMINATION_GRACE_SECONDS: Final = 30
REVISION_HISTORY_LIMIT: Final = 2
PROGRESS_DEADLINE_SECONDS: Final = 600

REASON_NOT_OWNED: Final = "NotOwned"
REASON_DEPLOYMENT_CREATING: Final = "DeploymentCreating"
REASON_DEPLOYMENT_NOT_OBSERVED: Final = "DeploymentNotObserved"
REASON_PROGRESS_DEADLINE: Final = PROGRESS_DEADLINE_EXCEEDED
REASON_PROXY_AVAILABLE: Final = "ProxyAvailable"
REASON_PROXY_UNDER_STRENGTH: Final = "ProxyUnderStrength"
REASON_PROXY_UNAVAILABLE: Final = "ProxyUnavailable"
REASON_BACKENDS_READY: Final = "BackendsReady"
REASON_BACKEND_MISSING: Final = "BackendMissing"
REASON_BACKEND_NOT_READY: Final = "BackendNotReady"
#: Condition messages are capped by the API (32768); the server's refusal is kept well inside.
MAX_MESSAGE_LENGTH: Final = 4096


# -- names and what is wanted ---------------------------------------------------------------------


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


def proxy_args(router: ModelRouter) -> list[str]:
    return [PROXY_NAME, "--router", router.name or "", "--namespace", router.namespace or ""]


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


def _probe(path: str, initial_delay: int, period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PROBE_PORT_NAME},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": period,
        "timeoutSeconds": 5,
    }


def desired_deployment(router: ModelRouter) -> dict[str, Any]:
    """The router-proxy Deployment, as a server-side apply body."""
    name = router.name or ""
    image = (router.spec.proxy.image if router.spec.proxy is not None else None) or (
        DEFAULT_PROXY_IMAGE
    )
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
        "readinessProbe": _probe("/readyz", 5, 10),
        "resources": _resources(router),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": TMP_VOLUME, "mountPath": "/tmp"}],
    }
    return with_spec_hash(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(router, proxy_name(name)),
            "spec": {
                "replicas": desired_replicas(router),
                "selector": {"matchLabels": selector_labels(name)},
                "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
                "revisionHistoryLimit": REVISION_HISTORY_LIMIT,
                "template": {
                    "metadata": {"labels": child_labels(name)},
                    "spec": {
                        "serviceAccountName": proxy_name(name),
                        "automountServiceAccountToken": True,
                        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": RUN_AS_USER,
                            "runAsGroup": RUN_AS_USER,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                        "volumes": [
                            {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}
                        ],
                    },
                },
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


def activation_rbac_message(kind: str, name: str, err: Forbidden) -> str:
    """The ``ActivationRBAC`` message: which object was refused, and the server's own words
    (an escalation refusal lists the rules the operator does not hold)."""
    message = (
        f"writing the activation {kind} {name} was refused (403 {err.reason}); the operator's "
        f"ClusterRole must hold every rule it grants: {err.message}"
    )
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[: MAX_MESSAGE_LENGTH - 3] + "..."
    return message


# -- what is observed ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConditionDecision:
    status: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PhaseDecision:
    """The phase and the ``Available`` condition that goes with it."""

    phase: str
    available: ConditionDecision


def backends_ready(
    router: ModelRouter,
    inference_service: Callable[[str], Mapping[str, Any] | None],
    pool: Callable[[str], Mapping[str, Any] | None],
) -> ConditionDecision:
    """``BackendsReady``: every backend exists and is usable (see the module docstring)."""
    missing: list[str] = []
    not_ready: list[str] = []
    for backend in router.spec.backends:
        if backend.inference_service_ref is not None:
            ref, kind, lookup = (
                backend.inference_service_ref.name or "",
                "InferenceService",
                (inference_service),
            )
            bad_phase = ISVC_PHASE_FAILED
        elif backend.pool_ref is not None:
            ref, kind, lookup, bad_phase = (
                backend.pool_ref.name or "",
                "ModelPool",
                pool,
                (POOL_PHASE_DEGRADED),
            )
        else:  # the API server refuses this; say so rather than crash
            missing.append(f"{backend.name} (no reference)")
            continue
        found = lookup(ref)
        if found is None:
            missing.append(f"{backend.name} ({kind} {ref} not found)")
        elif (found.get("status") or {}).get("phase") == bad_phase:
            not_ready.append(f"{backend.name} ({kind} {ref} is {bad_phase})")
    if missing:
        return ConditionDecision(FALSE, REASON_BACKEND_MISSING, "; ".join(missing + not_ready))
    if not_ready:
        return ConditionDecision(FALSE, REASON_BACKEND_NOT_READY, "; ".join(not_ready))
    return ConditionDecision(
        TRUE, REASON_BACKENDS_READY, f"{len(router.spec.backends)} backend(s) ready"
    )


def compute_phase(
    deployment: Mapping[str, Any] | None,
    backends: ConditionDecision,
    *,
    conflict: str | None = None,
    rbac_refusal: str | None = None,
) -> PhaseDecision:
    """The phase and ``Available``, by the rules in the module docstring (first match wins)."""
    if conflict is not None:
        return PhaseDecision(PHASE_PENDING, ConditionDecision(FALSE, REASON_NOT_OWNED, conflict))
    if rbac_refusal is not None:
        return PhaseDecision(
            PHASE_FAILED, ConditionDecision(FALSE, REASON_ACTIVATION_RBAC, rbac_refusal)
        )
    if deployment is None:
        return PhaseDecision(
            PHASE_PROVISIONING,
            ConditionDecision(
                FALSE, REASON_DEPLOYMENT_CREATING, "the proxy Deployment is being created"
            ),
        )
    status = deployment.get("status") or {}
    observed = status.get("observedGeneration")
    generation = (deployment.get("metadata") or {}).get("generation")
    if observed is None or (generation is not None and observed < generation):
        return PhaseDecision(
            PHASE_PROVISIONING,
            ConditionDecision(
                FALSE,
                REASON_DEPLOYMENT_NOT_OBSERVED,
                "no deployment controller has reported on the current proxy Deployment yet",
            ),
        )
    if (progressing := progress_deadline_exceeded(deployment)) is not None:
        message = str(progressing.get("message") or "the proxy Deployment made no progress")
        return PhaseDecision(
            PHASE_FAILED, ConditionDecision(FALSE, REASON_PROGRESS_DEADLINE, message)
        )
    available = int(status.get("availableReplicas") or 0)
    wanted = int((deployment.get("spec") or {}).get("replicas") or 0)
    counts = f"{available} of {wanted} proxy replica(s) available"
    condition = deployment_condition(deployment, "Available")
    if condition is not None and condition.get("status") == TRUE:
        phase = PHASE_READY if backends.status == TRUE else PHASE_DEGRADED
        return PhaseDecision(phase, ConditionDecision(TRUE, REASON_PROXY_AVAILABLE, counts))
    if available >= 1:
        return PhaseDecision(
            PHASE_DEGRADED, ConditionDecision(FALSE, REASON_PROXY_UNDER_STRENGTH, counts)
        )
    return PhaseDecision(
        PHASE_PROVISIONING, ConditionDecision(FALSE, REASON_PROXY_UNAVAILABLE, counts)
    )


def desired_status(
    router: ModelRouter, decision: PhaseDecision, backends: ConditionDecision
) -> ModelRouterStatus:
    """A copy of the current status with every field we own set; equal to it when nothing
    changed (``lastTransitionTime`` moves only when a condition's status flips)."""
    status = ModelRouterStatus.from_dict(router.status.to_dict())
    generation = router.metadata.generation
    status.phase = decision.phase
    status.endpoint = endpoint(router)
    status.observed_generation = generation
    available = decision.available
    set_condition(
        status.conditions,
        CONDITION_AVAILABLE,
        available.status,
        available.reason,
        available.message,
        generation,
    )
    set_condition(
        status.conditions,
        CONDITION_BACKENDS_READY,
        backends.status,
        backends.reason,
        backends.message,
        generation,
    )
    return status


def status_changed(current: ModelRouterStatus, wanted: ModelRouterStatus) -> bool:
    return bool(current.to_dict() != wanted.to_dict())


# -- the reconciler --------------------------------------------------------------------------------


class _RbacRefused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ModelRouterReconciler:
    """Level-triggered: reads the caches, applies what differs, writes status on change."""

    def __init__(
        self,
        manager: Manager,
        recorder: EventRecorder,
        *,
        routers: Informer,
        deployments: Informer,
        services: Informer,
        service_accounts: Informer,
        roles: Informer,
        role_bindings: Informer,
        inference_services: Informer,
        pools: Informer,
    ) -> None:
        self.client = manager.client
        self.recorder = recorder
        self.routers = routers
        self.deployments = deployments
        self.services = services
        self.service_accounts = service_accounts
        self.roles = roles
        self.role_bindings = role_bindings
        self.inference_services = inference_services
        self.pools = pools

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.routers.store.get(key)
        if obj is None:
            return Result()  # deleted: the garbage collector removes what it owned
        router = ModelRouter.from_dict(obj)
        if router.metadata.deletion_timestamp:
            return Result()
        ns = router.namespace or ""
        name = router.name or ""
        deployment: Mapping[str, Any] | None = self.deployments.store.get(
            f"{ns}/{proxy_name(name)}"
        )
        service = self.services.store.get(key)
        conflict = foreign_child(
            "ModelRouter",
            router.metadata.uid,
            (("Deployment", deployment), ("Service", service)),
        )
        refusal: str | None = None
        if conflict is None:
            try:
                deployment = await self._apply_children(router, deployment, service)
            except _RbacRefused as refused:
                refusal = refused.message
        backends = backends_ready(
            router,
            lambda ref: self.inference_services.store.get(f"{ns}/{ref}"),
            lambda ref: self.pools.store.get(f"{ns}/{ref}"),
        )
        decision = compute_phase(deployment, backends, conflict=conflict, rbac_refusal=refusal)
        result = Result(requeue=True) if refusal is not None else Result()
        status = desired_status(router, decision, backends)
        if not status_changed(router.status, status):
            return result
        previous = router.status.phase
        router.status = status
        try:
            await self.client.update_status(ModelRouter.resource(), router.to_dict())
        except Conflict:
            return Result(requeue=True)  # our cache was stale; the watch brings the new version
        except NotFound:
            return Result()
        if refusal is not None:
            log.warning("%s: %s", key, refusal)
            self.recorder.event(obj, "Warning", REASON_ACTIVATION_RBAC, "Reconcile", refusal)
        if previous != decision.phase:
            log.info(
                "%s: phase %s -> %s (%s)", key, previous, decision.phase, decision.available.reason
            )
            self.recorder.event(
                obj,
                "Warning" if decision.phase in (PHASE_FAILED, PHASE_PENDING) else "Normal",
                decision.phase,
                "Reconcile",
                f"phase {previous or 'unset'} -> {decision.phase}: {decision.available.message}",
            )
        return result

    async def _apply(
        self, resource: Resource, cached: Mapping[str, Any] | None, wanted: dict[str, Any]
    ) -> Mapping[str, Any] | None:
        if not needs_apply(cached, wanted):
            return cached
        applied = await self.client.apply(resource, wanted, field_manager=FIELD_MANAGER, force=True)
        meta = wanted["metadata"]
        log.info("%s/%s: applied %s", meta["namespace"], meta["name"], wanted["kind"])
        return applied

    async def _apply_children(
        self,
        router: ModelRouter,
        deployment: Mapping[str, Any] | None,
        service: Mapping[str, Any] | None,
    ) -> Mapping[str, Any] | None:
        """ServiceAccount, activation Role and RoleBinding, then Deployment and Service; returns
        the Deployment. A 403 on the RBAC pair raises :class:`_RbacRefused`."""
        ns = router.namespace or ""
        name = router.name or ""
        await self._apply(
            SERVICE_ACCOUNTS,
            self.service_accounts.store.get(f"{ns}/{proxy_name(name)}"),
            desired_service_account(router),
        )
        rbac = (
            (ROLES, self.roles, desired_role(router)),
            (ROLE_BINDINGS, self.role_bindings, desired_role_binding(router)),
        )
        for resource, informer, wanted in rbac:
            try:
                await self._apply(
                    resource, informer.store.get(f"{ns}/{activation_name(name)}"), wanted
                )
            except Forbidden as err:
                raise _RbacRefused(
                    activation_rbac_message(resource.kind, activation_name(name), err)
                ) from err
        deployment = await self._apply(DEPLOYMENTS, deployment, desired_deployment(router))
        await self._apply(SERVICES, service, desired_service(router))
        return deployment


def references(router: Mapping[str, Any], field: str, name: str) -> bool:
    """Whether a router (as a dict) has a backend whose ``field`` (``inferenceServiceRef`` or
    ``poolRef``) names ``name``."""
    for backend in (router.get("spec") or {}).get("backends") or ():
        if ((backend.get(field) or {}).get("name")) == name:
            return True
    return False


def map_backend(routers: Informer, field: str) -> Callable[[Mapping[str, Any]], Iterable[Request]]:
    """Maps an InferenceService or ModelPool to the routers of its namespace that reference it."""

    def mapper(obj: Mapping[str, Any]) -> Iterable[Request]:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        return [
            Request.for_object(router)
            for router in routers.store.by_index(NAMESPACE_INDEX, namespace)
            if references(router, field, meta["name"])
        ]

    return mapper


def setup_model_router_controller(manager: Manager, identity: str) -> ModelRouterReconciler:
    """Wire the controller into ``manager`` (every namespace). Deployments and Services share
    the InferenceService controller's informers (a conflicting object of our name must be seen);
    ServiceAccounts, Roles and RoleBindings are cached only when the operator made them."""
    routers = manager.informer(ModelRouter.resource())
    deployments = manager.informer(DEPLOYMENTS)
    services = manager.informer(SERVICES)
    service_accounts = manager.informer(SERVICE_ACCOUNTS, label_selector=MANAGED_SELECTOR)
    roles = manager.informer(ROLES, label_selector=MANAGED_SELECTOR)
    role_bindings = manager.informer(ROLE_BINDINGS, label_selector=MANAGED_SELECTOR)
    inference_services = manager.informer(InferenceService.resource())
    pools = manager.informer(ModelPool.resource())
    recorder = manager.event_recorder(EVENT_REPORTER, identity)
    reconciler = ModelRouterReconciler(
        manager,
        recorder,
        routers=routers,
        deployments=deployments,
        services=services,
        service_accounts=service_accounts,
        roles=roles,
        role_bindings=role_bindings,
        inference_services=inference_services,
        pools=pools,
    )
    (
        manager.new_controller(
            CONTROLLER_NAME, reconciler, max_concurrent_reconciles=MAX_CONCURRENT_RECONCILES
        )
        .for_(routers)
        .owns(deployments)
        .owns(services)
        .owns(service_accounts)
        .owns(roles)
        .owns(role_bindings)
        .watches(inference_services, map_backend(routers, "inferenceServiceRef"))
        .watches(pools, map_backend(routers, "poolRef"))
    )
    return reconciler
