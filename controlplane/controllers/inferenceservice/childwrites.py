"""The member's children written: its NetworkPolicy, PodDisruptionBudget, Deployment and Service.

*Why a module of its own:* the four children are written the same way, each with a guard of its
own: the NetworkPolicy is deleted again when ``--member-network-policies=false``, and a raise of
the Deployment is fenced on the ``resourceVersion`` it was decided on. Those guards are what a
review of a write must find in one place; the orchestrator keeps only the order (NetworkPolicy
and PodDisruptionBudget before the Deployment, the Service after) and what happens between
(the KV cache's save, the idle gate).

**Writes.** The children (:mod:`~controlplane.controllers.inferenceservice.desired`, and the
NetworkPolicy of :mod:`~controlplane.controllers.inferenceservice.network`, applied first so that
no member pod starts open to the cluster; deleted when ``--member-network-policies=false``) are
written with server-side apply as ``modelpool-operator`` (forced: the fields we own are ours), and
only when the cached child differs from what is wanted. "Differs" is decided by
:func:`~controlplane.controllers.children.needs_apply`: every field we want must be present with
the same value in the cached object (server defaults are extra fields and do not count), and the
wanted object carries a hash of itself in the ``inference.modelpool.dev/spec-hash`` annotation, so
a field we stopped wanting (a removed argument, a dropped node selector) changes the hash and is
applied away too. ``resources`` are compared through the hash only, because the API server
canonicalises quantities (``0.5`` becomes ``500m``). A child of that name that another controller
owns is never taken over (:func:`~controlplane.controllers.children.foreign_child`, read by the
orchestrator): the InferenceService stays Pending and says which object is in the way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.children import FIELD_MANAGER, is_controlled_by, needs_apply
from controlplane.controllers.inferenceservice.disruption import desired_disruption_budget
from controlplane.controllers.inferenceservice.network import (
    MemberNetworkPolicy,
    desired_network_policy,
)
from controlplane.runtime.cache import Object
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import (
    DEPLOYMENTS,
    NETWORK_POLICIES,
    POD_DISRUPTION_BUDGETS,
    SERVICES,
)

#: The log of the reconciler this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.controllers.inferenceservice.reconciler")


class ChildWriter:
    """Applies each child when the cached one differs; the optional children when watched."""

    def __init__(
        self,
        network_policies: Informer | None,
        network: MemberNetworkPolicy,
        disruption_budgets: Informer | None,
    ) -> None:
        #: None (unit tests of other rules): no NetworkPolicy is read or written.
        self.network_policies = network_policies
        self.network = network
        #: None (unit tests of other rules): no PodDisruptionBudget is read or written.
        self.disruption_budgets = disruption_budgets

    def cached_policy(self, key: str) -> Object | None:
        """The cached NetworkPolicy of this name when the operator writes them, else None (a
        user's policy of that name is then nobody's concern)."""
        if self.network_policies is None or not self.network.enabled:
            return None
        return self.network_policies.store.get(key)

    def cached_budget(self, key: str) -> Object | None:
        """The cached PodDisruptionBudget of this name, when they are watched."""
        return self.disruption_budgets.store.get(key) if self.disruption_budgets else None

    async def apply_network_policy(
        self,
        client: KubeClient,
        key: str,
        isvc: InferenceService,
        policy: Object | None,
        selector: Mapping[str, str] | None,
    ) -> None:
        """Apply the member's NetworkPolicy when the cached one differs (once, as the Service),
        in front of the pods its Service selects (``selector``: a pool's slot server); with
        ``--member-network-policies=false``, delete the one we wrote, if any."""
        if self.network_policies is None:
            return
        if self.network.enabled:
            wanted = desired_network_policy(isvc, self.network, selector)
            if needs_apply(policy, wanted):
                await client.apply(
                    NETWORK_POLICIES, wanted, field_manager=FIELD_MANAGER, force=True
                )
                log.info("%s: applied NetworkPolicy", key)
            return
        ours = self.network_policies.store.get(key)
        if ours is not None and is_controlled_by(ours, isvc.metadata.uid):
            # On its uid: one recreated meanwhile is the next reconcile's (409 here).
            uid = ours["metadata"].get("uid")
            with contextlib.suppress(NotFound, Conflict):
                await client.delete(NETWORK_POLICIES, isvc.name, isvc.namespace, uid=uid)
            log.info("%s: deleted NetworkPolicy (member network policies are off)", key)

    async def apply_budget(
        self, client: KubeClient, key: str, isvc: InferenceService, budget: Object | None
    ) -> None:
        """Apply the member's PodDisruptionBudget when the cached one differs (before the
        Deployment: no eviction reaches a pod that may serve)."""
        if self.disruption_budgets is None:
            return
        wanted = desired_disruption_budget(isvc)
        if needs_apply(budget, wanted):
            await client.apply(POD_DISRUPTION_BUDGETS, wanted, field_manager=FIELD_MANAGER,
                               force=True)  # fmt: skip
            log.info("%s: applied PodDisruptionBudget", key)

    @staticmethod
    async def apply_deployment(
        client: KubeClient,
        wanted: Object,
        deployment: Mapping[str, Any] | None,
        *,
        raising: bool,
    ) -> Object:
        """Apply the Deployment; raises :class:`Conflict` when a raise finds it changed since it
        was read, :class:`~controlplane.runtime.errors.Invalid` when the server refuses it."""
        if raising and deployment is not None:
            # A raise is conditional on the Deployment we decided on (docs/faults.md,
            # "Fencing"): one held up on its way while a successor lowered or rewrote it
            # is refused with 409, never applied over the successor's.
            wanted["metadata"]["resourceVersion"] = deployment["metadata"].get("resourceVersion")
        return await client.apply(DEPLOYMENTS, wanted, field_manager=FIELD_MANAGER, force=True)

    @staticmethod
    async def apply_service(
        client: KubeClient, key: str, service: Object | None, wanted: Object
    ) -> None:
        """Apply the member's Service when the cached one differs."""
        if needs_apply(service, wanted):
            await client.apply(SERVICES, wanted, field_manager=FIELD_MANAGER, force=True)
            log.info("%s: applied Service", key)
