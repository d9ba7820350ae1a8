"""The InferenceService controller's side of the weights: the fetch Job, and reading its progress.

For a fetched source (``https://``, ``http://``, ``hf://``) the reconciler asks
:meth:`WeightsFetcher.observe` before it sizes the Deployment. It creates the Job the spec gives
(:func:`~controlplane.controllers.inferenceservice.weights.desired_fetch_job`; a Job's template
cannot change, so a new source is a new Job and the older ones are deleted), reads how far the
download is, and returns the verdict of
:mod:`~controlplane.controllers.inferenceservice.weightsstatus`.

**How far the download is** comes from the fetch container itself: it prints one JSON record per
line (:mod:`controlplane.modelfetch.progress`), and while its pod runs this controller reads the
last record of its log (``GET pods/NAME/log?container=fetch-model&tailLines=8``, the ``pods/log``
permission), every :data:`PROGRESS_REQUEUE_SECONDS`. The fetch pod needs no credentials of its own
and no access to the API: the kubelet already keeps its output. A log that cannot be read (the
container not started, the node unreachable) only leaves the progress unknown for that round.
Once the Job is Complete, the finished pod's last line (the ``done`` record) gives the digest and
the size, read once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService
from controlplane.api.v1alpha1.inferenceservice import MODEL_FAILED
from controlplane.controllers.children import FIELD_MANAGER
from controlplane.controllers.inferenceservice.weights import (
    FETCH_CONTAINER,
    MODEL_OF_LABEL,
    WeightsPlacement,
    desired_fetch_job,
    source_of,
)
from controlplane.controllers.inferenceservice.weightsstatus import (
    FetchObservation,
    WeightsVerdict,
    fetched,
    node_lost,
    without_fetch,
)
from controlplane.modelfetch.progress import Done, ProgressRecord, parse_line
from controlplane.runtime.cache import NAMESPACE_INDEX
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import KubeError, NotFound
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import JOBS, PODS

log = logging.getLogger(__name__)

#: How often a download's progress is read again while its Job runs (there is no event for it).
PROGRESS_REQUEUE_SECONDS: Final = 2.0
#: The label the job controller puts on a Job's pods.
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
#: Lines read from the end of the fetcher's log: its stderr (a retry's warning) is mixed in, so
#: the last record may not be the last line.
LOG_TAIL_LINES: Final = 8
#: A log read is a request to the kubelet through the API server: bounded, and never fatal.
LOG_TIMEOUT_SECONDS: Final = 5.0


class WeightsFetcher:
    """Creates and reads the fetch Job of each InferenceService with a fetched source."""

    def __init__(
        self,
        client: KubeClient,
        *,
        jobs: Informer,
        pods: Informer,
        placement: Callable[[], Awaitable[WeightsPlacement]],
        nodes: Informer | None = None,
    ) -> None:
        self.client = client
        self.jobs = jobs
        self.pods = pods
        #: None: nodes are not watched (a node that leaves is not noticed).
        self.nodes = nodes
        self.placement = placement

    async def observe(
        self, isvc: InferenceService, owner: Mapping[str, Any]
    ) -> tuple[WeightsVerdict, WeightsPlacement, float | None]:
        """The weights' verdict, the placement it was judged with, and when to look again."""
        placement = await self.placement()
        unfetched = without_fetch(isvc)
        if unfetched is not None:
            await self._delete_jobs(isvc, keep=None)
            return unfetched, placement, None
        source = source_of(isvc)
        wanted = desired_fetch_job(isvc, placement, owner)
        name = str(wanted["metadata"]["name"])
        job = self.jobs.store.get(f"{isvc.namespace}/{name}")
        if job is None:
            job = await self.client.apply(JOBS, wanted, field_manager=FIELD_MANAGER, force=True)
            log.info("%s/%s: created the fetch Job %s", isvc.namespace, isvc.name, name)
        await self._delete_jobs(isvc, keep=name)
        pods = self._job_pods(isvc.namespace or "", name)
        record = await self._record(isvc, pods, job)
        verdict = fetched(isvc, source, placement, FetchObservation(job, pods, record))
        if self.nodes is not None:
            lost = node_lost(verdict, set(self.nodes.store.keys()))
            if lost is not None:
                log.warning("%s/%s: %s", isvc.namespace, isvc.name, lost.message)
                await self._delete_jobs(isvc, keep=None)
                return lost, placement, PROGRESS_REQUEUE_SECONDS
        settled = verdict.ready or verdict.status.state == MODEL_FAILED
        return verdict, placement, None if settled else PROGRESS_REQUEUE_SECONDS

    def _job_pods(self, namespace: str, job: str) -> list[Mapping[str, Any]]:
        keys = set(self.pods.store.index_keys("label", f"{JOB_NAME_LABEL}={job}"))
        keys &= set(self.pods.store.index_keys(NAMESPACE_INDEX, namespace))
        return [pod for key in sorted(keys) if (pod := self.pods.store.get(key)) is not None]

    async def _record(
        self,
        isvc: InferenceService,
        pods: list[Mapping[str, Any]],
        job: Mapping[str, Any],
    ) -> ProgressRecord | None:
        """The last record of the running fetch pod; once Complete, the ``done`` record of the
        pod that succeeded (read once: the digest is then in ``status.model``)."""
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if running:
            return await self._last_record(running[0])
        complete = any(
            c.get("type") == "Complete" and c.get("status") == "True"
            for c in (job.get("status") or {}).get("conditions") or ()
        )
        known = isvc.status.model
        source = isvc.spec.model.source if isvc.spec.model is not None else None
        if complete and (known is None or not known.sha256 or known.source != source):
            succeeded = [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]
            if succeeded:
                record = await self._last_record(succeeded[0])
                return record if isinstance(record, Done) else None
        return None

    async def _last_record(self, pod: Mapping[str, Any]) -> ProgressRecord | None:
        meta = pod["metadata"]
        path = PODS.path(meta["namespace"], meta["name"], "log")
        try:
            text = await self.client.get_bytes(
                path,
                params={"container": FETCH_CONTAINER, "tailLines": LOG_TAIL_LINES},
                timeout=LOG_TIMEOUT_SECONDS,
            )
        except KubeError as error:
            log.debug("log of %s/%s not readable: %s", meta["namespace"], meta["name"], error)
            return None
        records = (
            parse_line(line) for line in reversed(text.decode(errors="replace").splitlines())
        )
        return next((record for record in records if record is not None), None)

    async def _delete_jobs(self, isvc: InferenceService, keep: str | None) -> None:
        """Delete this InferenceService's fetch Jobs other than ``keep`` (a source it no longer
        names), with their pods."""
        namespace = isvc.namespace or ""
        for key in sorted(self.jobs.store.index_keys("label", f"{MODEL_OF_LABEL}={isvc.name}")):
            job = self.jobs.store.get(key)
            if job is None or job["metadata"].get("namespace") != namespace:
                continue
            name = str(job["metadata"]["name"])
            if name == keep or job["metadata"].get("deletionTimestamp"):
                continue
            try:
                await self.client.delete(JOBS, name, namespace, propagation_policy="Background")
                log.info("%s/%s: deleted the fetch Job %s (its source changed)", namespace,
                         isvc.name, name)  # fmt: skip
            except NotFound:
                pass
