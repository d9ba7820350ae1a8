"""The ModelRouter reconciler: reads the caches, applies what differs, writes status on change.

Children (:mod:`~controlplane.controllers.modelrouter.desired`) are written with server-side apply
as ``modelpool-operator`` only when the cached one differs
(:mod:`controlplane.controllers.children`). A Deployment or Service of those names that this
router does not control is never taken over: the router is Pending (reason ``NotOwned``).

The operator writes the activation Role and RoleBinding as itself, so the API server refuses a
Role holding a rule the operator's ClusterRole lacks ("is attempting to grant RBAC permissions not
currently held"). Such a 403 is reported, never retried hot: ``Available=False`` with reason
``ActivationRBAC`` and the server's message (which lists the rules), phase ``Failed``, a Warning
event, and a rate-limited requeue (the workqueue's per-key exponential backoff). The Deployment is
not written while its RBAC is refused: a proxy without it could not activate.

InferenceServices and ModelPools are watched and mapped to the routers of their namespace that
reference them (:func:`map_backend`), so ``BackendsReady`` follows them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.membership import claiming_pool, lists
from controlplane.api.v1alpha1.modelrouter import (
    PHASE_FAILED,
    PHASE_PENDING,
    REASON_ACTIVATION_RBAC,
    ModelRouter,
)
from controlplane.controllers.children import (
    FIELD_MANAGER,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    foreign_child,
    needs_apply,
)
from controlplane.controllers.modelrouter.desired import (
    ROUTER_LABEL,
    activation_name,
    desired_deployment,
    desired_disruption_budget,
    desired_role,
    desired_role_binding,
    desired_service,
    desired_service_account,
    proxy_name,
)
from controlplane.controllers.modelrouter.status import (
    activation_rbac_message,
    backend_paths,
    backends_ready,
    compute_phase,
    desired_status,
    status_changed,
)
from controlplane.runtime.cache import NAMESPACE_INDEX
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.errors import Conflict, Forbidden, NamespaceTerminating, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.resources import (
    DEPLOYMENTS,
    POD_DISRUPTION_BUDGETS,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    SERVICES,
    Resource,
)

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "modelrouter"
EVENT_REPORTER: Final = "modelpool-operator/modelrouter"
MAX_CONCURRENT_RECONCILES: Final = 2
#: What the informers of the kinds only routers create (ServiceAccounts, Roles, RoleBindings)
#: select, so their caches hold the operator's objects only.
MANAGED_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


class _RbacRefused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ModelRouterReconciler:
    """Level-triggered: reads the caches, applies what differs, writes status on change."""

    def __init__(
        self,
        client: KubeClient,
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
        proxy_image: Callable[[], Awaitable[str]],
        disruption_budgets: Informer | None = None,
    ) -> None:
        self.client = client
        #: The image of a proxy whose router names none (the operator's own, resolved once).
        self.proxy_image = proxy_image
        self.recorder = recorder
        self.routers = routers
        self.deployments = deployments
        self.services = services
        self.service_accounts = service_accounts
        self.roles = roles
        self.role_bindings = role_bindings
        #: The proxies' PodDisruptionBudgets (labelled with their router); None: not written.
        self.disruption_budgets = disruption_budgets
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
        pools = self.pools.store.by_index(NAMESPACE_INDEX, ns)
        paths = backend_paths(router, lambda member: claiming_pool(pools, member))
        status = desired_status(router, decision, backends, paths)
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
        """ServiceAccount, activation Role and RoleBinding, then Deployment, Service and
        PodDisruptionBudget; returns the Deployment. A 403 on the RBAC pair raises
        :class:`_RbacRefused`."""
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
            except NamespaceTerminating:
                raise  # the router's namespace is going: no RBAC problem to report
            except Forbidden as err:
                raise _RbacRefused(
                    activation_rbac_message(resource.kind, activation_name(name), err)
                ) from err
        wanted = desired_deployment(router, await self.proxy_image())
        deployment = await self._apply(DEPLOYMENTS, deployment, wanted)
        await self._apply(SERVICES, service, desired_service(router))
        if self.disruption_budgets is not None:
            await self._apply(
                POD_DISRUPTION_BUDGETS,
                self.disruption_budgets.store.get(f"{ns}/{proxy_name(name)}"),
                desired_disruption_budget(router),
            )
        return deployment


def references(router: Mapping[str, Any], field: str, name: str) -> bool:
    """Whether a router (as a dict) has a backend whose ``field`` (``inferenceServiceRef`` or
    ``poolRef``) names ``name``."""
    for backend in (router.get("spec") or {}).get("backends") or ():
        if ((backend.get(field) or {}).get("name")) == name:
            return True
    return False


def names_member_of(router: Mapping[str, Any], pool: Mapping[str, Any]) -> bool:
    """Whether a router has an ``inferenceServiceRef`` backend naming a member ``pool`` lists."""
    return any(
        lists(pool, str((backend.get("inferenceServiceRef") or {}).get("name")))
        for backend in (router.get("spec") or {}).get("backends") or ()
        if backend.get("inferenceServiceRef")
    )


def map_backend(routers: Informer, field: str) -> Callable[[Mapping[str, Any]], Iterable[Request]]:
    """Maps an InferenceService or ModelPool to the routers of its namespace that reference it;
    a pool also to the routers naming one of its members (``status.backends`` shows the pool
    such a backend is served through)."""

    def mapper(obj: Mapping[str, Any]) -> Iterable[Request]:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        return [
            Request.for_object(router)
            for router in routers.store.by_index(NAMESPACE_INDEX, namespace)
            if references(router, field, meta["name"])
            or (field == "poolRef" and names_member_of(router, obj))
        ]

    return mapper


def setup_model_router_controller(
    manager: Manager, identity: str, proxy_image: Callable[[], Awaitable[str]]
) -> ModelRouterReconciler:
    """Wire the controller into ``manager`` (every namespace). Deployments and Services share
    the InferenceService controller's informers (a conflicting object of our name must be seen);
    ServiceAccounts, Roles and RoleBindings are cached only when the operator made them."""
    routers = manager.informer(ModelRouter.resource())
    deployments = manager.informer(DEPLOYMENTS)
    services = manager.informer(SERVICES)
    service_accounts = manager.informer(SERVICE_ACCOUNTS, label_selector=MANAGED_SELECTOR)
    roles = manager.informer(ROLES, label_selector=MANAGED_SELECTOR)
    role_bindings = manager.informer(ROLE_BINDINGS, label_selector=MANAGED_SELECTOR)
    disruption_budgets = manager.informer(POD_DISRUPTION_BUDGETS, label_selector=ROUTER_LABEL)
    inference_services = manager.informer(InferenceService.resource())
    pools = manager.informer(ModelPool.resource())
    recorder = manager.event_recorder(EVENT_REPORTER, identity)
    reconciler = ModelRouterReconciler(
        manager.client,
        recorder,
        routers=routers,
        deployments=deployments,
        services=services,
        service_accounts=service_accounts,
        roles=roles,
        role_bindings=role_bindings,
        inference_services=inference_services,
        pools=pools,
        proxy_image=proxy_image,
        disruption_budgets=disruption_budgets,
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
        .owns(disruption_budgets)
        .watches(inference_services, map_backend(routers, "inferenceServiceRef"))
        .watches(pools, map_backend(routers, "poolRef"))
    )
    return reconciler
