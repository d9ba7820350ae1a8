"""The KV cache's two steps on a member's pods: save before a lowering, restore before Ready.

*Why a module of its own:* the rules of the KV cache are pure and live in
:mod:`~controlplane.controllers.inferenceservice.kvcache`; carrying them out is I/O of its own
kind (the server's slot API, bounded by ``timeoutSeconds``; ``status.kvCache`` written again on
every conflict, because a lost save record is a lost restore; the pod's readiness gate patched
on ``pods/status``) with state of its own (the gates already opened, the pods not yet behind
their Service). The orchestrator only decides *when*: a save just before the Deployment is
lowered, a restore after the children are applied, both inside the same reconcile so that they
are ordered with the Deployment writes of the same InferenceService.

**The KV cache** (``spec.kvCache``, docs/kv-cache.md): before the Deployment of an enabled
InferenceService is lowered to 0, the used slots of its Ready pod are saved
(:class:`~controlplane.probes.slotcache.SlotCacheClient`, bounded by ``timeoutSeconds``) and
``status.kvCache.lastSave`` is written, *then* the Deployment is lowered, whatever the save's
outcome. A pod that carries the restore readiness gate gets the saved slots restored once its
containers are ready (bounded the same way), ``status.kvCache.lastRestore`` written, and the
gate's condition set True on ``pods/status`` (a strategic-merge patch: conditions merge by type).
A save or restore that fails or times out is a Warning event and
``modelpool_kv_cache_operations_total{outcome}``; it never fails the reconcile. A worker is held
for at most ``timeoutSeconds``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from controlplane.api.v1alpha1 import InferenceService, KvCacheOperation
from controlplane.clock import TimeSource
from controlplane.controllers.inferenceservice import kvcache
from controlplane.controllers.inferenceservice.desired import PORT_NAME
from controlplane.controllers.inferenceservice.kvcache import RestoreStep
from controlplane.controllers.inferenceservice.metrics import (
    KV_CACHE_DURATION,
    KV_CACHE_OPERATIONS,
)
from controlplane.probes.slotcache import RESTORE, SAVE, CacheOutcome, CacheReport, SlotCacheClient
from controlplane.runtime.cache import Object
from controlplane.runtime.client import STRATEGIC_MERGE_PATCH, KubeClient
from controlplane.runtime.endpoints import pod_urls
from controlplane.runtime.errors import Conflict, NotFound
from controlplane.runtime.events import EventRecorder
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import PODS

#: The log of the reconciler this was split from: its lines keep their ``logger``.
log = logging.getLogger("controlplane.controllers.inferenceservice.reconciler")

#: Writes of ``status.kvCache`` retried on a conflict (each re-reads the live object): the record
#: of a save must not be lost to a concurrent status write, or the restore would not find it.
KV_STATUS_WRITE_ATTEMPTS: Final = 4
#: How soon a pod whose server is loaded but not yet behind its Service is looked at again.
KV_ENDPOINT_RECHECK_SECONDS: Final = 0.5


class KvCacheSteps:
    """Saves and restores a member's KV cache, records each, and opens the restore gate."""

    def __init__(
        self,
        recorder: EventRecorder,
        slot_cache: SlotCacheClient,
        endpoint_slices: Informer,
        *,
        clock: TimeSource,
        wall_clock: Callable[[], datetime],
    ) -> None:
        self.recorder = recorder
        self.slot_cache = slot_cache
        self.endpoint_slices = endpoint_slices
        self.clock = clock
        self.wall_clock = wall_clock
        #: Per pod uid: when a pod to restore into was first seen loaded but not yet behind its
        #: Service (on :attr:`clock`); past ``timeoutSeconds`` the restore is given up.
        self._unlisted_since: dict[str, float] = {}
        #: Pods (uids) whose restore gate we opened and whose cached copy does not show it yet: a
        #: reconcile on that stale cache must not restore them a second time.
        self._gates_opened: set[str] = set()

    async def save(
        self, client: KubeClient, key: str, isvc: InferenceService, pods: Sequence[Object]
    ) -> InferenceService:
        """Before the Deployment is lowered: save the Ready pod's used slots (bounded) and record
        it in ``status.kvCache.lastSave``. Returns the InferenceService as last written."""
        if not isvc.spec.kv_cache_enabled() or isvc.spec.kv_cache is None:
            return isvc
        pod = kvcache.pod_to_save_from(pods)
        url = None
        if pod is not None:
            url = self._pod_url(isvc, pod)
        if pod is None or url is None:
            log.info("%s: no ready server to save the KV cache from", key)
            return isvc
        pod_name = str(pod["metadata"]["name"])
        report = await self.slot_cache.save(url, timeout=isvc.spec.kv_cache.timeout(), member=key)
        self._record(isvc, SAVE, report, pod_name)
        record = kvcache.operation_record(report, pod_name, self.wall_clock())
        return await self._write_kv_status(client, isvc, save=record)

    async def restore(
        self, client: KubeClient, key: str, isvc: InferenceService, pods: Sequence[Object]
    ) -> tuple[InferenceService, float | None]:
        """Each pod with the restore gate not yet True: restore (bounded), record, open the gate.
        Returns the InferenceService as last written and when to look again, if needed."""
        requeue: float | None = None
        for pod in pods:
            step = kvcache.restore_step(pod, isvc)
            uid = str(pod["metadata"].get("uid"))
            if step is RestoreStep.DONE:
                self._gates_opened.discard(uid)
                continue
            if step is RestoreStep.WAIT or uid in self._gates_opened:
                continue
            pod_name = str(pod["metadata"]["name"])
            if step is RestoreStep.NOTHING:
                why = "spec.kvCache is off" if not isvc.spec.kv_cache_enabled() else "nothing saved"
                await self._open_gate(client, isvc, pod, kvcache.restore_verdict(None, why))
                continue
            assert isvc.spec.kv_cache is not None  # RESTORE is only for an enabled cache
            timeout = isvc.spec.kv_cache.timeout()
            url = self._pod_url(isvc, pod)
            if url is None:
                # Judged on this controller's clock from when it first saw the server loaded but
                # unlisted, never from the kubelet's timestamps (another machine's clock).
                since = self._unlisted_since.setdefault(uid, self.clock())
                if self.clock() - since < timeout:
                    requeue = KV_ENDPOINT_RECHECK_SECONDS
                    continue
                report = CacheReport(
                    CacheOutcome.FAILED,
                    f"the server was not listed behind its Service within {timeout} s",
                )
            else:
                slots = kvcache.slots_to_restore(isvc.status.kv_cache)
                report = await self.slot_cache.restore(url, slots, timeout=timeout, member=key)
            self._unlisted_since.pop(uid, None)
            self._record(isvc, RESTORE, report, pod_name)
            record = kvcache.operation_record(report, pod_name, self.wall_clock())
            isvc = await self._write_kv_status(client, isvc, restore=record)
            await self._open_gate(client, isvc, pod, kvcache.restore_verdict(report))
        return isvc, requeue

    def _pod_url(self, isvc: InferenceService, pod: Mapping[str, Any]) -> str | None:
        urls = pod_urls(self.endpoint_slices.store, isvc.namespace or "", isvc.name, PORT_NAME)
        return urls.get(str(pod["metadata"]["name"]))

    def _record(
        self, isvc: InferenceService, operation: str, report: CacheReport, pod: str
    ) -> None:
        """The metric, the log line and the event of one save or restore."""
        namespace = isvc.namespace or ""
        KV_CACHE_OPERATIONS.labels(namespace, isvc.name, operation, report.outcome.value).inc()
        KV_CACHE_DURATION.labels(operation).observe(report.seconds)
        failed = report.outcome in (
            CacheOutcome.FAILED,
            CacheOutcome.PARTIAL,
            CacheOutcome.TIMED_OUT,
        )
        log.log(logging.WARNING if failed else logging.INFO, "%s/%s: KV cache %s of pod %s: %s",
                namespace, isvc.name, operation, pod, report.detail)  # fmt: skip
        if operation == SAVE:
            reason = kvcache.EVENT_SAVE_FAILED if failed else kvcache.EVENT_SAVED
        else:
            reason = kvcache.EVENT_RESTORE_FAILED if failed else kvcache.EVENT_RESTORED
        note = f"pod {pod}: {report.outcome.value}: {report.detail}"
        self.recorder.event(
            isvc.to_dict(),
            "Warning" if failed else "Normal",
            reason,
            "SaveKvCache" if operation == SAVE else "RestoreKvCache",
            note,
        )

    async def _write_kv_status(
        self,
        client: KubeClient,
        isvc: InferenceService,
        *,
        save: KvCacheOperation | None = None,
        restore: KvCacheOperation | None = None,
    ) -> InferenceService:
        """Write ``status.kvCache`` with the new record, re-reading the live object on a conflict
        (the record must not be lost). Returns the InferenceService as written (unchanged when
        it is gone or every attempt conflicted)."""
        current = isvc
        for _ in range(KV_STATUS_WRITE_ATTEMPTS):
            current.status.kv_cache = kvcache.with_operation(
                current.status.kv_cache, save=save, restore=restore
            )
            try:
                written = await client.update_status(InferenceService.resource(), current.to_dict())
                return InferenceService.from_dict(written)
            except Conflict:
                try:
                    live = await client.get(InferenceService.resource(), isvc.name, isvc.namespace)
                except NotFound:
                    return isvc
                current = InferenceService.from_dict(live)
            except NotFound:
                return isvc
        log.warning("%s/%s: status.kvCache not written: %d conflicts in a row",
                    isvc.namespace, isvc.name, KV_STATUS_WRITE_ATTEMPTS)  # fmt: skip
        return isvc

    async def _open_gate(
        self,
        client: KubeClient,
        isvc: InferenceService,
        pod: Mapping[str, Any],
        verdict: kvcache.RestoreVerdict,
    ) -> None:
        """Set the pod's restore condition True (the pod may then become Ready)."""
        meta = pod["metadata"]
        patch = kvcache.gate_condition_patch(verdict, self.wall_clock())
        try:
            await client.patch(
                PODS,
                meta["name"],
                patch,
                meta["namespace"],
                patch_type=STRATEGIC_MERGE_PATCH,
                subresource="status",
            )
        except NotFound:
            return
        self._gates_opened.add(str(meta.get("uid")))
        log.info("%s/%s: pod %s may be Ready (%s)", isvc.namespace, isvc.name, meta["name"],
                 verdict.reason)  # fmt: skip
