"""The simulator's router mode: llama-server ``--models-dir`` with a child simulator per model.

Why: the pool's slot runtime runs one long-lived llama-server per pool in llama.cpp's router mode
and loads and unloads models through its HTTP API. The simulator must answer that API as the
real router does (held to it by tests/e2e/test_llamacpp_contract.py), so everything built on it
can be tested without the real server.

Endpoints (as llama-server's router has them, ``tools/server/server-models.cpp``):

- ``GET /health`` (``/v1/health``): 200 ``{"status": "ok"}``: the router itself, whatever its
  models do.
- ``GET /models`` (``/v1/models``): ``{"data": [{"id", "status": {"value", "args"}, ...}],
  "object": "list"}``, one entry per model of the folder (:mod:`controlplane.sim.modelsdir`).
- ``POST /models/load {"model"}``: 200 ``{"success": true}`` and the child starts in the
  background (``loading``, then ``loaded`` once its ``/health`` answers 200). An unknown model is
  a 404 (llama-server's ``File Not Found``), a running one a 400 ``model is already running``. At
  ``--models-max`` the least recently used idle loaded model is unloaded first, and waited for;
  with none to unload, a 500 ``model limit reached, try again later``.
- ``POST /models/unload {"model"}``: 200 ``{"success": true}``; the child is sent SIGTERM (SIGKILL
  while still loading) and the model is ``unloaded`` once it has exited. Not running: 400 ``model
  is not running``; unknown: 400 ``model is not found``.
- Everything else a model serves is proxied to its child: ``GET /slots``, ``/props``,
  ``/metrics`` with ``?model=NAME``, ``POST /v1/chat/completions`` (and the other POSTs) with the
  body's ``model``. A model that is not running is a 400 ``model is not loaded`` unless autoload
  (``--models-autoload``, the default, or ``?autoload=true``) loads it first and waits. ``GET
  /props`` without a model describes the router.

A malformed JSON body is a 500 ``server_error``, as llama-server's JSON parser makes it. On
SIGTERM or SIGINT the router stops every child (SIGTERM, then SIGKILL after a grace) and returns.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
from anyio.abc import TaskGroup
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from controlplane.sim import payloads
from controlplane.sim.app import JSONBody
from controlplane.sim.errors import InvalidRequest, MalformedJSON, RouteNotFound, SimError
from controlplane.sim.modelsdir import (
    LIMIT_REACHED,
    ModelStatus,
    ModelUse,
    has_capacity,
    pick_victim,
    scan_models_dir,
)
from controlplane.sim.routerchild import ChildServer, child_argv
from controlplane.sim.routersettings import RouterSettings
from controlplane.sim.server import LISTENING_PREFIX, base_url, bind, print_line, serve

log = logging.getLogger(__name__)

#: Headers of a child's answer that are not passed on (the router's server sets its own).
_HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


class LimitReached(SimError):
    """A load at ``--models-max`` with no idle model to unload: a 500, as llama-server's
    ``std::runtime_error`` becomes."""

    status = 500
    error_type = "server_error"


@dataclass(eq=False)
class _Model:
    """One model of the folder, and its child while it runs."""

    path: Path
    args: list[str]
    status: ModelStatus = ModelStatus.UNLOADED
    child: ChildServer | None = None
    last_used: float = 0.0
    in_flight: int = 0
    stopping: bool = False
    #: Set (and replaced) on every status change, for those waiting for one.
    changed: anyio.Event = field(default_factory=anyio.Event)

    def use(self) -> ModelUse:
        return ModelUse(self.status, self.last_used, self.in_flight, self.stopping)


class RouterModels:
    """The models and their children; every method runs on the event loop (no locks needed:
    between two awaits nothing else changes the table)."""

    def __init__(self, settings: RouterSettings, group: TaskGroup) -> None:
        self.settings = settings
        self._group = group
        self._http = httpx.AsyncClient(timeout=None, trust_env=False)
        self.models = {
            name: _Model(path, child_argv(name, path, settings.child_flags))
            for name, path in scan_models_dir(settings.models_dir).items()
        }

    def _set(self, model: _Model, status: ModelStatus) -> None:
        model.status = status
        model.changed.set()
        model.changed = anyio.Event()

    async def _until(self, model: _Model, *statuses: ModelStatus) -> None:
        while model.status not in statuses:
            await model.changed.wait()

    # -- load and unload -----------------------------------------------------------------------

    async def load(self, name: str) -> None:
        """Start ``name``'s child; at the limit, unload the least recently used idle model first
        (and wait for it), or fail with :class:`LimitReached`."""
        model = self.models[name]
        if not has_capacity(self._uses(), self.settings.models_max):
            victim = pick_victim(self._uses())
            if victim is not None:
                log.info("models_max limit reached, removing LRU name=%s", victim)
                self.unload(victim)
                await self._until(self.models[victim], ModelStatus.UNLOADED)
        if model.status is not ModelStatus.UNLOADED:
            return  # another request started it meanwhile
        if not has_capacity(self._uses(), self.settings.models_max):
            raise LimitReached(LIMIT_REACHED)
        model.last_used = time.monotonic()
        model.child = ChildServer(model.args)
        self._set(model, ModelStatus.LOADING)
        log.info("spawned child for name=%s (pid %d)", name, model.child.pid)
        self._group.start_soon(self._watch, name, model, model.child)

    async def _watch(self, name: str, model: _Model, child: ChildServer) -> None:
        """The child's life: loading until healthy, loaded until it exits, then unloaded."""
        try:
            healthy = await child.announced() and await child.healthy(self._http)
            if healthy and model.child is child and model.status is ModelStatus.LOADING:
                self._set(model, ModelStatus.LOADED)
                log.info("model name=%s loaded on %s", name, child.url)
            code = await child.wait()
        finally:
            child.close()
        log.info("child for name=%s exited with %d", name, code)
        model.child = None
        model.stopping = False
        self._set(model, ModelStatus.UNLOADED)

    def unload(self, name: str) -> None:
        """Stop ``name``'s child (SIGKILL while loading, as llama-server force-kills a loading
        child); it becomes unloaded when the child has exited."""
        model = self.models[name]
        if model.child is None or model.stopping:
            return
        model.stopping = True
        model.child.signal(kill=model.status is ModelStatus.LOADING)

    async def stop_all(self) -> None:
        """Stop every child and wait for each to exit (killed after the grace)."""
        async with anyio.create_task_group() as group:
            for model in self.models.values():
                if model.child is not None:
                    group.start_soon(model.child.stop)
        await self._http.aclose()

    def _uses(self) -> dict[str, ModelUse]:
        return {name: model.use() for name, model in self.models.items()}

    # -- proxying ------------------------------------------------------------------------------

    async def ready_child(self, name: str, autoload: bool) -> _Model:
        """The model, loaded (waiting for a load in progress, or starting one with autoload)."""
        model = self.models[name]
        if autoload and model.status is ModelStatus.UNLOADED:
            await self.load(name)
        await self._until(model, ModelStatus.LOADED, ModelStatus.UNLOADED)
        if model.status is not ModelStatus.LOADED or model.child is None:
            raise InvalidRequest("model is not loaded")
        return model

    async def forward(
        self, model: _Model, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> Response:
        """The child's answer to the request, streamed back as it comes."""
        assert model.child is not None
        model.in_flight += 1
        if method == "POST":
            model.last_used = time.monotonic()
        try:
            request = self._http.build_request(
                method, f"{model.child.url}{path}", content=body or None, headers=headers
            )
            answer = await self._http.send(request, stream=True)
        except BaseException:
            model.in_flight -= 1
            raise

        async def body_chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                model.in_flight -= 1
                await answer.aclose()

        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS}
        return StreamingResponse(body_chunks(), status_code=answer.status_code, headers=kept)


def _json_object(body: bytes) -> dict[str, Any]:
    """A request body as llama-server's parser reads it: not JSON is a 500; anything but an
    object has no fields."""
    try:
        parsed = msgspec.json.decode(body)
    except msgspec.DecodeError as err:
        raise MalformedJSON(f"parse error: {err}") from None
    return parsed if isinstance(parsed, dict) else {}


def _name(value: Any) -> str:
    return value if isinstance(value, str) else ""


class RouterEndpoints:
    def __init__(self, models: RouterModels) -> None:
        self.models = models

    async def health(self, _: Request) -> Response:
        return JSONBody({"status": "ok"})

    async def list_models(self, _: Request) -> Response:
        created = int(time.time())
        data = [
            {
                "id": name,
                "aliases": [],
                "tags": [],
                "object": "model",
                "owned_by": "llamacpp",
                "created": created,
                "status": {"value": model.status.value, "args": model.args},
                "source": "models_dir",
            }
            for name, model in self.models.models.items()
        ]
        return JSONBody({"data": data, "object": "list"})

    async def load(self, request: Request) -> Response:
        name = _name(_json_object(await request.body()).get("model"))
        model = self.models.models.get(name)
        if model is None:
            raise RouteNotFound(payloads.NOT_FOUND_MESSAGE)
        if model.status.running:
            raise InvalidRequest("model is already running")
        await self.models.load(name)
        return JSONBody({"success": True})

    async def unload(self, request: Request) -> Response:
        name = _name(_json_object(await request.body()).get("model"))
        model = self.models.models.get(name)
        if model is None:
            raise InvalidRequest("model is not found")
        if not model.status.running:
            raise InvalidRequest("model is not running")
        self.models.unload(name)
        return JSONBody({"success": True})

    def _autoload(self, request: Request) -> bool:
        given = request.query_params.get("autoload", "")
        return given in ("true", "1") if given else self.models.settings.autoload

    def _validate(self, name: str) -> None:
        if not name:
            raise InvalidRequest("model name is missing from the request")
        if name not in self.models.models:
            raise InvalidRequest(f"model '{name}' not found")

    async def props(self, request: Request) -> Response:
        if request.query_params.get("model"):
            return await self.proxy_get(request)
        settings = self.models.settings
        return JSONBody(
            {
                "role": "router",
                "max_instances": settings.models_max,
                "models_autoload": settings.autoload,
                "model_alias": "llama-server",
                "model_path": "none",
                "default_generation_settings": {"params": None, "n_ctx": 0},
            }
        )

    async def proxy_get(self, request: Request) -> Response:
        name = request.query_params.get("model", "")
        return await self._proxy(request, name, b"")

    async def proxy_post(self, request: Request) -> Response:
        body = await request.body()
        name = _name(_json_object(body).get("model"))
        return await self._proxy(request, name, body)

    async def _proxy(self, request: Request, name: str, body: bytes) -> Response:
        self._validate(name)
        autoload = self._autoload(request)
        model = self.models.models[name]
        if not autoload and not model.status.running:
            raise InvalidRequest("model is not loaded")
        model = await self.models.ready_child(name, autoload)
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        return await self.models.forward(model, request.method, path, body, headers)

    async def sim_error(self, _: Request, exc: Exception) -> Response:
        assert isinstance(exc, SimError)
        return JSONBody(payloads.error_body(exc.status, exc.error_type, exc.message), exc.status)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == RouteNotFound.status:
            return await self.sim_error(request, RouteNotFound(payloads.NOT_FOUND_MESSAGE))
        body = payloads.error_body(exc.status_code, "invalid_request_error", exc.detail)
        return JSONBody(body, exc.status_code, headers=exc.headers)


#: The POST endpoints a model serves, proxied to its child by the body's ``model``.
PROXIED_POSTS: tuple[str, ...] = (
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completions",
    "/completion",
    "/slots/{id_slot}",
    "/props",
)
#: The GET endpoints a model serves, proxied to its child by ``?model=``.
PROXIED_GETS: tuple[str, ...] = ("/slots", "/metrics")


def build_router_app(models: RouterModels) -> Starlette:
    """The ASGI app of the router over ``models``."""
    endpoints = RouterEndpoints(models)
    routes = [
        Route("/health", endpoints.health, methods=["GET"]),
        Route("/v1/health", endpoints.health, methods=["GET"]),
        Route("/models", endpoints.list_models, methods=["GET"]),
        Route("/v1/models", endpoints.list_models, methods=["GET"]),
        Route("/models/load", endpoints.load, methods=["POST"]),
        Route("/models/unload", endpoints.unload, methods=["POST"]),
        Route("/props", endpoints.props, methods=["GET"]),
        *(Route(path, endpoints.proxy_get, methods=["GET"]) for path in PROXIED_GETS),
        *(Route(path, endpoints.proxy_post, methods=["POST"]) for path in PROXIED_POSTS),
    ]
    handlers = {SimError: endpoints.sim_error, HTTPException: endpoints.http_error}
    return Starlette(routes=routes, exception_handlers=handlers)


async def run_router(
    settings: RouterSettings, *, announce: Callable[[str], None] = print_line
) -> None:
    """Serve the router until SIGTERM or SIGINT, then stop every child and return."""
    sock = bind(settings.host, settings.port)
    url = base_url(sock)
    try:
        async with anyio.create_task_group() as group:
            models = RouterModels(settings, group)
            log.info("router over %d models of %s", len(models.models), settings.models_dir)
            await group.start(serve, build_router_app(models), [sock])
            announce(f"{LISTENING_PREFIX}{url}")
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("%s: stopping the router and its children", signum.name)
                    break
            with anyio.CancelScope(shield=True):
                await models.stop_all()
            group.cancel_scope.cancel()
    finally:
        sock.close()
