"""The simulator's HTTP face: a starlette app over one :class:`SimulatedModel`.

Endpoints (as llama-server has them, plus one admin endpoint for tests):

- ``GET /health`` (and ``/v1/health``): 503 ``unavailable_error`` while loading, then 200.
- ``GET /slots``: the slot array; 501 with ``--no-slots``; broken on purpose per ``slots_mode``;
  ``?fail_on_no_slot=1`` (any non-empty value) answers 503 when no slot is idle.
- ``POST /slots/{id}?action=save|restore|erase``: a slot's KV cache to and from
  ``--slot-save-path`` (:mod:`controlplane.sim.slotcache`, which also makes a cached prompt
  prefix show in ``timings.cache_n``).
- ``GET /v1/models`` (and ``/models``): the served model.
- ``GET /metrics``: llama-server's Prometheus metrics (:mod:`controlplane.sim.metrics`) with
  ``--metrics``; 501 without it.
- ``POST /v1/chat/completions`` (and ``/chat/completions``): OpenAI chat completions, streamed
  as server-sent events when ``stream`` is true.
- ``GET|POST /sim/slots-mode``: read or switch the ``/slots`` mode at run time
  (``{"mode": "error500", "seconds": 5}`` switches for 5 s, then back).
- ``GET|POST /sim/answer-mode``: the same for how completions are answered (``garbage``, ``cut``,
  ``huge``, ``stall``, ``error-text``: :mod:`controlplane.sim.faults`).

While the model loads, every endpoint but the admin one answers 503 like llama-server. Every error
body is ``{"error": {"code", "message", "type"}}``; a chat body that is not JSON is a 500
``server_error``, as llama-server's JSON parser makes it (the router-proxy refuses such a body
with a 400 before any member sees it).
"""

from __future__ import annotations

import enum
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from controlplane.sim import payloads
from controlplane.sim.chatrequest import ChatRequest, parse_chat_request
from controlplane.sim.errors import (
    InvalidRequest,
    MetricsEndpointDisabled,
    ModelLoading,
    NoSlotAvailable,
    RouteNotFound,
    SimError,
    SimulatedServerError,
    SlotsEndpointDisabled,
)
from controlplane.sim.faults import faulty_answer
from controlplane.sim.metrics import CONTENT_TYPE, METRICS_DISABLED_MESSAGE, ServerMetrics
from controlplane.sim.model import SimulatedModel
from controlplane.sim.settings import AnswerMode, SlotsMode
from controlplane.sim.slotcache import SlotActions, SlotCaches, account_cache, message_tokens
from controlplane.sim.text import count_prompt_tokens, plan_reply

JSON_MEDIA_TYPE = "application/json; charset=utf-8"
SSE_MEDIA_TYPE = "text/event-stream"
Mode = TypeVar("Mode", bound=enum.Enum)
#: The last event of every stream, as OpenAI and llama-server send it.
DONE_EVENT = b"data: [DONE]\n\n"


class JSONBody(Response):
    """A JSON response encoded with msgspec, typed as llama-server types its responses."""

    media_type = JSON_MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return msgspec.json.encode(content)


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


class SimulatorEndpoints:
    """The request handlers, bound to one model."""

    def __init__(self, model: SimulatedModel) -> None:
        self.model = model
        self.settings = model.settings
        #: ``created`` of the served model: when this server started.
        self.started = int(time.time())
        self.caches = SlotCaches(self.settings.slots)
        self.metrics = ServerMetrics()
        self.slot_actions = SlotActions(
            model,
            self.caches,
            self.settings.slot_save_path,
            self.settings.slot_restore_delay_seconds,
        )

    def _require_loaded(self) -> None:
        if not self.model.ready:
            raise ModelLoading(payloads.LOADING_MESSAGE)

    async def health(self, _: Request) -> Response:
        self._require_loaded()
        return JSONBody({"status": "ok"})

    async def models(self, _: Request) -> Response:
        self._require_loaded()
        body = payloads.models_list(
            self.settings.model_name, created=self.started, n_ctx=self.settings.n_ctx
        )
        return JSONBody(body)

    async def slots(self, request: Request) -> Response:
        self._require_loaded()
        if not self.settings.slots_endpoint:
            raise SlotsEndpointDisabled(payloads.SLOTS_DISABLED_MESSAGE)
        mode = self.model.slots_mode
        if mode is SlotsMode.ERROR500:
            raise SimulatedServerError("simulated /slots failure (slots mode error500)")
        if mode is SlotsMode.MALFORMED:
            return JSONBody(payloads.MALFORMED_SLOTS)
        if mode is SlotsMode.SLOW:
            await self.model.hang(self.settings.slow_slots_seconds)
        states = self.model.slots()
        if request.query_params.get("fail_on_no_slot") and all(s.processing for s in states):
            raise NoSlotAvailable("no slot available")
        legacy = self.settings.legacy_slots
        n_ctx = self.settings.n_ctx
        return JSONBody(
            [
                {**payloads.slot_entry(s, n_ctx=n_ctx, legacy=legacy), **self.caches.fields(s.id)}
                for s in states
            ]
        )

    async def prometheus_metrics(self, _: Request) -> Response:
        self._require_loaded()
        if not self.settings.metrics_endpoint:
            raise MetricsEndpointDisabled(METRICS_DISABLED_MESSAGE)
        processing = sum(1 for slot in self.model.slots() if slot.processing)
        body = self.metrics.render(processing=processing, deferred=self.model.waiting)
        # llama-server says when it started, in this header of its own. The content type is
        # given as a header: as a media type, starlette would append a charset llama-server omits.
        headers = {"content-type": CONTENT_TYPE, "Process-Start-Time-Unix": str(self.started)}
        return Response(body, headers=headers)

    async def slot_action(self, request: Request) -> Response:
        return await self.slot_actions.handle(request, JSONBody)

    async def slots_mode(self, request: Request) -> Response:
        if request.method == "POST":
            self.model.set_slots_mode(*_parse_mode(await request.body(), SlotsMode))
        return _mode_answer(self.model.slots_mode, self.model.slots_mode_seconds_left)

    async def answer_mode(self, request: Request) -> Response:
        if request.method == "POST":
            self.model.set_answer_mode(*_parse_mode(await request.body(), AnswerMode))
        return _mode_answer(self.model.answer_mode, self.model.answer_mode_seconds_left)

    async def chat_completions(self, request: Request) -> Response:
        self._require_loaded()
        chat = parse_chat_request(await request.body())
        completion = _Completion(self.model, chat, self.caches, self.metrics)
        mode = self.model.answer_mode
        if mode is not AnswerMode.NORMAL:
            return faulty_answer(
                mode,
                stream=chat.stream,
                model=self.settings.model_name,
                chunks=completion.events if chat.stream else completion.whole_bytes,
                hang=lambda: self.model.hang(self.settings.stall_seconds),
            )
        if chat.stream:
            return StreamingResponse(completion.events(), media_type=SSE_MEDIA_TYPE)
        return JSONBody(await completion.whole())

    async def sim_error(self, _: Request, exc: Exception) -> Response:
        assert isinstance(exc, SimError)
        return JSONBody(payloads.error_body(exc.status, exc.error_type, exc.message), exc.status)

    async def http_error(self, _: Request, exc: Exception) -> Response:
        """Starlette's own errors (no route, wrong method) in llama-server's envelope."""
        assert isinstance(exc, HTTPException)
        if exc.status_code == RouteNotFound.status:
            error = RouteNotFound(payloads.NOT_FOUND_MESSAGE)
            return await self.sim_error(_, error)
        body = payloads.error_body(exc.status_code, "invalid_request_error", exc.detail)
        return JSONBody(body, exc.status_code, headers=exc.headers)


class _Completion:
    """One chat completion: planned up front, generated while holding a slot."""

    def __init__(
        self, model: SimulatedModel, chat: ChatRequest, caches: SlotCaches, metrics: ServerMetrics
    ) -> None:
        settings = model.settings
        self.model = model
        self.chat = chat
        self.caches = caches
        self.metrics = metrics
        self.prompt = message_tokens(chat.contents)
        self.prompt_tokens = count_prompt_tokens(chat.contents)
        self.reply = plan_reply(
            chat.last_message,
            natural_tokens=settings.reply_tokens,
            max_tokens=chat.max_tokens,
            ignore_eos=chat.ignore_eos,
            context_left=settings.n_ctx - self.prompt_tokens,
        )
        # The served name, whatever the request asked: it tells a test which member answered.
        self.meta = payloads.CompletionMeta(
            id=f"chatcmpl-{secrets.token_hex(16)}",
            created=int(time.time()),
            model=settings.model_name,
        )
        self.n_predict = -1 if chat.max_tokens is None else chat.max_tokens

    async def whole(self) -> dict[str, Any]:
        async with self.model.occupy(
            n_predict=self.n_predict, stream=False, prompt_tokens=self.prompt_tokens
        ) as slot:
            cached = self.caches.cached_prefix(slot.id, self.prompt)
            started = self.model.clock.now()
            async for _ in self.model.generate(slot, self.reply.tokens):
                pass
            seconds = self.model.clock.now() - started
            self.caches.remember(slot.id, self.prompt, self.reply.tokens, cached)
            self._record(cached, seconds)
        body = payloads.chat_completion(
            self.meta, self.reply, prompt_tokens=self.prompt_tokens, seconds=seconds
        )
        return account_cache(body, cached)

    def _record(self, cached: int, seconds: float) -> None:
        """Count the completion in ``/metrics``, while its slot is still held."""
        busy = sum(1 for slot in self.model.slots() if slot.processing)
        produced = len(self.reply.tokens)
        prompt = self.prompt_tokens
        self.metrics.record(prompt=prompt, cached=cached, predicted=produced, seconds=seconds,
                            busy=busy)  # fmt: skip

    async def whole_bytes(self) -> AsyncIterator[bytes]:
        """:meth:`whole` as the bytes it is sent as."""
        yield msgspec.json.encode(await self.whole())

    async def events(self) -> AsyncIterator[bytes]:
        """The stream: role, one chunk per token, the finish chunk, [usage], ``[DONE]``.

        The slot is held from before the first chunk until the last token, so a client that
        has read any chunk but the finish knows ``/slots`` shows its slot processing.
        """
        meta = self.meta
        async with self.model.occupy(
            n_predict=self.n_predict, stream=True, prompt_tokens=self.prompt_tokens
        ) as slot:
            cached = self.caches.cached_prefix(slot.id, self.prompt)
            started = self.model.clock.now()
            yield sse_event(payloads.chunk(meta, {"role": "assistant", "content": None}))
            async for token in self.model.generate(slot, self.reply.tokens):
                yield sse_event(payloads.chunk(meta, {"content": token}))
            seconds = self.model.clock.now() - started
            self.caches.remember(slot.id, self.prompt, self.reply.tokens, cached)
            self._record(cached, seconds)
        produced = len(self.reply.tokens)
        timings = payloads.timings(self.prompt_tokens, produced, seconds)
        finish = payloads.chunk(
            meta,
            {},
            finish_reason=self.reply.finish_reason,
            extra={"timings": account_cache({"timings": timings}, cached)["timings"]},
        )
        yield sse_event(finish)
        if self.chat.include_usage:
            usage = payloads.usage_chunk(
                meta, prompt_tokens=self.prompt_tokens, completion_tokens=produced
            )
            yield sse_event(account_cache(usage, cached))
        yield DONE_EVENT


def _mode_answer(mode: enum.Enum, left: float | None) -> Response:
    answer: dict[str, Any] = {"mode": mode.value}
    if left is not None:
        answer["seconds_left"] = round(left, 3)
    return JSONBody(answer)


def _parse_mode(body: bytes, modes: type[Mode]) -> tuple[Mode, float | None]:
    """``{"mode": MODE}``, optionally with ``"seconds"``: how long the switch lasts."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError as err:
        raise InvalidRequest(f"request body is not valid JSON: {err}") from None
    choices = ", ".join(mode.value for mode in modes)
    mode = data.get("mode") if isinstance(data, dict) else None
    try:
        parsed = modes(mode)
    except ValueError:
        raise InvalidRequest(f"'mode' must be one of {choices}, got {mode!r}") from None
    seconds = data.get("seconds")
    if seconds is None:
        return parsed, None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise InvalidRequest(f"'seconds' must be a positive number, got {seconds!r}")
    return parsed, float(seconds)


def build_app(model: SimulatedModel) -> Starlette:
    """The ASGI app serving ``model``."""
    endpoints = SimulatorEndpoints(model)
    routes = [
        Route("/health", endpoints.health, methods=["GET"]),
        Route("/v1/health", endpoints.health, methods=["GET"]),
        Route("/slots", endpoints.slots, methods=["GET"]),
        Route("/slots/{id_slot}", endpoints.slot_action, methods=["POST"]),
        Route("/v1/models", endpoints.models, methods=["GET"]),
        Route("/models", endpoints.models, methods=["GET"]),
        Route("/metrics", endpoints.prometheus_metrics, methods=["GET"]),
        Route("/v1/chat/completions", endpoints.chat_completions, methods=["POST"]),
        Route("/chat/completions", endpoints.chat_completions, methods=["POST"]),
        Route("/sim/slots-mode", endpoints.slots_mode, methods=["GET", "POST"]),
        Route("/sim/answer-mode", endpoints.answer_mode, methods=["GET", "POST"]),
    ]
    handlers = {SimError: endpoints.sim_error, HTTPException: endpoints.http_error}
    return Starlette(routes=routes, exception_handlers=handlers)
