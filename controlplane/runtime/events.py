"""An event recorder for ``events.k8s.io/v1``, with repeats folded into an event series.

Reconcilers emit the same event many times (a deferral retried every few seconds). Writing a new
Event object each time floods etcd and ``kubectl describe``; instead, an event identical in
object, type, reason, action and note to one recorded in the last few minutes updates that
event's ``series`` (count and last observed time).

Recording never blocks a reconcile and never fails it: events go through a bounded buffer to a
background writer, and a full buffer or a failed write drops the event with a log line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from cachetools import TTLCache

from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import KubeError, NamespaceTerminating, NotFound
from controlplane.runtime.resources import EVENTS
from controlplane.runtime.timeutil import micro_time

log = logging.getLogger(__name__)

#: How long an event stays open for folding repeats into its series (client-go: 6 minutes).
SERIES_WINDOW_SECONDS = 360.0
SERIES_CACHE_SIZE = 4096
BUFFER_SIZE = 1000
#: Where events about cluster-scoped objects go.
CLUSTER_EVENT_NAMESPACE = "default"

EventType = Literal["Normal", "Warning"]


@dataclass
class _Series:
    name: str
    namespace: str
    count: int


@dataclass(frozen=True, slots=True)
class _Pending:
    regarding: dict[str, Any]
    type: EventType
    reason: str
    action: str
    note: str


class EventRecorder:
    """``event(obj, type, reason, action, note)``; run :meth:`start` as a runnable."""

    needs_leader_election = False

    def __init__(self, client: KubeClient, controller: str, instance: str) -> None:
        self.client = client
        self.controller = controller
        self.instance = instance
        self._series: TTLCache[tuple[str, ...], _Series] = TTLCache(
            maxsize=SERIES_CACHE_SIZE, ttl=SERIES_WINDOW_SECONDS
        )
        self._send, self._receive = anyio.create_memory_object_stream[_Pending](BUFFER_SIZE)

    def event(
        self, regarding: dict[str, Any], type: EventType, reason: str, action: str, note: str
    ) -> None:
        """Record an event about ``regarding`` (an API object). Never raises, never blocks."""
        meta = regarding.get("metadata") or {}
        reference = {
            "apiVersion": regarding.get("apiVersion", ""),
            "kind": regarding.get("kind", ""),
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        pending = _Pending(reference, type, reason, action, note[:1024])
        try:
            self._send.send_nowait(pending)
        except anyio.WouldBlock:
            log.warning("event buffer full; dropped %s %s on %s", type, reason, reference["name"])

    async def start(self) -> None:
        async with self._receive:
            async for pending in self._receive:
                try:
                    await self._write(pending)
                except NamespaceTerminating:
                    log.debug("event %s dropped: its namespace is being deleted", pending.reason)
                except KubeError as err:
                    log.warning("could not record event %s: %s", pending.reason, err)

    async def _write(self, pending: _Pending) -> None:
        ref = pending.regarding
        key = (ref["uid"], pending.type, pending.reason, pending.action, pending.note)
        now = micro_time()
        series = self._series.get(key)
        if series is not None:
            series.count += 1
            patch = {"series": {"count": series.count, "lastObservedTime": now}}
            try:
                await self.client.patch(EVENTS, series.name, patch, series.namespace)
                return
            except NotFound:
                del self._series[key]  # expired or deleted: start a new event
        namespace = ref["namespace"] or CLUSTER_EVENT_NAMESPACE
        created = await self.client.create(
            EVENTS,
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                # client-go's naming: the object's name and the time, unique enough and readable.
                "metadata": {
                    "name": f"{ref['name'] or 'object'}.{time.time_ns():x}",
                    "namespace": namespace,
                },
                "eventTime": now,
                "regarding": {k: v for k, v in ref.items() if v},
                "type": pending.type,
                "reason": pending.reason,
                "action": pending.action,
                "note": pending.note,
                "reportingController": self.controller,
                "reportingInstance": self.instance,
            },
        )
        self._series[key] = _Series(created["metadata"]["name"], namespace, 1)
