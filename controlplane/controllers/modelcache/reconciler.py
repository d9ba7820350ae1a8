"""The collection's reconciler: one key for the whole cluster, Jobs created when due.

Every event of an InferenceService, of a member pod, of a node or of a collection Job reconciles
the one key :data:`KEY`: it reads the named paths from the caches, lets the schedule
(:mod:`.schedule`) say whether a run is due, and creates one collection Job per Ready node
(:func:`~controlplane.controllers.modelcache.desired.collection_job`). A node whose previous Job
is still running gets its next one when that Job finishes (its event reconciles again): two
collectors never work one node at once. Jobs are created, never updated or deleted here:
``ttlSecondsAfterFinished`` removes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.children import FIELD_MANAGER
from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.inferenceservice.weights import WeightsPlacement
from controlplane.controllers.modelcache.desired import (
    COMPONENT,
    COMPONENT_LABEL,
    CollectionSettings,
    collection_job,
    job_finished,
    job_node,
    named_paths,
    ready_nodes,
)
from controlplane.controllers.modelcache.schedule import CollectionSchedule
from controlplane.runtime.client import KubeClient
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import JOBS, NODES, PODS

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "model-cache-collection"
#: The one key: the collection is of the cluster, not of an object.
KEY: Final = Request("", "node-cache")


class ModelCacheCollector:
    def __init__(
        self,
        client: KubeClient,
        *,
        inference_services: Informer,
        pods: Informer,
        nodes: Informer,
        jobs: Informer,
        settings: CollectionSettings,
        placement: Callable[[], Awaitable[WeightsPlacement]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.inference_services = inference_services
        self.pods = pods
        self.nodes = nodes
        self.jobs = jobs
        self.settings = settings
        self.placement = placement
        self.clock = clock
        self.schedule = CollectionSchedule.starting(clock(), settings.interval, settings.retention)
        #: Nodes a due run has not reached yet (their previous Job still runs).
        self.waiting: set[str] = set()
        #: Jobs created and not yet seen in the cache, by name: their node is busy.
        self.created: dict[str, str] = {}

    async def reconcile(self, request: Request) -> Result:
        now = self.clock()
        named = named_paths(self.inference_services.store.objects(), self.pods.store.objects())
        self.schedule.observe(named, now)
        ready = set(ready_nodes(self.nodes.store.objects()))
        if self.schedule.take_due(now):
            self.waiting |= ready
        self.waiting &= ready
        if self.waiting:
            await self._start(named, now)
        return Result(requeue_after=self.schedule.wake_in(now) or None)

    def _busy(self) -> set[str]:
        """Nodes with a collection Job still running (or just created)."""
        busy: set[str] = set()
        for job in self.jobs.store.objects():
            name = str(job["metadata"]["name"])
            self.created.pop(name, None)
            node = job_node(job)
            if node is not None and not job_finished(job):
                busy.add(node)
        return busy | set(self.created.values())

    async def _start(self, named: Iterable[str], now: float) -> None:
        placement = await self.placement()
        for node in sorted(self.waiting - self._busy()):
            job = collection_job(node, named, self.settings, placement, now)
            name = str(job["metadata"]["name"])
            await self.client.apply(JOBS, job, field_manager=FIELD_MANAGER, force=True)
            self.created[name] = node
            self.waiting.discard(node)
            log.info("node %s: started the model cache's collection Job %s/%s", node,
                     self.settings.namespace, name)  # fmt: skip


def _the_key(_: Object) -> Iterable[Request]:
    return (KEY,)


def setup_model_cache_controller(
    manager: Manager,
    settings: CollectionSettings,
    placement: Callable[[], Awaitable[WeightsPlacement]],
) -> ModelCacheCollector:
    """Wire the collection into ``manager``; the caller leaves it out when the interval is 0."""
    inference_services = manager.informer(InferenceService.resource())
    pods = manager.informer(PODS, label_selector=ISVC_LABEL)
    nodes = manager.informer(NODES)
    jobs = manager.informer(
        JOBS, settings.namespace, label_selector=f"{COMPONENT_LABEL}={COMPONENT}"
    )
    collector = ModelCacheCollector(
        manager.client,
        inference_services=inference_services,
        pods=pods,
        nodes=nodes,
        jobs=jobs,
        settings=settings,
        placement=placement,
    )
    (
        manager.new_controller(CONTROLLER_NAME, collector)
        .watches(inference_services, _the_key)
        .watches(pods, _the_key)
        .watches(nodes, _the_key)
        .watches(jobs, _the_key)
    )
    return collector
