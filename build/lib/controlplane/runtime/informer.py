"""List-then-watch into a cache, following client-go's reflector rules.

* The first list asks for ``resourceVersion="0"`` (served from the API server's watch cache); a
  relist after ``410 Gone`` or "too large resource version" asks for ``""`` (a consistent read),
  since the cache's version is exactly what was found to be unusable.
* The watch starts from the list's ``resourceVersion`` with bookmarks on and a random server
  timeout of 5 to 10 minutes, so a fleet of informers does not reconnect in step.
* A watch the server ends normally is reopened from the last seen version; no relist.
* ``410 Gone`` (or an ``ERROR`` event carrying it) means the version fell out of etcd's history:
  relist. Other failures back off 0.8 s to 30 s with jitter, then re-watch from the last version.
* A watchdog ends a stream that stays silent past its server timeout plus a grace period.
* Objects that vanished while the informer was not watching are reported on relist as deletions
  carrying :class:`DeletedFinalStateUnknown`: the last state the cache knew, not the final one.

Handlers run inline, in event order, on the informer's task: they must be quick (a controller's
handler only enqueues a key).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import msgspec

from controlplane.runtime.backoff import Backoff
from controlplane.runtime.cache import IndexFunc, Object, Store, StoreChange, object_key
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import (
    ApiError,
    Gone,
    KubeError,
    ResourceVersionTooLarge,
)
from controlplane.runtime.resources import Resource

log = logging.getLogger(__name__)

#: Server-side watch timeout is drawn from this range (client-go: 5 to 10 minutes).
WATCH_TIMEOUT_MIN_SECONDS = 300
WATCH_TIMEOUT_MAX_SECONDS = 600
#: A stream silent for its server timeout plus this long is considered dead.
WATCHDOG_GRACE_SECONDS = 30.0
#: Objects per page when a relist cannot be served from the watch cache.
RELIST_PAGE_SIZE = 500

Transform = Callable[[Object], Object]
_DECODE = msgspec.json.Decoder().decode


def drop_managed_fields(obj: Object) -> Object:
    """The default transform: ``managedFields`` are often half an object and never read here."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


@dataclass(frozen=True, slots=True)
class DeletedFinalStateUnknown:
    """A deletion seen only through a relist: ``obj`` is the last state the cache held."""

    key: str
    obj: Object


class EventHandler(Protocol):
    """What an informer tells its subscribers. ``initial`` marks the first list's objects."""

    def on_add(self, obj: Object, initial: bool) -> None: ...

    def on_update(self, old: Object, new: Object) -> None: ...

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None: ...


@dataclass
class InformerSettings:
    """Tunables, with client-go's defaults; tests shorten the watch timeout."""

    watch_timeout_range: tuple[int, int] = (WATCH_TIMEOUT_MIN_SECONDS, WATCH_TIMEOUT_MAX_SECONDS)
    watchdog_grace: float = WATCHDOG_GRACE_SECONDS
    relist_page_size: int = RELIST_PAGE_SIZE
    backoff: Backoff = field(default_factory=Backoff)
    rand: random.Random = field(default_factory=random.Random)


class Informer:
    """Keeps :attr:`store` equal to the server's state of one resource (and scope)."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = drop_managed_fields,
        indexers: Mapping[str, IndexFunc] | None = None,
        settings: InformerSettings | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform
        self.settings = settings or InformerSettings()
        self.store = Store(indexers)
        self._handlers: list[EventHandler] = []
        self._synced = anyio.Event()
        #: The version the next watch starts from; "" until the first list.
        self.last_resource_version = ""
        self._relist_consistently = False
        #: Counters for tests and metrics: how often each path ran.
        self.stats = {"lists": 0, "watches": 0, "events": 0, "bookmarks": 0, "gone": 0, "errors": 0}

    # -- subscription and reads ------------------------------------------------------------------

    def add_handler(self, handler: EventHandler) -> None:
        """Subscribe; a late subscriber is first told of every cached object as an initial add."""
        self._handlers.append(handler)
        if self._synced.is_set():
            for obj in self.store.objects():
                handler.on_add(obj, True)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    def describe(self) -> str:
        scope = f" in {self.namespace}" if self.namespace else ""
        return f"{self.resource.plural}.{self.resource.group or 'core'}{scope}"

    # -- the reflector loop ----------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled. Resumable: a second run continues from its version."""
        while True:
            try:
                if not self.last_resource_version:
                    await self._list()
                await self._watch()
            except (Gone, ResourceVersionTooLarge) as err:
                self.stats["gone"] += 1
                log.info("%s: %s; relisting", self.describe(), err.message)
                self.last_resource_version = ""
                self._relist_consistently = True
            except (KubeError, OSError) as err:
                self.stats["errors"] += 1
                delay = self.settings.backoff.next_delay()
                log.warning("%s: %s; retrying in %.1f s", self.describe(), err, delay)
                await anyio.sleep(delay)

    async def _list(self) -> None:
        consistent = self._relist_consistently
        pages = [
            page
            async for page in self.client.list_pages(
                self.resource,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                resource_version="" if consistent else "0",
                page_size=self.settings.relist_page_size,
            )
        ]
        self.stats["lists"] += 1

        def objects() -> Iterator[Object]:
            # Decoded, stored and announced one at a time (see RawPage for why).
            for page in pages:
                for obj in page.objects():
                    yield self._transform(obj)

        initial = not self._synced.is_set()
        self.store.replace(objects(), lambda change: self._announce(change, initial))
        self.last_resource_version = pages[-1].resource_version if pages else ""
        self._relist_consistently = False
        self._synced.set()

    def _announce(self, change: StoreChange, initial: bool) -> None:
        for handler in self._handlers:
            if change.kind == "added":
                handler.on_add(change.obj, initial)
            elif change.kind == "updated" and change.old is not None:
                handler.on_update(change.old, change.obj)
            elif change.kind == "deleted":
                handler.on_delete(DeletedFinalStateUnknown(object_key(change.obj), change.obj))

    async def _watch(self) -> None:
        low, high = self.settings.watch_timeout_range
        timeout_seconds = self.settings.rand.randint(low, high)
        self.stats["watches"] += 1
        async with self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self.last_resource_version,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=True,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            idle_timeout=timeout_seconds + self.settings.watchdog_grace,
        ) as events:
            async for event in events:
                self._apply(event.type, event.object)
        # The server ended the watch at its timeout: the loop re-watches from the last version.

    def _apply(self, kind: str, obj: Object) -> None:
        version = str(obj.get("metadata", {}).get("resourceVersion", ""))
        if kind == "BOOKMARK":
            self.stats["bookmarks"] += 1
            if version:
                self.last_resource_version = version
            return
        self.stats["events"] += 1
        obj = self._transform(obj)
        if kind in ("ADDED", "MODIFIED"):
            old_raw = self.store.upsert(obj)
            if self._handlers:
                if old_raw is None:
                    for handler in self._handlers:
                        handler.on_add(obj, False)
                else:
                    old = _DECODE(old_raw)
                    for handler in self._handlers:
                        handler.on_update(old, obj)
        elif kind == "DELETED":
            self.store.delete(object_key(obj))
            for handler in self._handlers:
                handler.on_delete(obj)
        else:
            raise ApiError(500, "UnknownWatchEvent", f"unexpected watch event type {kind!r}")
        if version:
            self.last_resource_version = version

    def _transform(self, obj: Object) -> Object:
        return self.transform(obj) if self.transform is not None else obj
