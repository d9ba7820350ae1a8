"""Ready when the server is: the swap driver's own ``/health`` probe of the target it brought up.

Without it a held request waits, after the target's server can already answer, for the kubelet's
next readiness probe (``periodSeconds``, at least 1 s), the pod's status, the EndpointSlice, the
InferenceService's status and the pool's status, each a write and a watch event: about a second
on a real node for work the server finished at once (docs/router.md, "Ready when the server is").
The driver asks instead, every :data:`DEFAULT_DIRECT_HEALTH_INTERVAL_SECONDS`, and forwards at
the first 200. The readiness probe stays: everyone else (other replicas, the pool's status,
``kubectl``) still learns of it that way.

A pool with a slot server (``spec.slotServer``) starts no pod: the driver asks the server's
``/models`` instead (:func:`slot_server_candidates`, :meth:`DirectReady.first_loaded`), once the
pool grants the target, and forwards when its model is loaded.

What the driver trusts, and why it is safe:

* **The pool's grant.** It asks only a target that ``status.members[].slot`` says is
  ``Granted``: the pool controller grants only once every other member is released with no pod
  left, so nothing it forwards can land beside another resident.
* **Nothing but the server.** A member whose pods wait on a readiness gate after the server is
  up (``spec.kvCache``: the saved slots are restored first) is never asked: it is left to its
  readiness, since ``/health`` says nothing of the gate.
* **The EndpointSlice.** The address is one the endpoint controller listed for the target's own
  Service (ready or not, never terminating): the same source the fast path trusts.
* **Its own Lease.** The address is handed out only while the driver holds the pool's Lease
  with its intent for the target (:meth:`~controlplane.router.activator.Activator._direct_url`),
  and the swap still ends, and the Lease is released, only once the pool names the target
  resident. While the intent lives the target is the pool's owner and is never released; should
  the Lease be lost, the holder counts it lost before any reader sees it expire, and the pool
  controller drains a starting member through the idle gate (it probes its listed pods' ``/slots``
  and waits while a server that answers is busy: docs/modelpool.md, "Drain").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from controlplane.api.v1alpha1.modelpool import SLOT_GRANTED, member_slot

#: How often the driver asks a granted target's starting pod ``/health`` (or a slot server
#: ``/models``) (``--direct-health-interval``; 0 turns the probe off). Half of it is, on average,
#: how long a loaded model waits for its first request; 20 ms is one cheap GET per interval from
#: one replica (the swap's driver), only while the swap's target loads.
DEFAULT_DIRECT_HEALTH_INTERVAL_SECONDS: Final = 0.02


class HealthCheck(Protocol):
    """``GET /health`` answered 200 (:class:`controlplane.probes.health.HealthProbe`)."""

    async def healthy(self, base_url: str) -> bool: ...

    async def model_loaded(self, base_url: str, model: str) -> bool:
        """A slot server lists ``model`` as loaded."""
        ...


def granted(pool: Mapping[str, Any] | None, member: str) -> bool:
    """The pool's status grants ``member`` the slot (its own decision, ``members[].slot``)."""
    return pool is not None and member_slot(pool, member) == SLOT_GRANTED


def gated(isvc: Mapping[str, Any] | None) -> bool:
    """The member's pods carry a readiness gate its server's ``/health`` knows nothing of: with
    ``spec.kvCache`` the saved slots are restored after the server is up and before the pod is
    Ready, and a request sent earlier would miss them (or land in a slot being restored)."""
    kv_cache = ((isvc or {}).get("spec") or {}).get("kvCache") or {}
    return bool(kv_cache.get("enabled"))


def direct_candidates(
    pool: Mapping[str, Any] | None,
    isvc: Mapping[str, Any] | None,
    member: str,
    starting: Sequence[str],
) -> list[str]:
    """The addresses worth asking: ``member``'s starting endpoints, if the pool grants it and
    nothing but its server stands between it and Ready (:func:`gated`)."""
    return list(starting) if granted(pool, member) and not gated(isvc) else []


def slot_server_candidates(
    pool: Mapping[str, Any] | None, member: str, ready: Sequence[str]
) -> list[str]:
    """Of a pool with a slot server, where to ask whether ``member``'s model is loaded: the
    server (``member``'s Service selects it, ready), once the pool grants ``member``; else none.
    The grant is written only once no other model runs in the server (docs/modelpool.md, "One slot
    server"), so nothing forwarded lands beside another model."""
    return list(ready) if granted(pool, member) else []


class DirectReady:
    """Asks a granted target's starting pods ``/health``; the first that answers 200 wins."""

    def __init__(
        self, health: HealthCheck, interval: float = DEFAULT_DIRECT_HEALTH_INTERVAL_SECONDS
    ) -> None:
        self.health = health
        self.interval = interval

    async def first_loaded(self, urls: Sequence[str], model: str) -> str | None:
        """The first slot server of ``urls`` listing ``model`` as loaded."""
        for url in urls:
            if await self.health.model_loaded(url, model):
                return url
        return None

    async def first_healthy(self, urls: Sequence[str]) -> str | None:
        for url in urls:
            if await self.health.healthy(url):
                return url
        return None
