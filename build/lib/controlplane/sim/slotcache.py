"""The simulator's KV cache: what each slot holds, and llama-server's slot save/restore/erase.

llama-server keeps, per slot, the tokens of the last prompt and reply (its KV cache). A new prompt
that starts with those tokens is processed only from where they differ: its ``timings`` say
``cache_n`` tokens came from the cache and ``prompt_n`` were processed (at least one: the last
prompt token is always evaluated again to get the next token's logits). With ``--slot-save-path
DIR`` a slot's cache can be written to ``DIR/FILE`` and read back after a restart:

* ``POST /slots/{id}?action=save`` ``{"filename": F}``: 200 ``{"id_slot", "filename", "n_saved",
  "n_written", "timings": {"save_ms"}}``;
* ``?action=restore``: 200 ``{"id_slot", "filename", "n_restored", "n_read", "timings":
  {"restore_ms"}}``; a file that is missing or not a slot file is 400 ``Unable to restore slot:
  No available space in KV cache or invalid slot save file``;
* ``?action=erase``: 200 ``{"id_slot", "n_erased"}``;
* a filename with a path in it (``../x``) is 400 ``Invalid filename``, a body without
  ``filename`` 500 (llama-server's JSON library speaking); an unknown or missing action 400
  ``Invalid action``; a slot id that is not a number 400 ``Invalid slot ID``, while one past the
  last slot is served as an empty slot (save writes ``n_saved: 0``, erase ``n_erased: 0``), as
  llama-server 0.3.36's did; a slot that is processing 400; a server without ``--slot-save-path``
  501 ``not_supported_error``; a file that cannot be written 500 ``Unable to save slot``.

These are the answers observed from llama-server (llama-cpp-python 0.3.36's tree), which also
refuses to start when ``--slot-save-path`` is not an existing folder (``not a directory``): so
does ``controlplane sim``.

The files are the simulator's own format (JSON: the model's name and the cached tokens), not
llama.cpp's; nothing but the simulator reads them. The simulated tokens are words
(:mod:`controlplane.sim.text`): each chat message is four template markers around its words, so
the count matches :func:`~controlplane.sim.text.count_prompt_tokens`.

``slot_restore_delay_seconds`` (``controlplane sim --slot-restore-delay``) makes every restore hang
that long first (or until shutdown): how a test shows that a restore which never answers holds a
pod's readiness no longer than its bound.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from controlplane.sim.errors import InvalidRequest, ModelLoading, SimError
from controlplane.sim.model import SimulatedModel

SAVE: Final = "save"
RESTORE: Final = "restore"
ERASE: Final = "erase"
FILE_FORMAT: Final = "modelpool-sim-slot/1"
#: llama-server's words for a restore it cannot do.
RESTORE_FAILED_MESSAGE: Final = (
    "Unable to restore slot: No available space in KV cache or invalid slot save file"
)
SAVE_FAILED_MESSAGE: Final = "Unable to save slot"
#: What llama-server's JSON library says when the body has no ``filename``.
NO_FILENAME_MESSAGE: Final = "[json.exception.out_of_range.403] key 'filename' not found"
SAVE_DISABLED_MESSAGE: Final = (
    "This server does not support slots action. Start it with `--slot-save-path`"
)
MAX_FILENAME_BYTES: Final = 255


class SlotActionsDisabled(SimError):
    """A slot action on a server started without ``--slot-save-path``."""

    status: ClassVar[int] = 501
    error_type: ClassVar[str] = "not_supported_error"


class SlotFileNotWritten(SimError):
    """The save file could not be written (a full disk, a folder that is not one)."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"


class MissingFilename(SimError):
    """A save or restore whose body has no ``filename`` (llama-server answers 500)."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"


class _SlotFile(msgspec.Struct):
    format: str
    model: str
    tokens: list[str]


def message_tokens(contents: Sequence[str]) -> list[str]:
    """The prompt of a chat as simulated tokens: per message two markers, its words, two more."""
    tokens: list[str] = []
    for text in contents:
        tokens += ["<|im_start|>", "<|role|>", *text.split(), "<|im_end|>", "\n"]
    return tokens


def valid_filename(name: Any) -> bool:
    """A plain file name: no path, not ``.`` or ``..``, no control characters, short enough."""
    if not isinstance(name, str) or not name or name in (".", ".."):
        return False
    if "/" in name or "\\" in name or any(ord(c) < 32 for c in name):
        return False
    return len(name.encode()) <= MAX_FILENAME_BYTES


@dataclasses.dataclass
class _SlotCache:
    tokens: list[str] = dataclasses.field(default_factory=list)
    #: The last completion's prompt size, and how much of it came from the cache.
    n_prompt: int = 0
    n_cached: int = 0
    used: bool = False


class SlotCaches:
    """Every slot's cached tokens; the chat handler asks it how much of a prompt is cached."""

    def __init__(self, slots: int) -> None:
        self._slots = [_SlotCache() for _ in range(slots)]

    def __len__(self) -> int:
        return len(self._slots)

    def has(self, slot: int) -> bool:
        return 0 <= slot < len(self._slots)

    def cached_prefix(self, slot: int, prompt: Sequence[str]) -> int:
        """How many leading tokens of ``prompt`` slot ``slot`` already holds (never all of it:
        the last prompt token is always evaluated)."""
        held = self._slots[slot].tokens
        common = 0
        for mine, theirs in zip(held, prompt, strict=False):
            if mine != theirs:
                break
            common += 1
        return max(min(common, len(prompt) - 1), 0)

    def remember(self, slot: int, prompt: Sequence[str], reply: Sequence[str], cached: int) -> None:
        """A completion in ``slot`` ended: the slot holds its prompt and reply."""
        self._slots[slot] = _SlotCache([*prompt, *reply], len(prompt), cached, used=True)

    def fields(self, slot: int) -> dict[str, Any]:
        """What ``/slots`` adds for a slot that has served (nothing for a never-used one)."""
        cache = self._slots[slot]
        if not cache.used:
            return {}
        return {
            "n_prompt_tokens": cache.n_prompt,
            "n_prompt_tokens_processed": cache.n_prompt - cache.n_cached,
            "n_prompt_tokens_cache": cache.n_cached,
        }

    def tokens(self, slot: int) -> list[str]:
        """What ``slot`` holds (nothing, for a slot past the last)."""
        return list(self._slots[slot].tokens) if self.has(slot) else []

    def load(self, slot: int, tokens: list[str]) -> None:
        if self.has(slot):
            self._slots[slot] = _SlotCache(list(tokens), used=self._slots[slot].used)

    def erase(self, slot: int) -> int:
        if not self.has(slot):
            return 0
        erased = len(self._slots[slot].tokens)
        self._slots[slot] = _SlotCache(used=self._slots[slot].used)
        return erased


def account_cache(body: dict[str, Any], cached: int) -> dict[str, Any]:
    """Say in a completion body (or its last chunk) that ``cached`` prompt tokens came from the
    cache: ``timings.cache_n`` and ``prompt_n``, and ``usage.prompt_tokens_details``."""
    timings = body.get("timings")
    if isinstance(timings, dict):
        total = int(timings.get("prompt_n") or 0) + int(timings.get("cache_n") or 0)
        timings["cache_n"] = cached
        timings["prompt_n"] = total - cached
    usage = body.get("usage")
    if isinstance(usage, dict):
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return body


class SlotActions:
    """``POST /slots/{id}?action=save|restore|erase`` for one model's slots."""

    def __init__(
        self,
        model: SimulatedModel,
        caches: SlotCaches,
        save_path: Path | None,
        restore_delay_seconds: float = 0.0,
    ) -> None:
        self.model = model
        self.caches = caches
        self.save_path = save_path
        self.restore_delay_seconds = restore_delay_seconds

    async def handle(self, request: Request, render: type[Response]) -> Response:
        if not self.model.ready:
            raise ModelLoading("Loading model")
        if self.save_path is None:
            raise SlotActionsDisabled(SAVE_DISABLED_MESSAGE)
        slot = _slot_id(request.path_params.get("id_slot"))
        action = request.query_params.get("action", "")
        if action not in (SAVE, RESTORE, ERASE):
            raise InvalidRequest("Invalid action")
        if any(s.id == slot and s.processing for s in self.model.slots()):
            raise InvalidRequest(f"Slot {slot} is processing a request")
        if action == ERASE:
            return render({"id_slot": slot, "n_erased": self.caches.erase(slot)})
        filename = _filename(await request.body())
        path = self.save_path / filename
        started = time.perf_counter()
        if action == SAVE:
            tokens = self.caches.tokens(slot)
            data = msgspec.json.encode(
                _SlotFile(FILE_FORMAT, self.model.settings.model_name, tokens)
            )
            try:
                path.write_bytes(data)
            except OSError:
                raise SlotFileNotWritten(SAVE_FAILED_MESSAGE) from None
            return render({"id_slot": slot, "filename": filename, "n_saved": len(tokens),
                           "n_written": len(data),
                           "timings": {"save_ms": _ms(started)}})  # fmt: skip
        if self.restore_delay_seconds > 0:
            await self.model.hang(self.restore_delay_seconds)
        try:
            raw = path.read_bytes()
            saved = msgspec.json.decode(raw, type=_SlotFile)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            raise InvalidRequest(RESTORE_FAILED_MESSAGE) from None
        if saved.format != FILE_FORMAT:
            raise InvalidRequest(RESTORE_FAILED_MESSAGE)
        self.caches.load(slot, saved.tokens)
        return render({"id_slot": slot, "filename": filename, "n_restored": len(saved.tokens),
                       "n_read": len(raw),
                       "timings": {"restore_ms": _ms(started)}})  # fmt: skip


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 3)


def _slot_id(text: Any) -> int:
    try:
        slot = int(str(text))
    except ValueError:
        raise InvalidRequest("Invalid slot ID") from None
    if slot < 0:
        raise InvalidRequest("Invalid slot ID")
    return slot


def _filename(body: bytes) -> str:
    try:
        data = msgspec.json.decode(body) if body else {}
    except msgspec.DecodeError:
        raise InvalidRequest("request body is not valid JSON") from None
    if not isinstance(data, dict) or "filename" not in data:
        raise MissingFilename(NO_FILENAME_MESSAGE)
    name = data["filename"]
    if not valid_filename(name):
        raise InvalidRequest("Invalid filename")
    assert isinstance(name, str)
    return name
