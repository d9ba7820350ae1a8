"""The JSON bodies llama-server sends, as plain dicts: errors, ``/slots``, models, completions.

Shapes follow llama-server's OpenAI-compatible API: ``chat.completion`` objects with ``usage``
and llama.cpp's ``timings``, ``chat.completion.chunk`` objects for streams (the role first, one
chunk per token, then a chunk with the ``finish_reason``), and ``/slots`` entries as the real
server writes them (checked by ``tests/e2e/test_llamacpp_contract.py`` against both): a slot
never used has only ``id``, ``n_ctx``, ``speculative`` and ``is_processing``; a used one adds
``id_task``, the prompt counts, a few ``params`` and ``next_token``, a **list** of one object.
With ``legacy=True`` a slot looks like an older server's: ``task_id`` and ``state`` (0 idle,
1 processing) instead of ``id_task`` and ``is_processing``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from controlplane.sim.model import SlotState
from controlplane.sim.text import Reply

#: What ``system_fingerprint`` says: llama-server puts its build there.
SYSTEM_FINGERPRINT = "b0-simulator"
#: ``owned_by`` of the served model, as llama-server reports it.
OWNED_BY = "llamacpp"
#: llama-server's fixed message while the model loads.
LOADING_MESSAGE = "Loading model"
#: What ``/slots`` says when the server runs with ``--no-slots``.
SLOTS_DISABLED_MESSAGE = "This server does not support slots endpoint. Start it with `--slots`"
#: llama-server's body for a path it has no handler for.
NOT_FOUND_MESSAGE = "File Not Found"
#: The body ``/slots`` answers in ``malformed`` mode: valid JSON, but not an array.
MALFORMED_SLOTS: dict[str, Any] = {"slots": "unavailable", "note": "simulated malformed /slots"}


def error_body(status: int, error_type: str, message: str) -> dict[str, Any]:
    """llama-server's (and OpenAI's) error envelope."""
    return {"error": {"code": status, "message": message, "type": error_type}}


def slot_entry(slot: SlotState, *, n_ctx: int, legacy: bool = False) -> dict[str, Any]:
    """One element of the ``/slots`` array."""
    params = {
        "n_predict": slot.n_predict,
        "max_tokens": slot.n_predict,
        "stream": slot.stream,
        "temperature": 0.8,
    }
    next_token = {
        "has_next_token": slot.processing,
        "has_new_line": False,
        "n_remain": slot.n_remain,
        "n_decoded": slot.n_decoded,
    }
    if legacy:
        return {
            "id": slot.id,
            "task_id": slot.id_task,
            "n_ctx": n_ctx,
            "state": 1 if slot.processing else 0,
            **params,
            "next_token": next_token,
        }
    entry: dict[str, Any] = {
        "id": slot.id,
        "n_ctx": n_ctx,
        "speculative": False,
        "is_processing": slot.processing,
    }
    if slot.used:
        entry.update(
            id_task=slot.id_task,
            n_prompt_tokens=slot.n_prompt_tokens,
            n_prompt_tokens_processed=slot.n_prompt_tokens,
            n_prompt_tokens_cache=0,
            params=params,
            next_token=[next_token],
        )
    return entry


def models_list(model_name: str, *, created: int, n_ctx: int) -> dict[str, Any]:
    """``GET /v1/models`` once loaded: exactly one model, in the Ollama-style ``models`` list and
    the OpenAI ``data`` list (whose ``meta`` describes the model; the numbers are made up)."""
    return {
        "models": [
            {
                "name": model_name,
                "model": model_name,
                "type": "model",
                "capabilities": ["completion"],
                "details": {"format": "gguf"},
            }
        ],
        "object": "list",
        "data": [
            {
                "id": model_name,
                "aliases": [model_name],
                "tags": [],
                "object": "model",
                "created": created,
                "owned_by": OWNED_BY,
                "meta": {
                    "vocab_type": 1,
                    "n_vocab": 32000,
                    "n_ctx": n_ctx,
                    "n_ctx_train": n_ctx,
                    "n_params": 0,
                },
            }
        ],
    }


@dataclasses.dataclass(frozen=True)
class CompletionMeta:
    """What every object of one completion shares."""

    id: str
    created: int
    model: str


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "completion_tokens": completion_tokens,
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def timings(prompt_tokens: int, predicted: int, predicted_seconds: float) -> dict[str, Any]:
    """llama.cpp's ``timings``; prompt processing is instantaneous in the simulator."""
    predicted_ms = predicted_seconds * 1000.0
    return {
        "cache_n": 0,
        "prompt_n": prompt_tokens,
        "prompt_ms": 0.0,
        "prompt_per_token_ms": 0.0,
        "prompt_per_second": 0.0,
        "predicted_n": predicted,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted if predicted else 0.0,
        "predicted_per_second": predicted / predicted_seconds if predicted_seconds > 0 else 0.0,
    }


def chat_completion(
    meta: CompletionMeta, reply: Reply, *, prompt_tokens: int, seconds: float
) -> dict[str, Any]:
    """The non-streaming answer: one ``chat.completion`` object."""
    return {
        "choices": [
            {
                "finish_reason": reply.finish_reason,
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
            }
        ],
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "object": "chat.completion",
        "usage": usage(prompt_tokens, len(reply.tokens)),
        "id": meta.id,
        "timings": timings(prompt_tokens, len(reply.tokens), seconds),
    }


def chunk(
    meta: CompletionMeta,
    delta: dict[str, Any],
    *,
    finish_reason: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a stream."""
    return {
        "choices": [{"finish_reason": finish_reason, "index": 0, "delta": delta}],
        "created": meta.created,
        "id": meta.id,
        "model": meta.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "object": "chat.completion.chunk",
        **(extra or {}),
    }


def usage_chunk(
    meta: CompletionMeta, *, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """The extra last chunk ``stream_options.include_usage`` asks for: no choices, only usage."""
    return {
        "choices": [],
        "created": meta.created,
        "id": meta.id,
        "model": meta.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "object": "chat.completion.chunk",
        "usage": usage(prompt_tokens, completion_tokens),
    }
