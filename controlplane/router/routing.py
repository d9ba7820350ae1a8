"""Which backend, and which member of it, a request's ``model`` names.

For an ``inferenceServiceRef`` backend the backend's name is the model. For a ``poolRef`` backend
every member's InferenceService ``spec.model.name`` is a model the pool serves, so a client asks
for ``qwen-2-7b`` and the proxy knows it is member ``qwen-2-7b`` of pool ``gpu-0``. No ``model``
means the router's ``defaultBackend`` (for a pool: its resident member, else its default).

**Never a second path to a pool member.** An ``inferenceServiceRef`` backend that names an
InferenceService a pool lists is routed as that pool's member (the pool whose claim on it stands,
:func:`~controlplane.api.v1alpha1.membership.claiming_pool`), under the backend's name: the same
admission, hold, demand report and fenced drain as through a ``poolRef``. Forwarded straight to
it, the pool would drain or reclaim a member this router feeds, and cut its requests (issue 46).
The schema cannot refuse such a backend (it cannot see pool membership, which may also change
after the router is written), so it is served safely instead of refused.

Pure functions over plain dicts read from the caches, and :class:`RoutingTable`, which keeps the
table until told the caches changed (the proxy invalidates it on every router, pool and
InferenceService event, so it is never stale relative to the caches it was read from, and is not
rebuilt per request: bench/README.md, "Data path").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from controlplane.api.v1alpha1.modelpool import parse_duration as parse_duration  # re-exported
from controlplane.router.errors import InvalidRequest, ModelNotFound, ProxyNotReady
from controlplane.runtime.objects import ObjectView

#: Looks an object up by name in the router's namespace; None when absent.
Lookup = Callable[[str], ObjectView | None]
#: The pool whose claim on an InferenceService stands (by name); None when no pool lists it.
MemberPool = Callable[[str], str | None]


def no_pool(_: str) -> None:
    """A :data:`MemberPool` for a namespace without pools (tests of standalone routes)."""
    return None


@dataclass(frozen=True)
class Route:
    """Where a model is served: an InferenceService, alone (``pool`` None) or a pool member."""

    model: str
    member: str
    pool: str | None = None


def _backends(router: ObjectView) -> list[ObjectView]:
    return list((router.get("spec") or {}).get("backends") or [])


def _pool_members(pool: ObjectView) -> list[str]:
    members = (pool.get("spec") or {}).get("members") or []
    return [str((m.get("inferenceServiceRef") or {}).get("name")) for m in members]


def routed_pools(router: ObjectView | None, member_pool: MemberPool = no_pool) -> set[str]:
    """The pools ``router``'s backends go through (a ``poolRef``, or the pool of a member an
    ``inferenceServiceRef`` names): a replica reports to each of them from its start, so each
    pool's fenced drain knows every replica that may forward to its members."""
    found: set[str] = set()
    for backend in _backends(router or {}):
        name = (backend.get("poolRef") or {}).get("name")
        if not name and (ref := backend.get("inferenceServiceRef")):
            name = member_pool(str(ref.get("name")))
        if name:
            found.add(str(name))
    return found


def _isvc_route(name: str, ref: ObjectView, member_pool: MemberPool) -> Route:
    """An ``inferenceServiceRef`` backend's route: through the pool that holds its member, if a
    pool lists it (the module's docstring says why), else to the InferenceService alone."""
    member = str(ref.get("name"))
    return Route(name, member, member_pool(member))


def model_name(isvc: ObjectView | None, fallback: str) -> str:
    """The model an InferenceService serves (``spec.model.name``), else its own name."""
    if isvc is None:
        return fallback
    return str(((isvc.get("spec") or {}).get("model") or {}).get("name") or fallback)


def routing_table(
    router: ObjectView, pools: Lookup, isvcs: Lookup, member_pool: MemberPool = no_pool
) -> dict[str, Route]:
    """Every model the router serves, mapped to its route (first backend wins on a clash)."""
    table: dict[str, Route] = {}
    for backend in _backends(router):
        name = str(backend.get("name") or "")
        if ref := backend.get("inferenceServiceRef"):
            table.setdefault(name, _isvc_route(name, ref, member_pool))
        elif ref := backend.get("poolRef"):
            pool_name = str(ref.get("name"))
            pool = pools(pool_name)
            if pool is None:
                continue
            for member in _pool_members(pool):
                model = model_name(isvcs(member), member)
                table.setdefault(model, Route(model, member, pool_name))
    return table


def resolve(
    model: str | None,
    router: ObjectView,
    pools: Lookup,
    isvcs: Lookup,
    member_pool: MemberPool = no_pool,
) -> Route:
    """The route for ``model``; raises :class:`ModelNotFound` or :class:`InvalidRequest`."""
    if model is None:
        return _default_route(router, pools, isvcs, member_pool)
    route = routing_table(router, pools, isvcs, member_pool).get(model)
    if route is None:
        raise ModelNotFound(f"The model `{model}` does not exist")
    return route


class RoutingTable:
    """:func:`routing_table` of the router, kept until :meth:`invalidate` (call it whenever the
    router, a pool or an InferenceService changes); routes without a ``model`` (the router's
    default, which follows the pool's resident) are resolved afresh every time."""

    def __init__(
        self,
        router: Callable[[], ObjectView | None],
        pools: Lookup,
        isvcs: Lookup,
        member_pool: MemberPool = no_pool,
    ) -> None:
        self._router, self._pools, self._isvcs = router, pools, isvcs
        self._member_pool = member_pool
        self._table: dict[str, Route] | None = None

    def invalidate(self) -> None:
        self._table = None

    def resolve(self, model: str | None) -> Route:
        """The route for ``model``; raises :class:`ModelNotFound`, :class:`InvalidRequest`, or
        :class:`ProxyNotReady` while the router is not in the cache."""
        if model is not None and self._table is not None:
            route = self._table.get(model)
            if route is None:
                raise ModelNotFound(f"The model `{model}` does not exist")
            return route
        router = self._router()
        if router is None:
            raise ProxyNotReady("the ModelRouter is not found")
        if model is None:
            return _default_route(router, self._pools, self._isvcs, self._member_pool)
        self._table = routing_table(router, self._pools, self._isvcs, self._member_pool)
        return self.resolve(model)


def _default_route(
    router: ObjectView, pools: Lookup, isvcs: Lookup, member_pool: MemberPool
) -> Route:
    default = (router.get("spec") or {}).get("defaultBackend")
    backend = next((b for b in _backends(router) if b.get("name") == default), None)
    if not default or backend is None:
        raise InvalidRequest("you must provide a model parameter")
    if ref := backend.get("inferenceServiceRef"):
        return _isvc_route(str(default), ref, member_pool)
    pool_name = str((backend.get("poolRef") or {}).get("name"))
    pool = pools(pool_name)
    if pool is None:
        raise ModelNotFound(f"The default backend `{default}` has no pool `{pool_name}`")
    member = (pool.get("status") or {}).get("residentMember") or (pool.get("spec") or {}).get(
        "default"
    )
    members = _pool_members(pool)
    member = member if member in members else (members[0] if members else None)
    if member is None:
        raise ModelNotFound(f"The default backend `{default}` has no members")
    return Route(model_name(isvcs(member), member), member, pool_name)


#: The field each proxied path cannot do without, and what it must be (OpenAI's API reference).
REQUIRED_FIELDS: dict[str, tuple[str, tuple[type, ...], str]] = {
    "/v1/chat/completions": ("messages", (list,), "a non-empty list of messages"),
    "/v1/completions": ("prompt", (str, list), "a string or a list"),
    "/v1/embeddings": ("input", (str, list), "a string or a list"),
}


#: JSON nested deeper than this is refused with 400 (``--max-json-depth``): an OpenAI body with
#: tools whose parameters are JSON Schemas nests about 10 to 20 deep; the member's own parser
#: (llama.cpp's) recurses without a bound.
DEFAULT_MAX_JSON_DEPTH = 64


def validate_body(
    raw: bytes, path: str = "/v1/chat/completions", max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> dict[str, Any]:
    """The request body as a JSON object fit for ``path``; raises :class:`InvalidRequest`
    naming what is wrong (never anything else for a client's bytes).

    Checked before a request is held: a body the member would refuse must never move the slot
    (a request for a parked model with no ``messages`` used to force a swap, then get its 400).
    """
    try:
        body = msgspec.json.decode(raw) if raw else {}
    except msgspec.DecodeError as err:
        raise InvalidRequest(f"We could not parse the JSON body of your request: {err}") from err
    except UnicodeDecodeError as err:
        raise InvalidRequest(
            f"The JSON body of your request is not valid UTF-8 ({err.reason})"
        ) from err
    except RecursionError as err:
        raise InvalidRequest(
            f"The JSON body of your request is nested deeper than {max_depth} levels"
        ) from err
    if _deeper_than(body, raw, max_depth):
        raise InvalidRequest(
            f"The JSON body of your request is nested deeper than {max_depth} levels"
        )
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("`model` must be a string")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise InvalidRequest("`stream` must be a boolean")
    if path in REQUIRED_FIELDS:
        field, types, what = REQUIRED_FIELDS[path]
        value = body.get(field)
        if value is None:
            raise InvalidRequest(f"Missing required parameter: `{field}`")
        if not isinstance(value, types) or (field == "messages" and not value):
            raise InvalidRequest(f"`{field}` must be {what}")
        if isinstance(value, list) and field == "messages":
            _validate_messages(value)
    return body


def _deeper_than(body: Any, raw: bytes, limit: int) -> bool:
    """Whether the decoded ``body`` nests arrays and objects more than ``limit`` deep. Only
    walked when ``raw`` holds more than ``limit`` brackets at all, which an ordinary body does
    not: the fast path pays two byte counts."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _validate_messages(messages: list[Any]) -> None:
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"`messages[{i}]` must be an object with a string `role`")
