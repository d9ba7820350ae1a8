"""The Python types read and write the API's dicts without losing anything they do not know."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.api.openapi import struct_schema
from controlplane.api.v1alpha1 import (
    API_VERSION,
    KINDS,
    Condition,
    CustomObject,
    InferenceService,
    LocalObjectReference,
    ModelPool,
    ModelPoolSpec,
    ModelRouter,
    ObjectMeta,
    PoolMember,
    find_condition,
    set_condition,
)

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
#: Keys no type declares: stand-ins for fields a newer version (or another tool) wrote.
UNKNOWN_KEYS = st.text(min_size=1, max_size=6).map(lambda s: f"unknown-{s}")


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values shaped like ``schema``, with unknown keys added to every struct."""
    if schema.get("x-kubernetes-int-or-string"):
        return st.one_of(st.integers(), st.text(max_size=8))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema["type"]
    if kind == "string":
        return st.text(max_size=12)
    if kind == "integer":
        return st.integers(min_value=-(2**40), max_value=2**40)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(from_schema(schema["items"]), max_size=3)
    if "properties" in schema:
        known = st.fixed_dictionaries(
            {}, optional={name: from_schema(sub) for name, sub in schema["properties"].items()}
        )
        unknown = st.dictionaries(UNKNOWN_KEYS, JSON_SCALARS, max_size=2)
        return st.tuples(known, unknown).map(lambda pair: {**pair[1], **pair[0]})
    if "additionalProperties" in schema:
        return st.dictionaries(st.text(max_size=6), from_schema(schema["additionalProperties"]))
    return st.dictionaries(st.text(max_size=6), JSON_SCALARS, max_size=3)


def objects_of(kind: type[CustomObject]) -> st.SearchStrategy[dict[str, Any]]:
    return from_schema(struct_schema(kind)).map(
        lambda body: {**body, "apiVersion": API_VERSION, "kind": kind.KIND}
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_object_round_trips_unchanged(kind: type[CustomObject], data: st.DataObject) -> None:
    sent = data.draw(objects_of(kind))
    untouched = copy.deepcopy(sent)
    assert kind.from_dict(sent).to_dict() == sent
    assert sent == untouched, "reading must not mutate the caller's dict"


POOL: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "ModelPool",
    "metadata": {
        "name": "gpu-0",
        "namespace": "team-a",
        "resourceVersion": "42",
        "managedFields": [{"manager": "kubectl"}],
    },
    "spec": {
        "members": [
            {"inferenceServiceRef": {"name": "a", "futureRefField": 1}, "weight": 3},
            {"inferenceServiceRef": {"name": "b"}},
        ],
        "default": "a",
        "swapBudget": "300s",
        "swapPolicy": "sticky",
        "preemption": {"enabled": True},
    },
    "status": {"phase": "Ready", "residentMember": "a", "lastSwapAt": "yesterday"},
}


def test_a_read_modify_write_keeps_unknown_fields_at_every_level() -> None:
    pool = ModelPool.from_dict(POOL)
    pool.spec.swap_budget = "90s"
    pool.spec.members.append(PoolMember(inference_service_ref=LocalObjectReference(name="c")))
    pool.status.pending_member = "b"
    written = pool.to_dict()

    assert written["spec"]["swapBudget"] == "90s"
    assert written["spec"]["members"][2] == {"inferenceServiceRef": {"name": "c"}}
    assert written["status"]["pendingMember"] == "b"
    # Everything the types do not declare is still there.
    assert written["spec"]["preemption"] == {"enabled": True}
    assert written["spec"]["members"][0]["weight"] == 3
    assert written["spec"]["members"][0]["inferenceServiceRef"]["futureRefField"] == 1
    assert written["status"]["lastSwapAt"] == "yesterday"
    assert written["metadata"]["managedFields"] == [{"manager": "kubectl"}]
    assert written["metadata"]["resourceVersion"] == "42"
    assert POOL["spec"]["swapBudget"] == "300s", "the source dict is never written to"


def test_typed_access_reads_the_declared_fields() -> None:
    pool = ModelPool.from_dict(POOL)
    assert pool.name == "gpu-0"
    assert pool.namespace == "team-a"
    assert pool.spec.member_names() == ["a", "b"]
    assert pool.spec.default == "a"
    assert pool.status.resident_member == "a"
    assert pool.metadata.resource_version == "42"


def test_fields_the_user_never_wrote_are_not_written_back() -> None:
    sparse = {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "metadata": {"name": "a"},
        "spec": {"model": {"name": "m", "source": "/m.gguf"}},
    }
    isvc = InferenceService.from_dict(sparse)
    assert isvc.to_dict() == sparse  # no empty status, args, nodeSelector or null replicas
    assert isvc.spec.desired_replicas() == 1, "absent replicas means 1"
    isvc.spec.replicas = 0
    assert isvc.to_dict()["spec"]["replicas"] == 0
    assert isvc.spec.desired_replicas() == 0


def test_setting_a_field_to_none_removes_it() -> None:
    isvc = InferenceService.from_dict(
        {"metadata": {"name": "a"}, "spec": {"model": {"name": "m", "source": "s"}, "replicas": 0}}
    )
    isvc.spec.replicas = None
    assert "replicas" not in isvc.to_dict()["spec"]


def test_an_object_built_in_code_is_ready_to_send() -> None:
    pool = ModelPool(
        metadata=ObjectMeta(name="gpu-0", namespace="ns"),
        spec=ModelPoolSpec(
            members=[PoolMember(inference_service_ref=LocalObjectReference(name="a"))],
            default="a",
        ),
    )
    assert pool.to_dict() == {
        "apiVersion": API_VERSION,
        "kind": "ModelPool",
        "metadata": {"name": "gpu-0", "namespace": "ns"},
        "spec": {"members": [{"inferenceServiceRef": {"name": "a"}}], "default": "a"},
    }


def test_the_kind_knows_where_it_is_served() -> None:
    assert ModelPool.resource().path("ns", "p") == (
        "/apis/inference.modelpool.dev/v1alpha1/namespaces/ns/modelpools/p"
    )
    assert ModelRouter.resource().kind == "ModelRouter"


def test_a_mistyped_field_is_reported_with_its_path() -> None:
    with pytest.raises(TypeError, match=r"ModelPool\.spec\.members: expected a list"):
        ModelPool.from_dict({"spec": {"members": {"inferenceServiceRef": {"name": "a"}}}})


def test_set_condition_moves_the_transition_time_only_when_the_status_flips() -> None:
    conditions: list[Condition] = []
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    t1 = datetime(2026, 1, 2, tzinfo=UTC)
    assert set_condition(conditions, "Available", "False", "Provisioning", "starting", 1, t0)
    assert not set_condition(conditions, "Available", "False", "Provisioning", "starting", 1, t1)
    assert set_condition(conditions, "Available", "False", "ActivationRBAC", "no leases", 1, t1)
    found = find_condition(conditions, "Available")
    assert found is not None
    assert found.last_transition_time == "2026-01-01T00:00:00Z", "same status: time kept"
    assert set_condition(conditions, "Available", "True", "Ready", "ok", 2, t1)
    assert found.last_transition_time == "2026-01-02T00:00:00Z"
    assert len(conditions) == 1
