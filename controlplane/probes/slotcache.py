"""llama.cpp's slot save and restore: the KV cache carried across a pod's end.

A llama-server started with ``--slot-save-path DIR`` writes a slot's KV cache to ``DIR/FILE`` on
``POST /slots/{id}?action=save`` with ``{"filename": FILE}`` and reads it back on
``?action=restore``. The InferenceService controller saves the used slots of a member before it
scales the member to zero, and restores them into the next pod before that pod counts as Ready.

The answers, as llama-server gives them (and the judges below accept):

* ``GET /slots``: an array; a slot that served a request carries ``id_task`` (and, on current
  servers, ``n_prompt_tokens``); a never-used one has only ``id``, ``n_ctx``, ``speculative`` and
  ``is_processing``. Only used slots that are not processing are saved (:func:`used_slots`).
* save: 200 ``{"id_slot", "filename", "n_saved", "n_written", "timings": {"save_ms"}}``;
* restore: 200 ``{"id_slot", "filename", "n_restored", "n_read", "timings": {"restore_ms"}}``;
  a missing or unusable file is 400 ``Unable to restore slot...``, a bad name 400 ``Invalid
  filename``; a server without ``--slot-save-path`` answers 501.

:class:`SlotCacheClient` runs a whole save or restore under one deadline (the InferenceService's
``spec.kvCache.timeoutSeconds``) and **never raises**: every failure is a :class:`CacheReport`
whose outcome says what happened, because a failed save or restore must never fail the swap. Each
operation is one OpenTelemetry span (``kv cache save`` / ``kv cache restore``, kind CLIENT) whose
requests carry its ``traceparent``, as the idle probe's do.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import httpx
import msgspec
from opentelemetry import propagate, trace

from controlplane.probes.llamacpp import MAX_SLOTS_BODY_BYTES, SLOTS_PATH
from controlplane.runtime.tls import default_tls_context

tracer = trace.get_tracer("controlplane.probes.slotcache")

SAVE: Final = "save"
RESTORE: Final = "restore"
#: The task id of a slot that never served (older servers report -1 rather than omit it).
NO_TASK: Final = -1
#: A save or restore answer is a small object; anything larger is not one.
MAX_ACTION_BODY_BYTES: Final = 64 * 1024

_DECODE = msgspec.json.Decoder().decode


def slot_filename(slot: int) -> str:
    """The file slot ``slot`` is saved to, inside the server's ``--slot-save-path``."""
    return f"slot-{slot}.bin"


class CacheOutcome(enum.StrEnum):
    """How a whole save or restore ended (the API's ``KV_*`` outcomes, same words)."""

    SUCCEEDED = "Succeeded"
    PARTIAL = "Partial"
    FAILED = "Failed"
    TIMED_OUT = "TimedOut"
    NOTHING = "Nothing"


@dataclass(frozen=True, slots=True)
class SlotAnswer:
    """One slot's save or restore, judged: ``error`` is None when it succeeded."""

    slot: int
    tokens: int = 0
    bytes_written: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CacheReport:
    """What a save or restore did, for the status, the event and the metric."""

    outcome: CacheOutcome
    detail: str
    #: Slots done (saved, or restored), in id order.
    slots: tuple[int, ...] = ()
    tokens: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    answers: tuple[SlotAnswer, ...] = field(default=(), repr=False)


def _error_message(status_code: int, body: bytes) -> str:
    """llama-server's ``{"error": {"message"}}``, or the status alone."""
    try:
        data = _DECODE(body) if body else None
    except msgspec.DecodeError:
        data = None
    if isinstance(data, Mapping) and isinstance(data.get("error"), Mapping):
        message = data["error"].get("message")
        if isinstance(message, str) and message:
            return f"{status_code} {message}"
    return f"answered {status_code}"


def used_slots(status_code: int, body: bytes) -> list[int] | str:
    """The ids of the slots worth saving in a ``GET /slots`` answer, or why there are none to
    be had: used (``n_prompt_tokens`` present, or an ``id_task`` other than -1) and not
    processing."""
    if status_code != 200:
        return f"/slots {_error_message(status_code, body)}"
    try:
        slots = _DECODE(body)
    except msgspec.DecodeError:
        return "/slots answered 200 with a body that is not JSON"
    if not isinstance(slots, list):
        return "/slots answered 200 with JSON that is not an array"
    found: list[int] = []
    for index, slot in enumerate(slots):
        if not isinstance(slot, Mapping) or type(slot.get("id")) is not int:
            return f"/slots: entry {index} is not a slot with an integer id"
        if slot.get("is_processing") is True:
            continue  # a request is being served: its cache is not settled, leave it
        task = slot.get("id_task")
        if "n_prompt_tokens" in slot or (type(task) is int and task != NO_TASK):
            found.append(slot["id"])
    return sorted(found)


def _count(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if type(value) is int and value >= 0 else None


def read_save(slot: int, status_code: int, body: bytes) -> SlotAnswer:
    """Judge one ``?action=save`` answer: 200 with non-negative integers ``n_saved`` and
    ``n_written``."""
    return _read_action(slot, status_code, body, "n_saved", "n_written")


def read_restore(slot: int, status_code: int, body: bytes) -> SlotAnswer:
    """Judge one ``?action=restore`` answer: 200 with a non-negative integer ``n_restored``."""
    return _read_action(slot, status_code, body, "n_restored", None)


def _read_action(
    slot: int, status_code: int, body: bytes, tokens_key: str, bytes_key: str | None
) -> SlotAnswer:
    if status_code != 200:
        return SlotAnswer(slot, error=f"slot {slot}: {_error_message(status_code, body)}")
    try:
        data = _DECODE(body)
    except msgspec.DecodeError:
        return SlotAnswer(slot, error=f"slot {slot}: 200 with a body that is not JSON")
    if not isinstance(data, Mapping):
        return SlotAnswer(slot, error=f"slot {slot}: 200 with JSON that is not an object")
    tokens = _count(data, tokens_key)
    if tokens is None:
        return SlotAnswer(slot, error=f"slot {slot}: 200 without a count {tokens_key}")
    written = 0
    if bytes_key is not None:
        found = _count(data, bytes_key)
        if found is None:
            return SlotAnswer(slot, error=f"slot {slot}: 200 without a count {bytes_key}")
        written = found
    return SlotAnswer(slot, tokens=tokens, bytes_written=written)


def summarise(
    operation: str,
    answers: Sequence[SlotAnswer],
    wanted: Iterable[int],
    *,
    timed_out: bool,
    seconds: float,
) -> CacheReport:
    """The report of a save or restore of ``wanted`` slots that got ``answers`` (the slots not
    answered were cut off by the deadline when ``timed_out``)."""
    wanted = tuple(wanted)
    done = tuple(a for a in answers if a.error is None)
    failed = [a for a in answers if a.error is not None]
    slots = tuple(sorted(a.slot for a in done))
    tokens = sum(a.tokens for a in done)
    written = sum(a.bytes_written for a in done)
    verb = "saved" if operation == SAVE else "restored"
    said = f"{verb} {len(done)} of {len(wanted)} slot(s), {tokens} token(s)"
    problems = "; ".join(a.error for a in failed if a.error)
    if timed_out:
        outcome = CacheOutcome.TIMED_OUT
        detail = f"{said}; not finished within {seconds:.3g} s"
        if problems:
            detail += f"; {problems}"
    elif not failed:
        outcome = CacheOutcome.SUCCEEDED
        detail = said
    elif done:
        outcome = CacheOutcome.PARTIAL
        detail = f"{said}; {problems}"
    else:
        outcome = CacheOutcome.FAILED
        detail = f"{operation} failed: {problems}"
    return CacheReport(outcome, detail, slots, tokens, written, seconds, tuple(answers))


class SlotCacheClient:
    """Save and restore a server's slots, each operation under one deadline; never raises.

    One instance serves a whole process (it keeps a connection pool); pass ``client`` to choose
    the transport (tests use ``httpx.MockTransport``). Proxies from the environment are ignored:
    members are reached directly.
    """

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._client = client or httpx.AsyncClient(trust_env=False, verify=default_tls_context())

    async def aclose(self) -> None:
        await self._client.aclose()

    async def save(self, base_url: str, *, timeout: float, member: str = "") -> CacheReport:
        """Save every used, idle slot of the server at ``base_url`` to ``slot-{id}.bin``."""
        return await self._operation(SAVE, base_url, None, timeout, member)

    async def restore(
        self, base_url: str, slots: Iterable[int], *, timeout: float, member: str = ""
    ) -> CacheReport:
        """Restore ``slots`` (each from ``slot-{id}.bin``) into the server at ``base_url``."""
        return await self._operation(RESTORE, base_url, tuple(slots), timeout, member)

    async def _operation(
        self,
        operation: str,
        base_url: str,
        slots: tuple[int, ...] | None,
        timeout: float,
        member: str,
    ) -> CacheReport:
        base = base_url.rstrip("/")
        attributes: dict[str, str | float] = {
            "url.full": base + SLOTS_PATH,
            "modelpool.member": member,
            "modelpool.kv_cache.timeout_seconds": timeout,
        }
        with tracer.start_as_current_span(
            f"kv cache {operation}", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            headers: dict[str, str] = {}
            propagate.inject(headers)
            started = time.perf_counter()
            answers: list[SlotAnswer] = []
            wanted: list[int] = list(slots or ())
            problem: str | None = None
            listed = slots is not None
            with anyio.move_on_after(timeout) as scope:
                if slots is None:
                    found = await self._slots(base, headers, timeout)
                    if isinstance(found, str):
                        problem = found
                    else:
                        wanted, listed = found, True
                if problem is None:
                    for slot in wanted:
                        answers.append(await self._act(operation, base, slot, headers, timeout))
            seconds = time.perf_counter() - started
            if problem is not None:
                report = CacheReport(CacheOutcome.FAILED, problem, seconds=seconds)
            elif scope.cancelled_caught and not listed:
                report = CacheReport(
                    CacheOutcome.TIMED_OUT,
                    f"/slots did not answer within {timeout:g} s",
                    seconds=seconds,
                )
            elif scope.cancelled_caught:
                report = summarise(operation, answers, wanted, timed_out=True, seconds=seconds)
            elif not wanted:
                what = "no used slot to save" if operation == SAVE else "no slot to restore"
                report = CacheReport(CacheOutcome.NOTHING, what, seconds=seconds)
            else:
                report = summarise(operation, answers, wanted, timed_out=False, seconds=seconds)
            span.set_attribute("modelpool.outcome", report.outcome.value)
            span.set_attribute("modelpool.detail", report.detail)
            span.set_attribute("modelpool.kv_cache.tokens", report.tokens)
            if report.outcome in (CacheOutcome.FAILED, CacheOutcome.TIMED_OUT):
                span.set_status(trace.StatusCode.ERROR, report.detail)
            return report

    async def _slots(self, base: str, headers: dict[str, str], timeout: float) -> list[int] | str:
        try:
            status, body = await self._request("GET", base + SLOTS_PATH, headers, None, timeout)
        except _TooLarge:
            return f"/slots answered more than {MAX_SLOTS_BODY_BYTES} bytes"
        except httpx.HTTPError as err:
            return f"/slots: {type(err).__name__}: {err}"
        return used_slots(status, body)

    async def _act(
        self, operation: str, base: str, slot: int, headers: dict[str, str], timeout: float
    ) -> SlotAnswer:
        url = f"{base}{SLOTS_PATH}/{slot}?action={operation}"
        body = {"filename": slot_filename(slot)}
        try:
            status, answer = await self._request("POST", url, headers, body, timeout)
        except _TooLarge:
            return SlotAnswer(slot, error=f"slot {slot}: answered more than the expected size")
        except httpx.HTTPError as err:
            return SlotAnswer(slot, error=f"slot {slot}: {type(err).__name__}: {err}")
        judge = read_save if operation == SAVE else read_restore
        return judge(slot, status, answer)

    async def _request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: Mapping[str, Any] | None,
        timeout: float,
    ) -> tuple[int, bytes]:
        limit = MAX_SLOTS_BODY_BYTES if body is None else MAX_ACTION_BODY_BYTES
        async with self._client.stream(
            method, url, headers=headers, json=body, timeout=timeout
        ) as response:
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise _TooLarge
            return response.status_code, bytes(data)


class _TooLarge(Exception):
    """An answer over its size limit: not the answer expected."""
