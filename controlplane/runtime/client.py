"""The framework's own asynchronous API client: plain dicts in and out, every request timed out.

*Why one module of this size:* one class, :class:`KubeClient`, whose verbs share the request,
timeout and error paths; nothing in it stands alone.

The official client's typed models cost about 75 times more per watch event than decoding with a
fast parser (measured when the framework was designed; docs/framework.md), so requests and watch
streams are made here over ``httpx`` and decoded with ``msgspec`` into plain dicts. Only
configuration and authentication come from the ``kubernetes`` package (see
:mod:`controlplane.runtime.config`).

The client never retries on its own: whether a failed request may be repeated is the caller's
decision (an informer relists, a preflight backs off with jitter, a writer re-reads on conflict).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Self, TypedDict, Unpack

import httpx
import msgspec
from opentelemetry import trace

from controlplane.runtime.config import ClientConfig
from controlplane.runtime.errors import ApiError, RequestTimeout, TransportError, api_error
from controlplane.runtime.objects import Object
from controlplane.runtime.resources import Resource

#: Asked before every request that is not a read: raises to refuse it (:meth:`KubeClient.fenced`).
WriteGuard = Callable[[str, str], None]
#: The methods a guard is not asked about.
READ_METHODS: Final = frozenset({"GET", "HEAD"})

#: Seconds any single request may take unless the caller says otherwise.
DEFAULT_TIMEOUT = 30.0
#: Objects per page when listing (the API server's own default chunk size).
LIST_PAGE_SIZE = 500
USER_AGENT = "modelpool-controlplane/0.1"

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"  # JSON is YAML, so the body is still JSON

tracer = trace.get_tracer("controlplane.runtime.client")

PatchType = Literal[
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
]


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The items of a list and the collection's ``resourceVersion`` to watch from."""

    items: list[Object]
    resource_version: str


class RequestOptions(TypedDict, total=False):
    """What one request may carry besides its method and path (see :meth:`KubeClient._send`)."""

    params: Mapping[str, str | int] | None
    body: Any
    content_type: str
    timeout: float | None


class _RawList(msgspec.Struct):
    """A list response with its items split but not decoded."""

    items: list[msgspec.Raw] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    kind: str = ""
    apiVersion: str = ""  # noqa: N815 (the API's own name)


_RAW_LIST = msgspec.json.Decoder(_RawList)
_DECODE = msgspec.json.Decoder().decode
_ENCODE = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class RawPage:
    """One page of a list whose items are still JSON.

    Decoding a 5,000-object list at once builds every object's dicts at the same moment, and
    CPython keeps that memory after it is freed (fragmented arenas): an informer that decodes
    and stores items one at a time instead holds about 1.3x the objects' JSON, not 6x.
    """

    items: list[msgspec.Raw]
    resource_version: str
    continue_token: str
    #: The items' ``kind`` and ``apiVersion``, which a list gives once for all (``DeploymentList``)
    #: and the API server leaves out of each item.
    item_kind: str = ""
    api_version: str = ""

    def objects(self) -> Iterator[Object]:
        """Decode the items one by one, releasing each raw slice as it goes. Each gets the
        ``kind`` and ``apiVersion`` a watch event's object carries, so an object is the same
        whether a list or a watch brought it (a child compared with what is wanted would
        otherwise differ until its next change)."""
        for index, raw in enumerate(self.items):
            self.items[index] = _EMPTY_RAW
            obj = _DECODE(raw)
            if isinstance(obj, dict):
                if self.item_kind:
                    obj.setdefault("kind", self.item_kind)
                if self.api_version:
                    obj.setdefault("apiVersion", self.api_version)
            yield obj


_EMPTY_RAW = msgspec.Raw(b"null")


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``, and its object."""

    type: str
    object: Object


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise ValueError("the object has no metadata.name")
    return meta


def _decode_error(response: httpx.Response) -> ApiError:
    status: dict[str, Any] | None = None
    with contextlib.suppress(msgspec.DecodeError):
        decoded = _DECODE(response.content) if response.content else None
        if isinstance(decoded, dict):
            status = decoded
    if status is None and response.content:
        status = {"message": response.text[:500]}
    return api_error(response.status_code, status, response.headers.get("Retry-After"))


class KubeClient:
    """Verbs on API resources. Use as ``async with KubeClient(config) as client``."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_connections: int = 100,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.config = config
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=config.server,
            verify=config.ssl_context,
            timeout=timeout,
            headers={"User-Agent": user_agent, "Accept": JSON},
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=20),
            transport=httpx.AsyncHTTPTransport(retries=0, verify=config.ssl_context),
        )
        self._write_guard: WriteGuard | None = None

    def fenced(self, guard: WriteGuard) -> KubeClient:
        """A view of this client (same connections) that asks ``guard(method, path)`` before
        every write and sends nothing when it raises; reads and watches are not asked.

        The manager gives its leader-only runnables such a view, so that a leader that was
        paused past its Lease cannot act on what it believed before (docs/faults.md, "Fencing").
        Close the client it was made from, not the view.
        """
        view = copy.copy(self)
        view._write_guard = guard
        return view

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- raw requests -------------------------------------------------------------------------

    async def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> Object:
        """One request; returns the decoded body or raises a typed :class:`ApiError`."""
        content = await self._send(method, path, **options)
        if not content:
            return {}
        decoded = _DECODE(content)
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> bytes:
        """One request; returns the raw body of a successful answer."""
        if self._write_guard is not None and method not in READ_METHODS:
            self._write_guard(method, path)
        headers = self.config.auth_headers()
        content: bytes | None = None
        if body is not None:
            content = _ENCODE(body)
            headers.append(("Content-Type", content_type))
        with tracer.start_as_current_span(
            f"kube {method}", kind=trace.SpanKind.CLIENT, attributes={"http.route": path}
        ) as span:
            try:
                response = await self._http.request(
                    method,
                    path,
                    params=params,
                    content=content,
                    headers=headers,
                    timeout=timeout if timeout is not None else self.timeout,
                )
            except httpx.TimeoutException as err:
                span.set_status(trace.StatusCode.ERROR, "client timeout")
                raise RequestTimeout(
                    f"{method} {path}: no answer in time ({type(err).__name__})"
                ) from err
            except httpx.TransportError as err:
                span.set_status(trace.StatusCode.ERROR, type(err).__name__)
                raise TransportError(f"{method} {path}: {type(err).__name__}: {err}") from err
            span.set_attribute("http.status_code", response.status_code)
            if response.status_code >= 400:
                span.set_status(trace.StatusCode.ERROR, str(response.status_code))
                raise _decode_error(response)
        return response.content

    async def get_bytes(
        self,
        path: str,
        params: Mapping[str, str | int] | None = None,
        *,
        timeout: float | None = None,
    ) -> bytes:
        """A GET whose answer is not JSON (a pod's log, ``pods/log``): the body as it came."""
        return await self._send("GET", path, params=params, timeout=timeout)

    # -- verbs --------------------------------------------------------------------------------

    async def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Object:
        return await self.request("GET", resource.path(namespace, name, subresource))

    async def list_pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> AsyncIterator[RawPage]:
        """Each page of a list, its items left undecoded (see :class:`RawPage`)."""
        params: dict[str, str | int] = {"limit": page_size}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        while True:
            page = _RAW_LIST.decode(
                await self._send("GET", resource.path(namespace), params=params)
            )
            token = str(page.metadata.get("continue") or "")
            item_kind = page.kind.removesuffix("List") if page.kind.endswith("List") else ""
            yield RawPage(
                page.items,
                str(page.metadata.get("resourceVersion", "")),
                token,
                item_kind,
                page.apiVersion,
            )
            if not token:
                return
            # The selectors are not in the token: every page must repeat them (the server would
            # otherwise answer the rest of the list unfiltered); a resourceVersion must not be.
            params.pop("resourceVersion", None)
            params["continue"] = token

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> ObjectList:
        """All objects, page by page; ``resource_version="0"`` may come from the watch cache."""
        items: list[Object] = []
        version = ""
        async for page in self.list_pages(
            resource,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            page_size=page_size,
        ):
            items.extend(page.objects())
            version = page.resource_version
        return ObjectList(items, version)

    async def create(
        self,
        resource: Resource,
        obj: Object,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Object:
        namespace = namespace or (obj.get("metadata") or {}).get("namespace")
        if subresource is not None:
            path = resource.path(namespace, _meta(obj)["name"], subresource)
        else:
            path = resource.path(namespace)
        return await self.request("POST", path, body=obj)

    async def update(
        self, resource: Resource, obj: Object, *, subresource: str | None = None
    ) -> Object:
        """Replace the object; a ``metadata.resourceVersion`` makes it optimistic (409 if stale)."""
        meta = _meta(obj)
        return await self.request(
            "PUT", resource.path(meta.get("namespace"), meta["name"], subresource), body=obj
        )

    async def update_status(self, resource: Resource, obj: Object) -> Object:
        return await self.update(resource, obj, subresource="status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = MERGE_PATCH,
        subresource: str | None = None,
    ) -> Object:
        return await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=patch,
            content_type=patch_type,
        )

    async def apply(
        self,
        resource: Resource,
        obj: Object,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
    ) -> Object:
        """Server-side apply ``obj`` as ``field_manager``."""
        meta = _meta(obj)
        params: dict[str, str | int] = {"fieldManager": field_manager}
        if force:
            params["force"] = "true"
        return await self.request(
            "PATCH",
            resource.path(meta.get("namespace"), meta["name"], subresource),
            params=params,
            body=obj,
            content_type=APPLY_PATCH,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        uid: str | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
    ) -> Object:
        """Delete, optionally only if the object is still at ``resource_version`` / ``uid``."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {
            k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v is not None
        }
        if preconditions:
            options["preconditions"] = preconditions
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", resource.path(namespace, name), body=options)

    # -- watch --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
        idle_timeout: float | None = None,
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """Open a watch stream; iterate the yielded iterator for events.

        ``idle_timeout`` is the watchdog: a stream silent for longer raises :class:`RequestTimeout`.
        An ``ERROR`` event is raised as its typed error (``Gone`` for an expired version).
        """
        params: dict[str, str | int] = {"watch": "1"}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            params["timeoutSeconds"] = timeout_seconds
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        timeout = httpx.Timeout(self.timeout, read=idle_timeout)
        path = resource.path(namespace)
        try:
            async with self._http.stream(
                "GET", path, params=params, headers=self.config.auth_headers(), timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise _decode_error(response)
                yield _events(response)
        except httpx.TimeoutException as err:
            raise RequestTimeout(
                f"watch {path}: stream idle or unanswered ({type(err).__name__})"
            ) from err
        except httpx.TransportError as err:
            raise TransportError(f"watch {path}: {type(err).__name__}: {err}") from err


async def _events(response: httpx.Response) -> AsyncIterator[WatchEvent]:
    """Split the stream into lines and decode each; raises on ``ERROR`` events."""
    pending = b""
    async for chunk in response.aiter_bytes():
        pending += chunk
        if b"\n" not in pending:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            event = _DECODE(line)
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                raise api_error(int(obj.get("code") or 500), obj)
            yield WatchEvent(kind, obj)
