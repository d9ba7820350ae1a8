"""A streamed chat completion read event by event, and whether it ended whole.

Shared by the e2e tests that change a member or a proxy under a stream (``tests/e2e/memberstreams``)
and by ``bench.no_cut_bench``, which counts whole and cut streams under load: one reading of
"whole" for both, so that the benchmark's figure and the tests' assertion are the same judgement.
A cut stream ends without its ``[DONE]``: directly from the simulator as a broken connection,
through a proxy as an ``upstream_disconnected`` error event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Stream:
    """A streamed chat completion read to its end: what arrived, and how it ended."""

    tokens: int = 0
    finish_reason: str | None = None
    done: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def whole(self) -> bool:
        """``[DONE]`` after a finish reason and no error event: asked with ``ignore_eos``, the
        finish is ``length`` (exactly ``max_tokens`` tokens)."""
        return self.done and self.finish_reason == "length" and not self.errors

    def read(self, line: str) -> None:
        if not line.startswith("data: "):
            return
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            self.done = True
            return
        event = json.loads(data)
        if "error" in event:
            self.errors.append(str(event["error"]))
            return
        for choice in event.get("choices") or ():
            if (choice.get("delta") or {}).get("content"):
                self.tokens += 1
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
