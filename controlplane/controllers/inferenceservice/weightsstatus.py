"""Where an InferenceService's weights stand: ``status.model``, ``ModelReady``, and what it holds.

Pure functions of the InferenceService, its fetch Job, that Job's pods and the last progress record
the fetcher logged (:mod:`controlplane.modelfetch.progress`); the reconciler
(:mod:`~controlplane.controllers.inferenceservice.fetching`) reads them, this module judges.

* A source read where it is (a path in the image, ``file://``, ``pvc://``): ``Ready`` at once
  (``ModelReady`` True, reason ``NotFetched``); the kubelet refuses to start a pod whose hostPath
  file or claim is missing, so nothing here could know better.
* A fetched source (``https://``, ``http://``, ``hf://``), by its Job (the current one, of the
  name the spec gives: an older Job's success says nothing of a new source):

  ===================================== =============== ======================================
  the Job                               ``state``       ``ModelReady``
  ===================================== =============== ======================================
  not created yet, or no pod running    ``Pending``     False, ``FetchPending``
  a pod running                         ``Downloading`` False, ``Downloading`` (bytes, rate)
  a pod failed, the Job retrying        ``Downloading`` False, ``Retrying`` + the failure
  ``Complete``                          ``Ready``       True, ``Cached`` (node, path, digest)
  ``Failed``                            ``Failed``      False, the fetcher's reason
  ===================================== =============== ======================================

  The fetcher's reason is the first word of its termination message (``NotFound``,
  ``Unauthorized``, ``Forbidden``, ``DigestMismatch``, ``DiskFull``, ``Unreachable``,
  ``ServerError``, ``Invalid``: :mod:`controlplane.modelfetch.errors`).

:func:`weights_ready` is what both controllers ask before a start: ``ModelReady`` True for the
source the spec names now. The InferenceService controller holds the Deployment at 0 until then;
a pool never grants the slot to a member whose weights are not ready (a swap never downloads).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from controlplane.api.v1alpha1 import (
    InferenceService,
    InferenceServiceStatus,
    ModelStatus,
    set_condition,
)
from controlplane.api.v1alpha1.conditions import FALSE, TRUE
from controlplane.api.v1alpha1.inferenceservice import (
    MODEL_DOWNLOADING,
    MODEL_FAILED,
    MODEL_PENDING,
    MODEL_READY,
)
from controlplane.api.v1alpha1.modelsource import (
    ParsedSource,
    SourceError,
    SourceKind,
    parse_source,
)
from controlplane.controllers.inferenceservice.weights import (
    FETCH_CONTAINER,
    WeightsPlacement,
    cached_file,
)
from controlplane.modelfetch.errors import Reason
from controlplane.modelfetch.progress import Done, Progress, ProgressRecord

CONDITION_MODEL_READY: Final = "ModelReady"
REASON_NOT_FETCHED: Final = "NotFetched"
REASON_FETCH_PENDING: Final = "FetchPending"
REASON_DOWNLOADING: Final = "Downloading"
REASON_RETRYING: Final = "Retrying"
REASON_CACHED: Final = "Cached"
REASON_FETCH_FAILED: Final = "FetchFailed"
REASON_INVALID_SOURCE: Final = "InvalidSource"

#: Events on the InferenceService as a download goes (:func:`transition_event`).
EVENT_DOWNLOAD_STARTED: Final = "DownloadStarted"
EVENT_DOWNLOAD_SUCCEEDED: Final = "DownloadSucceeded"
EVENT_DOWNLOAD_FAILED: Final = "DownloadFailed"
EVENT_DOWNLOAD_RETRYING: Final = "DownloadRetrying"

_MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ModelEvent:
    """An event a change of the weights' state tells."""

    type: Literal["Normal", "Warning"]
    reason: str
    note: str


@dataclass(frozen=True, slots=True)
class FetchObservation:
    """What the caches and the fetcher's log say of a fetched source's download."""

    #: The Job of the name the spec gives now; None when not created (or not cached) yet.
    job: Mapping[str, Any] | None = None
    #: That Job's pods.
    pods: Sequence[Mapping[str, Any]] = ()
    #: The last record the running (or last finished) fetch container logged.
    record: ProgressRecord | None = None


@dataclass(frozen=True, slots=True)
class WeightsVerdict:
    """``status.model`` and the ``ModelReady`` condition to write."""

    status: ModelStatus
    ready: bool
    reason: str
    message: str

    @property
    def condition(self) -> tuple[str, str, str]:
        return (TRUE if self.ready else FALSE, self.reason, self.message)

    @property
    def failed(self) -> bool:
        """Failed for good: the spec (the source, its token or digest) must change."""
        return self.status.state == MODEL_FAILED


def with_weights(
    status: InferenceServiceStatus, verdict: WeightsVerdict, generation: int | None
) -> None:
    """Put the verdict into ``status``: ``status.model`` and the ``ModelReady`` condition."""
    status.model = verdict.status
    set_condition(status.conditions, CONDITION_MODEL_READY, *verdict.condition, generation)


def weights_ready(obj: Mapping[str, Any]) -> bool:
    """Whether the InferenceService's weights are where its server will read them: always for a
    source read where it is; for a fetched one, ``ModelReady`` True for the source its spec names
    now (a status about an earlier source does not count)."""
    status = obj.get("status") or {}
    model = (obj.get("spec") or {}).get("model") or {}
    try:
        if not parse_source(str(model.get("source") or ""), model.get("sha256")).fetched:
            return True
    except SourceError:
        return False
    condition = _dict_condition(status.get("conditions") or (), CONDITION_MODEL_READY)
    described = (status.get("model") or {}).get("source")
    return (
        condition is not None
        and condition.get("status") == TRUE
        and described is not None
        and described == model.get("source")
    )


def weights_summary(obj: Mapping[str, Any]) -> str | None:
    """The one line ``kubectl get isvc`` shows (``status.model.summary``)."""
    return ((obj.get("status") or {}).get("model") or {}).get("summary")


def _size(count: int | None) -> str:
    return "an unknown size" if count is None else f"{count / _MIB:.1f} MiB"


def not_fetched(isvc: InferenceService, source: ParsedSource) -> WeightsVerdict:
    where = {
        SourceKind.IMAGE: ("in the server's image", "Ready (image)"),
        SourceKind.FILE: ("on the node, mounted read-only", "Ready (node file)"),
        SourceKind.PVC: (f"in the claim {source.claim}, mounted read-only", "Ready (pvc)"),
    }[source.kind]
    status = ModelStatus(source=source.raw, state=MODEL_READY, path=source.path, summary=where[1])
    return WeightsVerdict(status, True, REASON_NOT_FETCHED, f"read where it is: {where[0]}")


def without_fetch(isvc: InferenceService) -> WeightsVerdict | None:
    """The verdict on a source no download is for (read where it is, or malformed); None for a
    source that is fetched (:func:`fetched` judges it)."""
    model = isvc.spec.model
    raw = (model.source if model is not None else None) or ""
    try:
        source = parse_source(raw, model.sha256 if model is not None else None)
    except SourceError as error:
        return invalid_source(raw, error)
    return None if source.fetched else not_fetched(isvc, source)


def invalid_source(raw: str, error: SourceError) -> WeightsVerdict:
    status = ModelStatus(source=raw, state=MODEL_FAILED, summary="Failed: InvalidSource",
                         message=str(error))  # fmt: skip
    return WeightsVerdict(status, False, REASON_INVALID_SOURCE, str(error))


def fetched(
    isvc: InferenceService,
    source: ParsedSource,
    placement: WeightsPlacement,
    observed: FetchObservation,
) -> WeightsVerdict:
    """The verdict on a fetched source (table in the module docstring)."""
    previous = isvc.status.model
    status = ModelStatus(source=source.raw, path=cached_file(source, placement))
    job = observed.job
    if job is not None:
        status.fetch_job = str(job["metadata"]["name"])
    if previous is not None and previous.source == source.raw:
        # What an earlier reconcile learnt (the digest, the node) stays until contradicted.
        status.sha256, status.node = previous.sha256, previous.node
        status.bytes_total = previous.bytes_total
    if isinstance(observed.record, Done):
        status.sha256 = observed.record.sha256
        status.bytes_total = status.bytes_done = observed.record.bytes_total
    if job is None:
        return _pending(status, "the fetch Job is being created")
    if job["metadata"].get("deletionTimestamp"):
        status.node = None
        return _pending(status, "the previous fetch Job is being deleted; it then runs anew")
    if _job_condition(job, "Complete"):
        status.state, status.summary = MODEL_READY, "Ready"
        status.node = _succeeded_node(observed.pods) or status.node
        status.bytes_done = status.bytes_total
        message = f"downloaded to node {status.node or '(unknown)'}: {status.path}"
        if status.bytes_total is not None:
            message += f" ({_size(status.bytes_total)})"
        if status.sha256:
            message += f", sha256 {status.sha256}"
        status.message = message
        return WeightsVerdict(status, True, REASON_CACHED, message)
    failure = _last_failure(observed.pods)
    if _job_condition(job, "Failed") or _job_condition(job, "FailureTarget"):
        reason, text = failure or (REASON_FETCH_FAILED, _job_failure_message(job))
        status.state, status.summary, status.message = MODEL_FAILED, f"Failed: {reason}", text
        return WeightsVerdict(status, False, reason, text)
    running = [pod for pod in observed.pods if (pod.get("status") or {}).get("phase") == "Running"]
    if running and isinstance(observed.record, Progress):
        return _downloading(status, observed.record, _node_of(running[0]))
    if failure is not None:
        status.state, status.summary = MODEL_DOWNLOADING, "Retrying"
        status.message = f"the last attempt failed, the Job retries: {failure[0]}: {failure[1]}"
        return WeightsVerdict(status, False, REASON_RETRYING, status.message)
    if running:
        status.state, status.summary = MODEL_DOWNLOADING, "Downloading"
        status.message = f"the fetcher runs on node {_node_of(running[0]) or '(unknown)'}"
        return WeightsVerdict(status, False, REASON_DOWNLOADING, status.message)
    return _pending(status, "the fetch Job's pod has not started yet")


def node_lost(verdict: WeightsVerdict, nodes: Collection[str]) -> WeightsVerdict | None:
    """A Ready verdict whose node is no longer a Node of the cluster: Pending again (its Job is
    deleted and runs anew, on a node the pod may still reach), never a pod pinned to nowhere."""
    node = verdict.status.node
    if not verdict.ready or node is None or node in nodes:
        return None
    status = ModelStatus.from_dict(verdict.status.to_dict())
    status.node = None
    return _pending(status, f"node {node}, which held the weights, is gone: fetching them again")


def _pending(status: ModelStatus, message: str) -> WeightsVerdict:
    status.state, status.summary, status.message = MODEL_PENDING, "Pending", message
    return WeightsVerdict(status, False, REASON_FETCH_PENDING, message)


def _downloading(status: ModelStatus, record: Progress, node: str | None) -> WeightsVerdict:
    status.state = MODEL_DOWNLOADING
    status.bytes_done = record.bytes_done
    status.bytes_total = record.bytes_total
    status.bytes_per_second = int(record.bytes_per_second)
    if record.bytes_total:
        percent = min(100, record.bytes_done * 100 // record.bytes_total)
        status.summary = f"Downloading {percent}%"
        done = f"{percent}% of {_size(record.bytes_total)}"
    else:
        status.summary = "Downloading"
        done = f"{_size(record.bytes_done)} of an unknown size"
    rate = record.bytes_per_second / _MIB
    status.message = f"{done} at {rate:.1f} MiB/s on node {node or '(unknown)'}"
    return WeightsVerdict(status, False, REASON_DOWNLOADING, status.message)


def _dict_condition(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _job_condition(job: Mapping[str, Any], kind: str) -> bool:
    found = _dict_condition((job.get("status") or {}).get("conditions") or (), kind)
    return found is not None and found.get("status") == TRUE


def _job_failure_message(job: Mapping[str, Any]) -> str:
    conditions = (job.get("status") or {}).get("conditions") or ()
    found = _dict_condition(conditions, "Failed") or _dict_condition(conditions, "FailureTarget")
    return str((found or {}).get("message") or "the fetch Job failed")


def _node_of(pod: Mapping[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def _succeeded_node(pods: Sequence[Mapping[str, Any]]) -> str | None:
    for pod in pods:
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            return _node_of(pod)
    return None


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or ():
        if container.get("name") == FETCH_CONTAINER:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated:
                return dict(terminated)
    return None


def termination_reason(message: str) -> tuple[str, str]:
    """``REASON: text`` of the fetcher's termination message, as (reason, whole message); a
    message of another shape (the log's tail, or a kubelet's) is ``FetchFailed``."""
    head, _, _ = message.partition(":")
    if head in {reason.value for reason in Reason}:
        return head, message.strip()
    return REASON_FETCH_FAILED, message.strip() or "the fetch container failed"


def _last_failure(pods: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """The reason and message of the most recent failed fetch pod, if any."""
    failed = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Failed":
            continue
        terminated = _terminated(pod) or {}
        finished = str(terminated.get("finishedAt") or "")
        message = str(terminated.get("message") or "")
        if not message:
            code = terminated.get("exitCode")
            message = f"the fetch container exited with code {code}"
        failed.append((finished, str(pod["metadata"].get("name")), message))
    if not failed:
        return None
    return termination_reason(max(failed)[2])


def transition_event(before: ModelStatus | None, after: ModelStatus) -> ModelEvent | None:
    """The event (type, reason, note) a change of ``status.model.state`` tells, if any."""
    was = before.state if before is not None and before.source == after.source else None
    if was == after.state or after.summary is None:
        newly_retrying = before is not None and before.summary != "Retrying"
        if was == MODEL_DOWNLOADING and after.summary == "Retrying" and newly_retrying:
            return ModelEvent("Warning", EVENT_DOWNLOAD_RETRYING, after.message or "retrying")
        return None
    if after.state == MODEL_DOWNLOADING:
        return ModelEvent("Normal", EVENT_DOWNLOAD_STARTED, f"fetching {after.source}")
    if after.state == MODEL_READY and after.fetch_job is not None:
        return ModelEvent("Normal", EVENT_DOWNLOAD_SUCCEEDED, after.message or "downloaded")
    if after.state == MODEL_FAILED:
        return ModelEvent("Warning", EVENT_DOWNLOAD_FAILED, after.message or "the download failed")
    return None
