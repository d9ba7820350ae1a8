"""llama.cpp's idle probe: ``GET /slots``.

llama-server lists its slots at ``/slots``: a JSON array with one object per slot. Current
servers mark a slot with ``is_processing`` (a boolean); older ones with ``state`` (0 idle,
1 processing). The member is idle only when the answer is **200 with a JSON array whose every
slot says it is not processing**. Everything else is ``FAILED``, never idle:

* any other status: 501 (``--no-slots``), 503 (loading), 500, ...;
* no answer within :data:`SLOTS_PROBE_TIMEOUT_SECONDS` (connect, headers and body together),
  a refused connection, a body over :data:`MAX_SLOTS_BODY_BYTES`;
* a body that is not JSON, not an array, an empty array (a server has at least one slot), an
  element that is not an object, or a slot with neither field (or with a field of the wrong type).

Each probe is an OpenTelemetry span ``slots probe`` (kind CLIENT; ``url.full``,
``http.request.method``, ``http.response.status_code``, the member, the outcome and what was seen),
and its request carries the span's W3C ``traceparent``, so a traced member joins the trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlencode

import anyio
import httpx
import msgspec
from opentelemetry import propagate, trace

from controlplane.probes.idle import IdleOutcome, IdleReport
from controlplane.runtime.tls import default_tls_context

tracer = trace.get_tracer("controlplane.probes.llamacpp")

SLOTS_PATH: Final = "/slots"
#: The whole probe (connect, request, body) must finish within this, or it is ``FAILED``.
SLOTS_PROBE_TIMEOUT_SECONDS: Final = 2.0
#: A slots array is a few KB; a body larger than this is not one.
MAX_SLOTS_BODY_BYTES: Final = 1 << 20
#: llama.cpp's legacy ``state`` value for an idle slot.
LEGACY_STATE_IDLE: Final = 0

_DECODE = msgspec.json.Decoder().decode
_JSON_KINDS: Final[dict[type, str]] = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _slot_processing(index: int, slot: Any) -> bool | str:
    """Whether one slot is processing, or why its entry proves nothing."""
    if not isinstance(slot, Mapping):
        return f"slot {index} is not an object"
    if "is_processing" in slot:
        value = slot["is_processing"]
        if not isinstance(value, bool):
            return f"slot {index}: is_processing is {value!r}, not a boolean"
        return value
    if "state" in slot:
        value = slot["state"]
        if type(value) is not int:
            return f"slot {index}: state is {value!r}, not an integer"
        return value != LEGACY_STATE_IDLE
    return f"slot {index} has neither is_processing nor state"


def read_slots(status_code: int, body: bytes) -> IdleReport:
    """Judge one ``/slots`` answer (the pure part of the probe)."""
    if status_code != 200:
        return IdleReport(IdleOutcome.FAILED, f"/slots answered {status_code}")
    return dataclasses.replace(_read_slots_body(body), answered=True)


def _read_slots_body(body: bytes) -> IdleReport:
    """Judge the body of a 200 answer to ``/slots``."""
    try:
        slots = _DECODE(body)
    except msgspec.DecodeError:
        return IdleReport(IdleOutcome.FAILED, "/slots answered 200 with a body that is not JSON")
    if not isinstance(slots, list):
        kind = _JSON_KINDS.get(type(slots), type(slots).__name__)
        return IdleReport(IdleOutcome.FAILED, f"/slots answered 200 with JSON {kind}, not an array")
    if not slots:
        return IdleReport(IdleOutcome.FAILED, "/slots answered an empty array")
    processing = 0
    for index, slot in enumerate(slots):
        verdict = _slot_processing(index, slot)
        if isinstance(verdict, str):
            return IdleReport(IdleOutcome.FAILED, f"/slots: {verdict}", slots=len(slots))
        processing += verdict
    if processing:
        return IdleReport(
            IdleOutcome.BUSY,
            f"{processing} of {len(slots)} slot(s) processing",
            slots=len(slots),
            processing=processing,
        )
    return IdleReport(IdleOutcome.IDLE, f"{len(slots)} slot(s) idle", slots=len(slots))


class SlotsProbe:
    """``GET BASE_URL/slots``, judged by :func:`read_slots`; never raises, always bounded.

    One instance serves every probe of a process (it keeps a connection pool); pass ``client``
    to choose the transport (tests use ``httpx.MockTransport`` or an in-process ASGI app).
    Proxies from the environment are ignored: members are reached directly.
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        timeout: float = SLOTS_PROBE_TIMEOUT_SECONDS,
    ) -> None:
        self.timeout = timeout
        self._client = client or httpx.AsyncClient(
            timeout=timeout, trust_env=False, verify=default_tls_context()
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def probe(
        self, base_url: str, *, member: str = "", model: str | None = None
    ) -> IdleReport:
        url = base_url.rstrip("/") + SLOTS_PATH
        if model is not None:
            # A router-mode server answers for one of its models, and must not load it to do so.
            url += "?" + urlencode({"model": model, "autoload": "false"})
        attributes = {"http.request.method": "GET", "url.full": url, "modelpool.member": member}
        with tracer.start_as_current_span(
            "slots probe", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            headers: dict[str, str] = {}
            propagate.inject(headers)
            report = await self._probe(url, headers, span)
            span.set_attribute("modelpool.outcome", report.outcome.value)
            span.set_attribute("modelpool.detail", report.detail)
            if report.outcome is IdleOutcome.FAILED:
                span.set_status(trace.StatusCode.ERROR, report.detail)
            return report

    async def _probe(self, url: str, headers: dict[str, str], span: trace.Span) -> IdleReport:
        with anyio.move_on_after(self.timeout):
            try:
                async with self._client.stream(
                    "GET", url, timeout=self.timeout, headers=headers
                ) as response:
                    span.set_attribute("http.response.status_code", response.status_code)
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_SLOTS_BODY_BYTES:
                            return IdleReport(
                                IdleOutcome.FAILED,
                                f"/slots answered more than {MAX_SLOTS_BODY_BYTES} bytes",
                            )
                    return read_slots(response.status_code, bytes(body))
            except httpx.TimeoutException:
                pass  # httpx's own per-phase timeout: reported as the overall one is, below
            except httpx.HTTPError as err:
                return IdleReport(IdleOutcome.FAILED, f"/slots: {type(err).__name__}: {err}")
        # Only a timeout gets here (the overall deadline cancelled the request, or httpx's fired).
        return IdleReport(IdleOutcome.FAILED, f"/slots did not answer within {self.timeout:g} s")
