"""The router's :class:`FakeApi` accepts and refuses exactly what a real kube-apiserver does.

The router-proxy's unit tests trust :class:`tests.unit.router_fakes.FakeApi` to answer a Lease or
InferenceService write the way the API server would: a fake that is kinder than the server (say,
accepting an InferenceService update without a resourceVersion) lets a unit test pass for code
that fails in a cluster. So the same scenarios run here against the fake and against the real
API server (through :class:`KubeClient`, as admin), through the same three verbs, and each must
end with the same outcome: success, or exactly the same error class (``AlreadyExists`` is a
``Conflict`` subclass, so classes are compared for identity, not with ``isinstance``).

The expected outcomes are what the real server answers, written down once in :data:`EXPECTED`
(they differ from the fake's docstring for Leases: no unconditional update, and create-on-update
of a missing one); a scenario that fails only on ``fake`` is a place where the fake lies, one
that fails on ``real`` means the server (or its version) changed the rule.
The real backend needs the session's control plane: if it cannot start, these tests fail (the
``cluster`` fixture raises), they are never skipped.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService
from controlplane.router.lease import ObjectApi
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import AlreadyExists, Conflict, Invalid, KubeError, NotFound
from controlplane.runtime.resources import LEASES, Resource
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import install
from tests.unit.router_fakes import UNCONDITIONAL_UPDATES, FakeApi

# Marked here, not only by conftest after collection: anyio must see the mark while pytest
# parametrizes, or the scenario and backend parameters are lost.
pytestmark = [pytest.mark.anyio, pytest.mark.any_cluster]

Object = dict[str, Any]
ISVC = InferenceService.resource()
#: A resourceVersion no object in a fresh namespace has: the server hands out etcd revisions,
#: and the fake counts from 1, so neither reaches this in a test.
UNSEEN_VERSION = "999999999"


#: The verbs both backends share, with the signatures the router calls them by.
Api = ObjectApi


@dataclass(frozen=True)
class Backend:
    name: str
    api: Api
    namespace: str


# -- objects -------------------------------------------------------------------------------------


def lease_body(name: str, namespace: str) -> Object:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15},
    }


def isvc_body(name: str, namespace: str) -> Object:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": {"name": name, "source": f"/models/{name}.gguf"}, "replicas": 0},
    }


@dataclass(frozen=True)
class Kind:
    """One resource under test and how to change an object of it (so an update is a real edit)."""

    resource: Resource
    body: Callable[[str, str], Object]
    edit: Callable[[Object], None]


def _edit_lease(obj: Object) -> None:
    obj["spec"]["holderIdentity"] = f"replica-{secrets.token_hex(2)}"


def _edit_isvc(obj: Object) -> None:
    obj["spec"]["replicas"] = 1 - int(obj["spec"].get("replicas") or 0)


KINDS = {
    "leases": Kind(LEASES, lease_body, _edit_lease),
    "inferenceservices": Kind(ISVC, isvc_body, _edit_isvc),
}


# -- scenarios -----------------------------------------------------------------------------------

Scenario = Callable[[Backend, Kind, str], Awaitable[object]]


def _fresh(obj: Object) -> Object:
    """A copy of a read object with only what a client would send back (name, namespace, rv)."""
    meta = obj["metadata"]
    sent = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    sent["metadata"] = {
        "name": meta["name"],
        "namespace": meta.get("namespace"),
        "resourceVersion": meta["resourceVersion"],
    }
    return sent


async def create(b: Backend, k: Kind, name: str) -> object:
    return await b.api.create(k.resource, k.body(name, b.namespace), b.namespace)


async def create_existing(b: Backend, k: Kind, name: str) -> object:
    await b.api.create(k.resource, k.body(name, b.namespace), b.namespace)
    return await b.api.create(k.resource, k.body(name, b.namespace), b.namespace)


async def get_missing(b: Backend, k: Kind, name: str) -> object:
    return await b.api.get(k.resource, name, b.namespace)


async def update_with_current_rv(b: Backend, k: Kind, name: str) -> object:
    await b.api.create(k.resource, k.body(name, b.namespace), b.namespace)
    obj = _fresh(await b.api.get(k.resource, name, b.namespace))
    k.edit(obj)
    return await b.api.update(k.resource, obj)


async def update_with_stale_rv(b: Backend, k: Kind, name: str) -> object:
    """Read, let someone else write, then write with what was read: the classic lost update."""
    await b.api.create(k.resource, k.body(name, b.namespace), b.namespace)
    stale = _fresh(await b.api.get(k.resource, name, b.namespace))
    theirs = _fresh(stale)
    k.edit(theirs)
    await b.api.update(k.resource, theirs)
    k.edit(stale)
    return await b.api.update(k.resource, stale)


async def update_without_rv(b: Backend, k: Kind, name: str) -> object:
    await b.api.create(k.resource, k.body(name, b.namespace), b.namespace)
    obj = _fresh(await b.api.get(k.resource, name, b.namespace))
    del obj["metadata"]["resourceVersion"]
    k.edit(obj)
    return await b.api.update(k.resource, obj)


async def update_missing(b: Backend, k: Kind, name: str) -> object:
    """An update of an object that is not there, carrying a resourceVersion from an old read."""
    obj = k.body(name, b.namespace)
    obj["metadata"]["resourceVersion"] = UNSEEN_VERSION
    return await b.api.update(k.resource, obj)


async def update_missing_without_rv(b: Backend, k: Kind, name: str) -> object:
    """An update of an object that is not there, without a resourceVersion (a blind write)."""
    return await b.api.update(k.resource, k.body(name, b.namespace))


SCENARIOS: dict[str, Scenario] = {
    "create": create,
    "create-existing": create_existing,
    "get-missing": get_missing,
    "update-with-current-rv": update_with_current_rv,
    "update-with-stale-rv": update_with_stale_rv,
    "update-without-rv": update_without_rv,
    "update-missing": update_missing,
    "update-missing-without-rv": update_missing_without_rv,
}

Outcome = type[KubeError] | None  # None: the call succeeded

#: What kube-apiserver answers, per (resource, scenario), as observed on the server the suite
#: builds (v1.36). Where this differs from FakeApi's docstring, the docstring is what is wrong.
EXPECTED: dict[tuple[str, str], Outcome] = {
    **{
        (plural, scenario): outcome
        for plural in KINDS
        for scenario, outcome in {
            "create": None,
            "create-existing": AlreadyExists,
            "get-missing": NotFound,
            "update-with-current-rv": None,
            "update-with-stale-rv": Conflict,
            # Neither Leases' update strategy nor custom resources' allows an unconditional
            # update: "metadata.resourceVersion: Invalid value: 0: must be specified for an
            # update" (ConfigMaps, Pods, Services, Deployments do allow it).
            "update-without-rv": Invalid,
        }.items()
    },
    # Leases' strategy allows create-on-update: a PUT of a missing Lease creates it, whatever
    # resourceVersion it carries. Custom resources' does not: 404.
    ("leases", "update-missing"): None,
    ("leases", "update-missing-without-rv"): None,
    ("inferenceservices", "update-missing"): NotFound,
    ("inferenceservices", "update-missing-without-rv"): NotFound,
}


async def outcome_of(scenario: Scenario, backend: Backend, kind: Kind) -> Outcome:
    """None when the last call succeeded, else the exact class of what it raised."""
    name = f"contract-{secrets.token_hex(4)}"
    try:
        await scenario(backend, kind, name)
    except KubeError as error:
        return type(error)
    return None


def _describe(outcome: Outcome) -> str:
    return "success" if outcome is None else outcome.__name__


# -- backends ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def crds(cluster: TestCluster) -> TestCluster:
    """The project's CRDs installed and Established (once per module)."""
    await install(cluster)
    return cluster


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """FakeApi, or the real API server as admin in a fresh namespace (CRDs installed)."""
    if request.param == "fake":
        return Backend("fake", FakeApi(), "contract")
    request.getfixturevalue("crds")
    admin: KubeClient = request.getfixturevalue("admin")
    namespace: str = request.getfixturevalue("namespace")
    return Backend("real", admin, namespace)


# -- tests ---------------------------------------------------------------------------------------


def test_fakes_unconditional_kinds_agree_with_the_server() -> None:
    """FakeApi's ``UNCONDITIONAL_UPDATES`` names the kinds that take an update without a
    resourceVersion; for the kinds checked here it must say what the server does, so a failure
    points at the one constant to fix."""
    for plural in KINDS:
        unconditional = EXPECTED[(plural, "update-without-rv")] is None
        assert unconditional == (plural in UNCONDITIONAL_UPDATES), plural


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("plural", list(KINDS))
async def test_outcome_matches_the_api_server(backend: Backend, plural: str, scenario: str) -> None:
    got = await outcome_of(SCENARIOS[scenario], backend, KINDS[plural])
    want = EXPECTED[(plural, scenario)]
    assert got is want, (
        f"{backend.name}: {scenario} on {plural} gave {_describe(got)}, "
        f"the API server's rule is {_describe(want)}"
    )


async def test_fake_and_server_agree_on_every_scenario(
    crds: TestCluster, admin: KubeClient, namespace: str
) -> None:
    """Side by side, in one report: every scenario where the fake and the server differ."""
    fake = Backend("fake", FakeApi(), namespace)
    real = Backend("real", admin, namespace)
    differ: list[str] = []
    for plural, kind in KINDS.items():
        for scenario_name, scenario in SCENARIOS.items():
            on_fake = await outcome_of(scenario, fake, kind)
            on_real = await outcome_of(scenario, real, kind)
            if on_fake is not on_real:
                differ.append(
                    f"{plural} {scenario_name}: fake {_describe(on_fake)}, "
                    f"server {_describe(on_real)}"
                )
    assert not differ, "FakeApi disagrees with the API server:\n" + "\n".join(differ)
