"""Which pools a watched object's change concerns: the pool controller's event mapping.

*Why a module of its own:* the pool controller watches six kinds (pools, their members, the
members' Deployments, pods and EndpointSlices, and pool Leases), and each change must reach every
pool it can alter, or a decision waits for a backstop: a pool's rivals (which claim on a shared
member stands), the pools listing a member, the pool whose slot server an object belongs to. The
maps only read the pools' cache, testable without a manager, and are none of the reconcile's
business.

**Driven by watches** (docs/modelpool.md): pools, their members, the members' Deployments, pods
(``inference.modelpool.dev/inferenceservice`` label) and EndpointSlices
(``kubernetes.io/service-name``), pool Leases (selected by their
``inference.modelpool.dev/pool`` label), and the slot servers' pods and budgets with the nodes
those pods run on. Two timed requeues are backstops for what no watch
reports: a deferred drain is re-probed, and a valid intent is re-checked just after it would
expire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controlplane.api.v1alpha1.activation import pool_for_lease
from controlplane.api.v1alpha1.demand import pool_of_demand_lease
from controlplane.controllers.modelpool.grant import listed_members, lists_member
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL, slot_server_name
from controlplane.runtime.cache import NAMESPACE_INDEX, Object, Store
from controlplane.runtime.controller import Request
from controlplane.runtime.endpoints import SERVICE_NAME_LABEL
from controlplane.runtime.objects import node_leaving


class PoolWatches:
    """Maps a watched object to the pools it concerns, from the pools' cache (``pools``)."""

    def __init__(self, pools: Store) -> None:
        self.pools = pools

    def pools_with_member(self, namespace: str, member: str) -> list[Request]:
        return [
            Request(namespace, pool["metadata"]["name"])
            for pool in self.pools.by_index(NAMESPACE_INDEX, namespace)
            if lists_member(pool, member)
        ]

    def map_rivals(self, obj: Object) -> Iterable[Request]:
        """A pool to the other pools of its namespace that list one of its members: which claim
        on a shared member stands changes with it (created, deciding, deleted)."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        names = set(listed_members(obj))
        return [
            Request(namespace, pool["metadata"]["name"])
            for pool in self.pools.by_index(NAMESPACE_INDEX, namespace)
            if pool["metadata"]["name"] != meta["name"] and names.intersection(listed_members(pool))
        ]

    def map_member(self, obj: Object) -> Iterable[Request]:
        """An InferenceService or Deployment (same name) to the pools it is a member of; a slot
        server's Deployment to its pool."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        if pool := (meta.get("labels") or {}).get(SLOT_SERVER_LABEL):
            return (Request(namespace, pool),)
        return self.pools_with_member(namespace, meta["name"])

    def map_slice(self, obj: Object) -> Iterable[Request]:
        """An EndpointSlice to the pools listing its Service's member, or whose slot server's
        Service it belongs to."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not service:
            return ()
        slot_of = [
            Request(namespace, pool["metadata"]["name"])
            for pool in self.pools.by_index(NAMESPACE_INDEX, namespace)
            if slot_server_name(pool["metadata"]["name"]) == service
        ]
        return slot_of or self.pools_with_member(namespace, service)

    def map_labelled(self, label: str) -> Callable[[Object], Iterable[Request]]:
        """An object labelled with a member's name (``label``) to the pools listing it."""

        def mapper(obj: Object) -> Iterable[Request]:
            meta = obj["metadata"]
            member = (meta.get("labels") or {}).get(label)
            return self.pools_with_member(meta.get("namespace") or "", member) if member else ()

        return mapper


def slot_pods_on_node(slot_pods: Store) -> Callable[[Object], Iterable[Request]]:
    """A node being emptied (cordoned, or tainted for removal) to the pools whose slot server runs
    a pod on it: that server moves, through the pool's fenced drain. Any other node event (its
    status, every few seconds on a busy cluster) concerns no pool: the next pod's placement is
    the scheduler's."""

    def mapper(node: Object) -> Iterable[Request]:
        if not node_leaving(node):
            return ()
        name = node["metadata"]["name"]
        found = {
            Request(pod["metadata"].get("namespace") or "", pool)
            for pod in slot_pods.objects()
            if (pod.get("spec") or {}).get("nodeName") == name
            and (pool := (pod["metadata"].get("labels") or {}).get(SLOT_SERVER_LABEL))
        }
        return sorted(found, key=str)

    return mapper


def map_lease(obj: Object) -> Iterable[Request]:
    """A pool's intent, or a replica's demand report for it, is the pool's business."""
    pool = pool_for_lease(obj) or pool_of_demand_lease(obj)
    return (Request(obj["metadata"].get("namespace") or "", pool),) if pool else ()
