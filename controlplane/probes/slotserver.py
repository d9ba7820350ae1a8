"""What a pool's slot server (llama.cpp in router mode) has loaded, and loading and unloading.

llama-server in router mode lists its models at ``GET /models`` (``data[].id`` and
``data[].status.value``: ``unloaded``, ``loading``, ``loaded``, ...; ``status.failed`` when its
child exited on its own) and loads or stops one on ``POST /models/load`` and
``POST /models/unload`` with ``{"model": NAME}``; both answer at once and the change shows in
``/models`` (``tools/server/server-models.cpp``).

The pool controller reads the list on every reconcile of such a pool and acts on it; so a reading
that proves nothing (no answer in time, a status other than 200, a body that is not the list)
is an error, never an empty list: a pool must not believe nothing is loaded because it could not
ask. Loading and unloading never raise either: they say whether the server took the order and why
not (a 400 "model is already running" after a load that raced ours is harmless: the next
reading tells).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
import httpx
import msgspec

from controlplane.runtime.tls import default_tls_context

MODELS_PATH: Final = "/models"
LOAD_PATH: Final = "/models/load"
UNLOAD_PATH: Final = "/models/unload"
#: Every call (connect, request, body) must finish within this.
SLOT_SERVER_TIMEOUT_SECONDS: Final = 2.0
#: A model list is a few KB per model; a body larger than this is not one.
MAX_MODELS_BODY_BYTES: Final = 4 << 20

_DECODE = msgspec.json.Decoder().decode


class ModelStatus(enum.StrEnum):
    """``status.value`` of a model, as llama.cpp names them."""

    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"
    SLEEPING = "sleeping"
    DOWNLOADING = "downloading"
    DOWNLOADED = "downloaded"


#: The values for which the server runs a child for the model: it holds (or takes) GPU memory.
RUNNING: Final = frozenset({ModelStatus.LOADING, ModelStatus.LOADED, ModelStatus.SLEEPING})


@dataclass(frozen=True, slots=True)
class ModelState:
    """One model as ``/models`` lists it."""

    status: ModelStatus
    #: Its last child exited on its own (llama.cpp's ``status.failed``), with this code.
    failed: bool = False
    exit_code: int | None = None

    @property
    def running(self) -> bool:
        return self.status in RUNNING


class SlotServerError(Exception):
    """The slot server's answer proves nothing; in words for a condition."""


def read_models(status_code: int, body: bytes) -> dict[str, ModelState]:
    """Judge one ``/models`` answer (the pure part): every model by id, or
    :class:`SlotServerError`."""
    if status_code != 200:
        raise SlotServerError(f"/models answered {status_code}")
    try:
        listing = _DECODE(body)
    except msgspec.DecodeError:
        raise SlotServerError("/models answered a body that is not JSON") from None
    data = listing.get("data") if isinstance(listing, Mapping) else None
    if not isinstance(data, list):
        raise SlotServerError("/models answered JSON without a data array")
    models: dict[str, ModelState] = {}
    for index, entry in enumerate(data):
        models.update(_model(index, entry))
    return models


def _model(index: int, entry: Any) -> dict[str, ModelState]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
        raise SlotServerError(f"/models: entry {index} has no id")
    status = entry.get("status")
    value = status.get("value") if isinstance(status, Mapping) else None
    try:
        parsed = ModelStatus(str(value))
    except ValueError:
        raise SlotServerError(f"/models: {entry['id']} has status {value!r}") from None
    assert isinstance(status, Mapping)
    code = status.get("exit_code")
    return {
        entry["id"]: ModelState(
            parsed, bool(status.get("failed")), code if isinstance(code, int) else None
        )
    }


@dataclass(frozen=True, slots=True)
class Order:
    """What the server said to a load or an unload."""

    taken: bool
    detail: str


class SlotServerClient:
    """The pool controller's calls to slot servers; one instance keeps a connection pool.

    Proxies from the environment are ignored: servers are reached directly.
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        timeout: float = SLOT_SERVER_TIMEOUT_SECONDS,
    ) -> None:
        self.timeout = timeout
        self._client = client or httpx.AsyncClient(
            timeout=timeout, trust_env=False, verify=default_tls_context()
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def models(self, base_url: str) -> dict[str, ModelState]:
        """Every model of the server at ``base_url``; :class:`SlotServerError` when unproven."""
        url = base_url.rstrip("/") + MODELS_PATH
        with anyio.move_on_after(self.timeout):
            try:
                async with self._client.stream("GET", url, timeout=self.timeout) as response:
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_MODELS_BODY_BYTES:
                            raise SlotServerError(
                                f"/models answered more than {MAX_MODELS_BODY_BYTES} bytes"
                            )
                    return read_models(response.status_code, bytes(body))
            except httpx.TimeoutException:
                pass
            except httpx.HTTPError as err:
                raise SlotServerError(f"/models: {type(err).__name__}: {err}") from err
        raise SlotServerError(f"/models did not answer within {self.timeout:g} s")

    async def load(self, base_url: str, model: str) -> Order:
        return await self._order(base_url, LOAD_PATH, model)

    async def unload(self, base_url: str, model: str) -> Order:
        return await self._order(base_url, UNLOAD_PATH, model)

    async def _order(self, base_url: str, path: str, model: str) -> Order:
        url = base_url.rstrip("/") + path
        with anyio.move_on_after(self.timeout):
            try:
                response = await self._client.post(url, json={"model": model})
            except httpx.HTTPError as err:
                return Order(False, f"{path}: {type(err).__name__}: {err}")
            if response.status_code == 200:
                return Order(True, f"{path} {model}: taken")
            return Order(False, f"{path} {model}: {response.status_code} {_message(response)}")
        return Order(False, f"{path} {model}: no answer within {self.timeout:g} s")


def _message(response: httpx.Response) -> str:
    """llama.cpp's ``error.message``, else the start of the body."""
    try:
        body = _DECODE(response.content)
    except msgspec.DecodeError:
        return response.text[:200]
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])
    return response.text[:200]
