"""Discovery: which :class:`~controlplane.runtime.resources.Resource` serves a kind.

An object says its ``apiVersion`` and ``kind``; a request needs the plural name and scope.
:class:`ResourceMapper` reads the API server's discovery documents and caches them, because they
change only when CRDs or aggregated APIs change. It sits above the client (it makes requests),
while :mod:`~controlplane.runtime.resources` sits below it: no import circle.
"""

from __future__ import annotations

from typing import Any

from cachetools import TTLCache

from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import Resource

#: How long a discovery document is trusted before it is fetched again.
DISCOVERY_TTL_SECONDS = 600.0


class ResourceMapper:
    """Maps ``(apiVersion, kind)`` to a :class:`Resource` through cached discovery."""

    def __init__(self, client: KubeClient, ttl: float = DISCOVERY_TTL_SECONDS) -> None:
        self._client = client
        self._documents: TTLCache[str, dict[str, Resource]] = TTLCache(maxsize=256, ttl=ttl)

    async def _kinds(self, api_version: str, refresh: bool) -> dict[str, Resource]:
        if not refresh and api_version in self._documents:
            return self._documents[api_version]
        group, _, version = api_version.rpartition("/")
        probe = Resource(group, version, "", "")
        document: dict[str, Any] = await self._client.request("GET", probe.base)
        kinds: dict[str, Resource] = {}
        for entry in document.get("resources", []):
            if "/" in entry["name"]:  # subresources such as pods/status
                continue
            kinds[entry["kind"]] = Resource(
                group, version, entry["name"], entry["kind"], bool(entry.get("namespaced"))
            )
        self._documents[api_version] = kinds
        return kinds

    async def resource_for(self, api_version: str, kind: str) -> Resource:
        """The resource serving ``kind``; a miss refreshes discovery once (a CRD may be new)."""
        for refresh in (False, True):
            try:
                kinds = await self._kinds(api_version, refresh)
            except NotFound:
                kinds = {}
            if kind in kinds:
                return kinds[kind]
        raise NotFound(404, "NotFound", f"no resource serves kind {kind!r} in {api_version!r}")
