"""Is a member's server up: ``GET /health`` answered 200.

llama-server answers ``/health`` 503 while it loads its model and 200 once it serves; the
simulator does the same. The router-proxy's swap driver asks it of the member it brought up,
directly and often, so the held requests go the moment the server can take them instead of
after the kubelet's next readiness probe, the EndpointSlice and the pool's status
(docs/router.md, "Ready when the server is").

Anything but a 200 within the timeout (a refused connection, 503, a hang) is "not yet"; the
probe never raises. The body is not read: a 200 from the member's own port is the answer.
"""

from __future__ import annotations

from typing import Final

import anyio
import httpx

from controlplane.probes.slotserver import ModelStatus, SlotServerClient, SlotServerError
from controlplane.runtime.tls import default_tls_context

HEALTH_PATH: Final = "/health"
#: How long one probe may take, connect included (``--direct-health-timeout``).
DEFAULT_HEALTH_TIMEOUT_SECONDS: Final = 0.5


class HealthProbe:
    """``GET BASE_URL/health`` is 200; one instance keeps one connection pool.

    Proxies from the environment are ignored: members are reached directly. Pass ``client`` to
    choose the transport (tests use ``httpx.MockTransport``).
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        timeout: float = DEFAULT_HEALTH_TIMEOUT_SECONDS,
    ) -> None:
        self.timeout = timeout
        self._client = client or httpx.AsyncClient(
            timeout=timeout, trust_env=False, verify=default_tls_context()
        )
        #: A slot server's ``/models``, on the same connection pool.
        self._models = SlotServerClient(self._client, timeout=timeout)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def healthy(self, base_url: str) -> bool:
        url = base_url.rstrip("/") + HEALTH_PATH
        with anyio.move_on_after(self.timeout):
            try:
                response = await self._client.get(url, timeout=self.timeout)
            except httpx.HTTPError:
                return False
            return response.status_code == 200
        return False

    async def model_loaded(self, base_url: str, model: str) -> bool:
        """A slot server (llama.cpp's router mode) lists ``model`` as ``loaded`` in ``/models``
        (read as the pool controller reads it, bounded); anything else, an answer that proves
        nothing included, is "not yet"."""
        try:
            state = (await self._models.models(base_url)).get(model)
        except SlotServerError:
            return False
        return state is not None and state.status is ModelStatus.LOADED
