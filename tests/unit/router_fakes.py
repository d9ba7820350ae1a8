"""Fakes of the cluster for the router-proxy's unit tests: an object API and a cache view."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from controlplane.runtime.errors import AlreadyExists, Conflict, InternalError, NotFound
from controlplane.runtime.resources import Resource

Object = dict[str, Any]


class FakeApi:
    """get/create/update with resourceVersions, 409s on stale writes, and injectable failures."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Object] = {}
        self.version = 0
        self.writes: list[tuple[str, str, Object]] = []
        self.conflicts: dict[str, int] = {}  # plural -> how many next updates answer 409
        self.broken = False

    def put(self, resource: Resource, obj: Object) -> Object:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[(resource.plural, stored["metadata"]["name"])] = stored
        return copy.deepcopy(stored)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object:
        if self.broken:
            raise InternalError(500, "InternalError", "etcd is down")
        found = self.objects.get((resource.plural, name))
        if found is None:
            raise NotFound(404, "NotFound", f"{name} not found")
        return copy.deepcopy(found)

    async def create(self, resource: Resource, obj: Object, namespace: str | None = None) -> Object:
        if self.broken:
            raise InternalError(500, "InternalError", "etcd is down")
        name = obj["metadata"]["name"]
        if (resource.plural, name) in self.objects:
            raise AlreadyExists(409, "AlreadyExists", f"{name} exists")
        self.writes.append(("create", resource.plural, copy.deepcopy(obj)))
        return self.put(resource, obj)

    async def update(self, resource: Resource, obj: Object) -> Object:
        name = obj["metadata"]["name"]
        current = self.objects.get((resource.plural, name))
        if current is None:
            raise NotFound(404, "NotFound", f"{name} not found")
        if self.conflicts.get(resource.plural, 0) > 0:
            self.conflicts[resource.plural] -= 1
            self.put(resource, current)  # someone else wrote in between
            raise Conflict(409, "Conflict", "the object has been modified")
        if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        self.writes.append(("update", resource.plural, copy.deepcopy(obj)))
        return self.put(resource, obj)

    def lease_writes(self) -> list[Object]:
        return [obj for _, plural, obj in self.writes if plural == "leases"]


class FakeView:
    """The caches: pools, InferenceServices and member URLs, edited by the test."""

    def __init__(self) -> None:
        self.pools: dict[str, Object] = {}
        self.isvcs: dict[str, Object] = {}
        self.urls: dict[str, list[str]] = {}

    def pool(self, name: str) -> Mapping[str, Any] | None:
        return self.pools.get(name)

    def isvc(self, name: str) -> Mapping[str, Any] | None:
        return self.isvcs.get(name)

    def member_urls(self, member: str) -> list[str]:
        return list(self.urls.get(member, []))

    def make_resident(self, pool: str, member: str) -> None:
        self.pools[pool].setdefault("status", {})["residentMember"] = member
        self.isvcs[member]["status"] = {"phase": "Ready"}
        self.urls[member] = [f"http://127.0.0.1:9{len(member)}00"]
