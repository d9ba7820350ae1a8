"""Day-2 moves of a serving member: the idle gate asked, and the pods a node drain waits for moved.

*Why a module of its own:* a change to a serving member's pod and a node drain wait for the same
idle gate (docs/inferenceservice.md, "Changing a serving member" and "Node drains"). When they may
go in is decided by pure rules (:mod:`~controlplane.controllers.inferenceservice.rollout`,
:mod:`~controlplane.controllers.inferenceservice.disruption`); what those rules need from outside
is here: which nodes are cordoned (the nodes' cache), what the ready endpoints' ``/slots`` say
(asked only when the rules need it: ``/slots`` has no watch), and the deletion of the pods a drain
waits for once the gate has opened. Day-2 updates through the idle gate grow here, beside the
rules, without touching the orchestrator's order of writes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.inferenceservice.disruption import leaving_node, pods_leaving
from controlplane.controllers.inferenceservice.rollout import Gate, RolloutVerdict, rollout_gate
from controlplane.probes.idle import IdleOutcome, IdleProbe
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import member_urls
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import PODS

#: The log of the reconciler this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.controllers.inferenceservice.reconciler")

#: How soon a change waiting for a member no pool lists to be idle asks ``/slots`` again: the
#: only polling of an update, since ``/slots`` has no watch (as the pool's drain).
UPDATE_RECHECK_SECONDS: Final = 1.0


class DayTwoMoves:
    """The idle gate of a pod change or a drain, asked of the member's endpoints, and the move."""

    def __init__(
        self, idle_probe: IdleProbe, endpoint_slices: Informer, nodes: Informer | None
    ) -> None:
        #: Asks a member no pool lists whether a change to its pod may go in (``/slots``).
        self.idle_probe = idle_probe
        self.endpoint_slices = endpoint_slices
        #: None (unit tests of other rules): no node is known cordoned (docs/inferenceservice.md,
        #: "Node drains").
        self.nodes = nodes

    def pods_leaving(self, pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The member's live pods on a cordoned node (none when nodes are not watched)."""
        if self.nodes is None:
            return []
        return pods_leaving(pods, self.nodes.store.get)

    async def rollout_gate(
        self,
        isvc: InferenceService,
        changes_pod: bool,
        leaving: Sequence[Mapping[str, Any]],
        *,
        wanted_replicas: int,
        pooled: bool,
        pods: int,
    ) -> RolloutVerdict:
        """Whether the wanted Deployment may be written and the pods on a cordoned node deleted
        now, asking the ready endpoints' ``/slots`` when the rules need it
        (:mod:`~controlplane.controllers.inferenceservice.rollout`)."""
        gate = functools.partial(
            rollout_gate,
            changes_pod=changes_pod,
            pods=pods,
            wanted_replicas=wanted_replicas,
            pooled=pooled,
            leaving=leaving_node(leaving),
        )
        verdict = gate()
        if verdict.gate is not Gate.PROBE:
            return verdict
        urls = member_urls(self.endpoint_slices.store, isvc.namespace or "", isvc.name)
        key = f"{isvc.namespace}/{isvc.name}"
        return gate(reports=[(url, await self.idle_probe.probe(url, member=key)) for url in urls])

    async def busy_endpoints(self, isvc: InferenceService) -> list[str]:
        """What keeps a service from being scaled to zero for idleness: each ready endpoint whose
        ``/slots`` did not say idle, with what it said (none: every one is idle, or it has none)."""
        key = f"{isvc.namespace}/{isvc.name}"
        busy = []
        for url in member_urls(self.endpoint_slices.store, isvc.namespace or "", isvc.name):
            report = await self.idle_probe.probe(url, member=key)
            if report.outcome is not IdleOutcome.IDLE:
                busy.append(f"{url}: {report.detail}")
        return busy

    async def move_off(
        self, client: KubeClient, key: str, leaving: Sequence[Mapping[str, Any]]
    ) -> None:
        """Delete the pods a drain waits for, once the idle gate has opened (on their uid: a pod
        replaced meanwhile is not this decision's). The Deployment makes the next one, which is
        scheduled off the cordoned node."""
        for pod in leaving:
            meta = pod["metadata"]
            with contextlib.suppress(NotFound, Conflict):
                await client.delete(PODS, meta["name"], meta["namespace"], uid=meta["uid"])
            log.info("%s: deleted pod %s, idle, off cordoned node %s", key, meta["name"],
                     pod["spec"]["nodeName"])  # fmt: skip
