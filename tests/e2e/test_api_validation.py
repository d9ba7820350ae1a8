"""The API server itself refuses bad objects, with a message that names the field to fix.

Each invalid object is a valid base object with one thing wrong, so a refusal can only come from
that one thing (the bases are proven valid first).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.api.v1alpha1 import API_VERSION, InferenceService, ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Invalid
from controlplane.runtime.resources import Resource
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import kubectl

# Marked here, not only by conftest after collection: anyio must see the mark while pytest
# parametrizes, or the table's parameters are lost.
pytestmark = [pytest.mark.anyio, pytest.mark.any_cluster]

REPO = Path(__file__).resolve().parents[2]
DELETE = object()

ISVC: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "InferenceService",
    "metadata": {"name": "llama"},
    "spec": {"model": {"name": "llama", "source": "/models/llama.gguf"}},
}
POOL: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ModelPool",
    "metadata": {"name": "gpu-0"},
    "spec": {
        "members": [{"inferenceServiceRef": {"name": "a"}}, {"inferenceServiceRef": {"name": "b"}}],
        "default": "a",
    },
}
ROUTER: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ModelRouter",
    "metadata": {"name": "chat"},
    "spec": {
        "backends": [{"name": "gpu-0", "poolRef": {"name": "gpu-0"}}],
        "defaultBackend": "gpu-0",
    },
}
BASES = {"InferenceService": ISVC, "ModelPool": POOL, "ModelRouter": ROUTER}
RESOURCES = {k.KIND: k.resource() for k in (InferenceService, ModelPool, ModelRouter)}


def changed(base: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A copy of ``base`` with ``spec__swapBudget="-5s"``-style edits (``DELETE`` removes)."""
    obj = copy.deepcopy(base)
    for path, value in paths.items():
        *parents, last = path.split("__")
        node = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return obj


def member(name: str) -> dict[str, Any]:
    return {"inferenceServiceRef": {"name": name}}


#: (what is wrong, the object, the field the API server's message must name)
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("pool without members", changed(POOL, spec__members=DELETE, spec__default=DELETE),
     "spec.members"),
    ("pool with empty members", changed(POOL, spec__members=[], spec__default=DELETE),
     "spec.members"),
    ("pool with a duplicate member", changed(POOL, spec__members=[member("a"), member("a")]),
     "spec.members"),
    ("pool default not a member", changed(POOL, spec__default="c"), "spec.default"),
    ("negative swapBudget", changed(POOL, spec__swapBudget="-5s"), "spec.swapBudget"),
    ("malformed swapBudget", changed(POOL, spec__swapBudget="5 minutes"), "spec.swapBudget"),
    ("zero swapBudget", changed(POOL, spec__swapBudget="0s"), "spec.swapBudget"),
    ("unknown swapPolicy", changed(POOL, spec__swapPolicy="round-robin"), "spec.swapPolicy"),
    ("maxWait not below swapBudget",
     changed(POOL, spec__swapBudget="30s", spec__scheduling={"maxWait": "30s"}),
     "spec.scheduling.maxWait"),
    ("minResidency above maxWait",
     changed(POOL, spec__scheduling={"maxWait": "10s", "minResidency": "20s"}),
     "spec.scheduling.minResidency"),
    ("malformed maxWait", changed(POOL, spec__scheduling={"maxWait": "soon"}),
     "spec.scheduling.maxWait"),
    ("zero maxWait", changed(POOL, spec__scheduling={"maxWait": "0s"}), "spec.scheduling.maxWait"),
    ("negative minResidency", changed(POOL, spec__scheduling={"minResidency": "-1s"}),
     "spec.scheduling.minResidency"),
    ("idleAction Default without a default",
     changed(POOL, spec__default=DELETE, spec__scheduling={"idleAfter": "5m",
                                                          "idleAction": "Default"}),
     "spec.scheduling.idleAction"),
    ("idleAction not an action", changed(POOL, spec__scheduling={"idleAction": "Sleep"}),
     "spec.scheduling.idleAction"),
    ("zero idleAfter", changed(POOL, spec__scheduling={"idleAfter": "0s"}),
     "spec.scheduling.idleAfter"),
    ("member priority above 1000",
     changed(POOL, spec__members=[{**member("a"), "priority": 1001}, member("b")]),
     "spec.members[0].priority"),
    ("member priority negative",
     changed(POOL, spec__members=[{**member("a"), "priority": -1}, member("b")]),
     "spec.members[0].priority"),
    ("capacity with both a count and memory",
     changed(POOL, spec__capacity={"members": 2, "gpuMemory": "24Gi"}), "spec.capacity"),
    ("capacity of no members", changed(POOL, spec__capacity={"members": 0}),
     "spec.capacity.members"),
    ("capacity that is not a quantity", changed(POOL, spec__capacity={"gpuMemory": "24 GB"}),
     "spec.capacity.gpuMemory"),
    ("member footprint not a quantity",
     changed(POOL, spec__members=[{**member("a"), "gpuMemory": "lots"}, member("b")]),
     "spec.members[0].gpuMemory"),
    ("memory capacity with a footprint missing",
     changed(POOL, spec__capacity={"gpuMemory": "24Gi"},
             spec__members=[{**member("a"), "gpuMemory": "8Gi"}, member("b")]),
     "spec.members"),
    ("member footprint above the capacity",
     changed(POOL, spec__capacity={"gpuMemory": "24Gi"},
             spec__members=[{**member("a"), "gpuMemory": "8Gi"},
                            {**member("b"), "gpuMemory": "25Gi"}]),
     "spec.members"),
    ("slot server together with a capacity",
     changed(POOL, spec__capacity={"members": 2}, spec__slotServer={}), "spec.slotServer"),
    ("slot server port 0", changed(POOL, spec__slotServer={"port": 0}), "spec.slotServer.port"),
    ("member reference not a DNS label",
     changed(POOL, spec__members=[member("Llama_3")], spec__default=DELETE),
     "spec.members[0].inferenceServiceRef.name"),
    ("pool name with a dot", changed(POOL, metadata__name="gpu.0"), "metadata.name"),
    ("replicas 2", changed(ISVC, spec__replicas=2), "spec.replicas"),
    ("replicas -1", changed(ISVC, spec__replicas=-1), "spec.replicas"),
    ("no model", changed(ISVC, spec__model=DELETE), "spec.model"),
    ("model without source", changed(ISVC, spec__model={"name": "llama"}), "spec.model.source"),
    ("unknown runtime", changed(ISVC, spec__runtime="vllm"), "spec.runtime"),
    ("port 0", changed(ISVC, spec__port=0), "spec.port"),
    ("bad quantity", changed(ISVC, spec__resources={"limits": {"memory": "16GB"}}),
     "spec.resources.limits.memory"),
    ("upper-case name", changed(ISVC, metadata__name="Llama"), "metadata.name"),
    ("kvCache timeout 0", changed(ISVC, spec__kvCache={"enabled": True, "timeoutSeconds": 0}),
     "spec.kvCache.timeoutSeconds"),
    ("kvCache timeout 301", changed(ISVC, spec__kvCache={"timeoutSeconds": 301}),
     "spec.kvCache.timeoutSeconds"),
    ("kvCache enabled not a boolean", changed(ISVC, spec__kvCache={"enabled": "yes"}),
     "spec.kvCache.enabled"),
    ("kvCache relative hostPath", changed(ISVC, spec__kvCache={"hostPath": "var/kv"}),
     "spec.kvCache.hostPath"),
    ("kvCache hostPath with ..", changed(ISVC, spec__kvCache={"hostPath": "/var/../etc"}),
     "spec.kvCache.hostPath"),
    ("kvCache hostPath with .", changed(ISVC, spec__kvCache={"hostPath": "/var/./kv"}),
     "spec.kvCache.hostPath"),
    ("kvCache hostPath with //", changed(ISVC, spec__kvCache={"hostPath": "/var//kv"}),
     "spec.kvCache.hostPath"),
    ("backend with both references",
     changed(ROUTER, spec__backends=[{"name": "x", "poolRef": {"name": "p"},
                                      "inferenceServiceRef": {"name": "i"}}],
             spec__defaultBackend="x"),
     "spec.backends[0]"),
    ("backend with neither reference",
     changed(ROUTER, spec__backends=[{"name": "x"}], spec__defaultBackend="x"), "spec.backends[0]"),
    ("duplicate backend names",
     changed(ROUTER, spec__backends=[{"name": "x", "poolRef": {"name": "p"}},
                                     {"name": "x", "poolRef": {"name": "q"}}],
             spec__defaultBackend="x"),
     "spec.backends[1]"),
    ("backend reference not a DNS label",
     changed(ROUTER, spec__backends__0__poolRef={"name": "GPU 0"}),
     "spec.backends[0].poolRef.name"),
    ("no backends", changed(ROUTER, spec__backends=DELETE, spec__defaultBackend=DELETE),
     "spec.backends"),
    ("defaultBackend not a backend", changed(ROUTER, spec__defaultBackend="other"),
     "spec.defaultBackend"),
    ("proxy replicas 0", changed(ROUTER, spec__proxy={"replicas": 0}), "spec.proxy.replicas"),
    ("proxy replicas 11", changed(ROUTER, spec__proxy={"replicas": 11}), "spec.proxy.replicas"),
    ("router name too long for its owned objects", changed(ROUTER, metadata__name="r" * 53),
     "metadata.name"),
]  # fmt: skip


async def run_kubectl(cluster: TestCluster, *args: str, stdin: str = "") -> tuple[int, str]:
    code, out, err = await kubectl(cluster, *args, check=False, stdin=stdin)
    return code, out + err


@pytest.fixture
async def crds(cluster: TestCluster) -> None:
    """The committed CRDs, installed the documented way and established."""
    code, out = await run_kubectl(cluster, "apply", "-k", "manifests/crd")
    assert code == 0, out
    names = [f"crd/{r.plural}.{r.group}" for r in RESOURCES.values()]
    code, out = await run_kubectl(
        cluster, "wait", "--for=condition=Established", "--timeout=60s", *names
    )
    assert code == 0, out


def _ids(cases: list[tuple[str, dict[str, Any], str]]) -> Iterator[str]:
    for what, _, _ in cases:
        yield what.replace(" ", "-")


@pytest.mark.usefixtures("crds")
@pytest.mark.parametrize("kind_name", sorted(BASES))
async def test_each_base_object_is_valid(admin: KubeClient, namespace: str, kind_name: str) -> None:
    created = await admin.create(RESOURCES[kind_name], copy.deepcopy(BASES[kind_name]), namespace)
    assert created["metadata"]["uid"]


@pytest.mark.usefixtures("crds")
@pytest.mark.parametrize(("what", "obj", "field"), INVALID, ids=list(_ids(INVALID)))
async def test_invalid_object_is_refused_naming_the_field(
    admin: KubeClient, namespace: str, what: str, obj: dict[str, Any], field: str
) -> None:
    resource: Resource = RESOURCES[obj["kind"]]
    with pytest.raises(Invalid) as refused:
        await admin.create(resource, copy.deepcopy(obj), namespace)
    assert refused.value.status_code == 422
    assert f"{field}:" in refused.value.message, f"{what}: {refused.value.message}"


def test_the_table_is_big_enough_and_covers_every_kind() -> None:
    assert len(INVALID) >= 12
    assert {obj["kind"] for _, obj, _ in INVALID} == set(BASES)


@pytest.mark.usefixtures("crds")
async def test_the_kv_cache_defaults_are_filled_in_and_a_dotted_folder_name_is_allowed(
    admin: KubeClient, namespace: str
) -> None:
    created = await admin.create(
        RESOURCES["InferenceService"], changed(ISVC, spec__kvCache={"enabled": True}), namespace
    )
    assert created["spec"]["kvCache"] == {
        "enabled": True, "hostPath": "/var/lib/modelpool/kv-cache", "timeoutSeconds": 10,
    }  # fmt: skip
    dotted = changed(ISVC, metadata__name="other", spec__kvCache={"hostPath": "/srv/.kv/x..y/"})
    kept = await admin.create(RESOURCES["InferenceService"], dotted, namespace)
    assert kept["spec"]["kvCache"]["hostPath"] == "/srv/.kv/x..y/"


@pytest.mark.usefixtures("crds")
async def test_kubectl_apply_shows_the_field_to_the_user(
    cluster: TestCluster, namespace: str
) -> None:
    bad = changed(POOL, spec__default="c")
    code, out = await run_kubectl(
        cluster, "apply", "-n", namespace, "-f", "-", stdin=json.dumps(bad)
    )
    assert code != 0
    assert 'The ModelPool "gpu-0" is invalid' in out
    assert "spec.default: Invalid value" in out
    assert "must name one of spec.members" in out


@pytest.mark.usefixtures("crds")
@pytest.mark.local_only  # it reads an unwritten status: in a cluster the operator writes it
async def test_status_is_validated_and_written_only_through_its_subresource(
    admin: KubeClient, namespace: str
) -> None:
    pools = RESOURCES["ModelPool"]
    await admin.create(pools, copy.deepcopy(POOL), namespace)
    with pytest.raises(Invalid) as refused:
        await admin.patch(pools, "gpu-0", {"status": {"phase": "Exploded"}}, namespace,
                          subresource="status")  # fmt: skip
    assert "status.phase:" in refused.value.message

    # Status in a spec write is ignored, and spec in a status write is ignored.
    await admin.patch(pools, "gpu-0", {"status": {"phase": "Ready"}}, namespace)
    assert "status" not in await admin.get(pools, "gpu-0", namespace)
    written = await admin.patch(
        pools, "gpu-0", {"spec": {"default": "b"}, "status": {"phase": "Ready"}}, namespace,
        subresource="status",
    )  # fmt: skip
    assert written["status"]["phase"] == "Ready"
    assert written["spec"]["default"] == "a"

    condition = {"type": "SwapDeferred", "status": "True", "reason": "Pods Busy",
                 "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    with pytest.raises(Invalid) as refused:
        await admin.patch(pools, "gpu-0", {"status": {"conditions": [condition]}}, namespace,
                          subresource="status")  # fmt: skip
    assert "status.conditions[0].reason:" in refused.value.message


@pytest.mark.usefixtures("crds")
async def test_a_pool_with_a_budget_is_accepted_and_may_grant_several(
    admin: KubeClient, namespace: str
) -> None:
    """The two forms of ``spec.capacity`` the schema accepts, and a status with two grants beside
    a ``status.budget`` (docs/modelpool.md, "Several residents")."""
    pools = RESOURCES["ModelPool"]
    memory = changed(POOL, spec__capacity={"gpuMemory": "24Gi"},
                     spec__members=[{**member("a"), "gpuMemory": "16Gi"},
                                    {**member("b"), "gpuMemory": "8Gi"}])  # fmt: skip
    created = await admin.create(pools, memory, namespace)
    assert created["spec"]["members"][1]["gpuMemory"] == "8Gi"
    count = changed(POOL, metadata__name="gpu-1", spec__capacity={"members": 2})
    counted = await admin.create(pools, count, namespace)
    both = {**counted, "status": {"members": [{"name": "a", "slot": "Granted"},
                                              {"name": "b", "slot": "Granted"}],
                                  "budget": {"capacity": "2", "used": "2"},
                                  "residents": ["a", "b"]}}  # fmt: skip
    written = await admin.update_status(pools, both)
    assert written["status"]["residents"] == ["a", "b"]


@pytest.mark.usefixtures("crds")
async def test_a_pool_status_with_two_grants_is_refused(admin: KubeClient, namespace: str) -> None:
    """The schema holds "one member granted" (docs/modelpool.md, "The grant") for every writer
    of a pool's status, not only the pool controller."""
    pools = RESOURCES["ModelPool"]
    created = await admin.create(pools, copy.deepcopy(BASES["ModelPool"]), namespace)
    both = {**created, "status": {"members": [{"name": "a", "slot": "Granted"},
                                              {"name": "b", "slot": "Granted"}]}}  # fmt: skip
    with pytest.raises(Invalid) as refused:
        await admin.update_status(pools, both)
    assert "at most one member may hold the slot's grant" in refused.value.message
    assert "status.members" in refused.value.message
    one = {**created, "status": {"members": [{"name": "a", "slot": "Granted"},
                                             {"name": "b", "slot": "Released"}]}}  # fmt: skip
    written = await admin.update_status(pools, one)
    assert written["status"]["members"] == one["status"]["members"]
    bogus = {**written, "status": {"members": [{"name": "a", "slot": "Maybe"}]}}
    with pytest.raises(Invalid) as unknown:
        await admin.update_status(pools, bogus)
    assert "status.members[0].slot" in unknown.value.message
