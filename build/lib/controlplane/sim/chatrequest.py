"""Validation of ``POST /v1/chat/completions`` bodies: accept what llama-server accepts, and
reject the rest with a message that names the offending field.

Only the fields the simulator acts on are checked strictly (``messages``, ``model``,
``max_tokens``, ``stream``, ``stream_options``, ``ignore_eos``); any other field is ignored, as
llama-server ignores sampling options it does not need. ``model`` is not matched against the
served name: a single-model llama-server answers whatever name the client sends.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from controlplane.sim.errors import InvalidRequest, MalformedJSON


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """A validated chat completion request, reduced to what the simulator uses."""

    #: The text of each message, in order (content parts joined; images contribute nothing).
    contents: tuple[str, ...]
    model: str | None = None
    #: None: no limit (llama.cpp's -1).
    max_tokens: int | None = None
    stream: bool = False
    #: ``stream_options.include_usage``: a final chunk carrying ``usage``.
    include_usage: bool = False
    ignore_eos: bool = False

    @property
    def last_message(self) -> str:
        return self.contents[-1]


def parse_chat_request(body: bytes) -> ChatRequest:
    """The request in ``body``, or :class:`InvalidRequest` naming the first problem found
    (:class:`MalformedJSON`, a 500 as llama-server answers it, when it is not JSON at all)."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError as err:
        raise MalformedJSON(f"request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"request body must be a JSON object, got {_kind(data)}")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest(f"'model' must be a string, got {_kind(model)}")
    return ChatRequest(
        contents=_contents(data),
        model=model,
        max_tokens=_max_tokens(data),
        stream=_flag(data, "stream"),
        include_usage=_include_usage(data),
        ignore_eos=_flag(data, "ignore_eos"),
    )


def _contents(data: dict[str, Any]) -> tuple[str, ...]:
    if "messages" not in data:
        raise InvalidRequest("'messages' is required")
    messages = data["messages"]
    if not isinstance(messages, list):
        raise InvalidRequest(f"'messages' must be an array, got {_kind(messages)}")
    if not messages:
        raise InvalidRequest("'messages' must not be empty")
    return tuple(_message_text(index, message) for index, message in enumerate(messages))


def _message_text(index: int, message: object) -> str:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise InvalidRequest(f"'{where}' must be an object, got {_kind(message)}")
    if not isinstance(message.get("role"), str):
        raise InvalidRequest(f"'{where}.role' is required and must be a string")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return " ".join(_part_text(f"{where}.content[{i}]", part) for i, part in enumerate(content))
    raise InvalidRequest(
        f"'{where}.content' must be a string, an array of content parts or null, "
        f"got {_kind(content)}"
    )


def _part_text(where: str, part: object) -> str:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise InvalidRequest(f"'{where}' must be an object with a string 'type'")
    if part["type"] != "text":
        return ""  # media parts carry no words for the simulated tokenizer
    text = part.get("text")
    if not isinstance(text, str):
        raise InvalidRequest(f"'{where}.text' must be a string")
    return text


def _max_tokens(data: dict[str, Any]) -> int | None:
    value = data.get("max_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise InvalidRequest(f"'max_tokens' must be an integer >= -1, got {value!r}")
    return None if value == -1 else value


def _flag(data: dict[str, Any], name: str) -> bool:
    value = data.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be a boolean, got {_kind(value)}")
    return value


def _include_usage(data: dict[str, Any]) -> bool:
    options = data.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise InvalidRequest(f"'stream_options' must be an object, got {_kind(options)}")
    value = options.get("include_usage", False)
    if not isinstance(value, bool):
        raise InvalidRequest("'stream_options.include_usage' must be a boolean")
    return value


def _kind(value: object) -> str:
    """The JSON name of a decoded value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
