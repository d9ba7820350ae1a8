"""Fakes of the cluster for the router-proxy's unit tests: an object API and a cache view.

:class:`FakeApi` accepts and refuses writes as the real kube-apiserver does (the e2e test
``tests/e2e/test_fake_api_contract.py`` runs the same scenarios against both):

* an update whose ``metadata.resourceVersion`` differs from the stored one is 409 Conflict;
* an update **without** a resourceVersion is 422 Invalid (``metadata.resourceVersion: Invalid
  value: 0: must be specified for an update``) for Leases and custom resources alike; only kinds
  whose strategy allows unconditional updates (ConfigMaps) accept it;
* an update of a missing Lease *creates* it (its strategy allows create-on-update); of a missing
  custom resource it is 404;
* create of an existing name is 409 AlreadyExists; get of a missing one 404.

Every call yields to the event loop before it answers, as a real request does, so a
cancellation can arrive in the middle of one.

Faults a test can inject: :attr:`broken` (every call 500), :attr:`conflicts` (someone writes just
before our next update), :attr:`lost_answers` (the write lands, the reply is an error), and
:attr:`hang` (calls never answer, for time limits).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel

from controlplane.runtime.errors import (
    AlreadyExists,
    Conflict,
    InternalError,
    Invalid,
    NotFound,
    TransportError,
)
from controlplane.runtime.resources import Resource

Object = dict[str, Any]
#: Kinds whose updates may omit resourceVersion (checked against v1.36.3).
UNCONDITIONAL_UPDATES = {"configmaps"}
#: Kinds whose update of a missing object creates it.
CREATE_ON_UPDATE = {"leases"}


class FakeApi:
    """get/create/update with the API server's resourceVersion rules and injectable faults."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Object] = {}
        self.version = 0
        self.writes: list[tuple[str, str, Object]] = []
        self.conflicts: dict[str, int] = {}  # plural -> how many next updates answer 409
        self.lost_answers: dict[str, int] = {}  # plural -> writes that land but answer an error
        self.broken = False
        self.hang = False
        self.calls = 0

    async def _enter(self) -> None:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        if self.hang:
            await anyio.sleep_forever()
        if self.broken:
            raise InternalError(500, "InternalError", "etcd is down")

    def _lose_answer(self, plural: str) -> None:
        if self.lost_answers.get(plural, 0) > 0:
            self.lost_answers[plural] -= 1
            raise TransportError("the connection was reset after the write")

    def put(self, resource: Resource, obj: Object) -> Object:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[(resource.plural, stored["metadata"]["name"])] = stored
        return copy.deepcopy(stored)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object:
        await self._enter()
        found = self.objects.get((resource.plural, name))
        if found is None:
            raise NotFound(404, "NotFound", f"{name} not found")
        return copy.deepcopy(found)

    async def create(self, resource: Resource, obj: Object, namespace: str | None = None) -> Object:
        await self._enter()
        name = obj["metadata"]["name"]
        if (resource.plural, name) in self.objects:
            raise AlreadyExists(409, "AlreadyExists", f"{name} exists")
        self.writes.append(("create", resource.plural, copy.deepcopy(obj)))
        stored = self.put(resource, obj)
        self._lose_answer(resource.plural)
        return stored

    async def update(self, resource: Resource, obj: Object) -> Object:
        await self._enter()
        name = obj["metadata"]["name"]
        current = self.objects.get((resource.plural, name))
        if current is None and resource.plural in CREATE_ON_UPDATE:
            self.writes.append(("update", resource.plural, copy.deepcopy(obj)))
            stored = self.put(resource, obj)
            self._lose_answer(resource.plural)
            return stored
        if current is None:
            raise NotFound(404, "NotFound", f"{name} not found")
        if self.conflicts.get(resource.plural, 0) > 0:
            self.conflicts[resource.plural] -= 1
            self.put(resource, current)  # someone else wrote in between
            raise Conflict(409, "Conflict", "the object has been modified")
        version = obj["metadata"].get("resourceVersion")
        if not version and resource.plural not in UNCONDITIONAL_UPDATES:
            raise Invalid(
                422,
                "Invalid",
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            )
        if version and version != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        self.writes.append(("update", resource.plural, copy.deepcopy(obj)))
        stored = self.put(resource, obj)
        self._lose_answer(resource.plural)
        return stored

    def lease_writes(self) -> list[Object]:
        return [obj for _, plural, obj in self.writes if plural == "leases"]


class FakeView:
    """The caches: pools, InferenceServices and member URLs, edited by the test."""

    def __init__(self, api: FakeApi | None = None) -> None:
        self.pools: dict[str, Object] = {}
        self.isvcs: dict[str, Object] = {}
        self.urls: dict[str, list[str]] = {}
        #: Listed endpoints that are not ready (a starting pod), by member.
        self.starting: dict[str, list[str]] = {}
        #: The Lease informer's cache is the fake API's Leases (it delivers every write at once).
        self.api = api

    def pool_leases(self, pool: str) -> list[Mapping[str, Any]]:
        if self.api is None:
            return []
        return [
            copy.deepcopy(obj)
            for (plural, _), obj in self.api.objects.items()
            if plural == "leases"
            and ((obj.get("metadata") or {}).get("labels") or {}).get(
                "inference.modelpool.dev/pool"
            )
            == pool
        ]

    def pool(self, name: str) -> Mapping[str, Any] | None:
        return self.pools.get(name)

    def isvc(self, name: str) -> Mapping[str, Any] | None:
        return self.isvcs.get(name)

    def member_urls(self, member: str) -> list[str]:
        return list(self.urls.get(member, []))

    def member_starting_urls(self, member: str) -> list[str]:
        return list(self.starting.get(member, []))

    def make_resident(self, pool: str, member: str) -> None:
        self.pools[pool].setdefault("status", {})["residentMember"] = member
        self.isvcs[member]["status"] = {"phase": "Ready"}
        self.urls[member] = [f"http://127.0.0.1:9{len(member)}00"]

    def join_residents(self, pool: str, member: str) -> None:
        """A pool with a budget names ``member`` resident beside the others."""
        self.make_resident(pool, member)
        status = self.pools[pool]["status"]
        status["residents"] = sorted({*status.get("residents", []), member})

    def leave_residents(self, pool: str, member: str) -> None:
        """A pool with a budget released ``member``: it is resident no more."""
        status = self.pools[pool]["status"]
        status["residents"] = [m for m in status.get("residents", []) if m != member]
        self.start_draining(member)

    def start_draining(self, member: str) -> None:
        """The pool controller has set ``member`` to 0: it is still resident but not Ready."""
        self.isvcs[member]["status"] = {"phase": "Stopped"}
        self.urls[member] = []
