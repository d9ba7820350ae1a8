"""Deterministic "generation": what the simulated model says, and how many tokens it counts.

Tests assert generated text, so the reply is a pure function of the prompt: the words of the last
message, repeated in order, one word per token (every token after the first carries its leading
space, as real tokenizers emit them). A prompt without words is answered from a fixed vocabulary.
The reply ends on its own after ``reply_tokens`` tokens (the model "emits EOS": ``finish_reason``
``stop``) unless ``max_tokens`` cuts it short or ``ignore_eos`` asks for exactly ``max_tokens``
(``finish_reason`` ``length``), which is how llama-server treats ``n_predict`` and ``ignore_eos``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

#: Words for a reply to a prompt that has none (an empty message, or only images).
FALLBACK_WORDS = ("simulated", "tokens", "from", "a", "llama.cpp", "stand-in")
#: Tokens a chat template adds around each message (role markers); part of ``prompt_tokens``.
TOKENS_PER_MESSAGE = 4


@dataclasses.dataclass(frozen=True)
class Reply:
    """The tokens a completion will produce and why it stops."""

    tokens: tuple[str, ...]
    #: ``stop`` (the model ended the reply) or ``length`` (the token limit ended it).
    finish_reason: str

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def reply_tokens(prompt: str, count: int) -> tuple[str, ...]:
    """The first ``count`` tokens the model answers ``prompt`` with."""
    words = prompt.split() or list(FALLBACK_WORDS)
    return tuple(
        (" " if index else "") + words[index % len(words)] for index in range(max(count, 0))
    )


def plan_reply(
    prompt: str,
    *,
    natural_tokens: int,
    max_tokens: int | None,
    ignore_eos: bool,
    context_left: int,
) -> Reply:
    """What a completion of ``prompt`` generates under its limits.

    ``max_tokens`` None is "no limit": the reply runs to its natural end, or with ``ignore_eos``
    until the context is full. ``context_left`` bounds everything, as ``n_ctx`` does.
    """
    limit = context_left if max_tokens is None else min(max_tokens, context_left)
    wanted = limit if ignore_eos else natural_tokens
    count = max(min(wanted, limit), 0)
    finish = "stop" if not ignore_eos and natural_tokens <= limit else "length"
    return Reply(reply_tokens(prompt, count), finish)


def count_prompt_tokens(contents: Sequence[str]) -> int:
    """Prompt tokens of a chat: its words plus the template's markers around each message."""
    return sum(len(text.split()) + TOKENS_PER_MESSAGE for text in contents)
