"""The committed CRDs are what the Python types generate, and say what the contract says."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.api.crdgen import crd_name, rendered_files
from controlplane.api.fields import declared_fields
from controlplane.api.struct import ApiObject, strip_annotated, strip_optional
from controlplane.api.v1alpha1 import (
    CATEGORY,
    KINDS,
    CustomObject,
    InferenceService,
    ModelPool,
    ModelRouter,
)
from controlplane.api.v1alpha1.meta import (
    DNS_LABEL_PATTERN,
    DURATION_PATTERN,
    QUANTITY_PATTERN,
)

CRD_DIR = Path(__file__).resolve().parents[2] / "manifests" / "crd"


def committed(kind: type[CustomObject]) -> dict[str, Any]:
    path = CRD_DIR / f"inference.modelpool.dev_{kind.PLURAL}.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def version(kind: type[CustomObject]) -> dict[str, Any]:
    (served,) = committed(kind)["spec"]["versions"]
    result: dict[str, Any] = served
    return result


def schema(kind: type[CustomObject]) -> dict[str, Any]:
    result: dict[str, Any] = version(kind)["schema"]["openAPIV3Schema"]
    return result


def test_committed_crds_are_what_the_types_generate() -> None:
    for name, content in rendered_files().items():
        path = CRD_DIR / name
        assert path.is_file(), f"{path} is missing: run `make manifests`"
        assert path.read_text() == content, f"{path} is out of date: run `make manifests`"


def _struct_type(tp: Any) -> type[ApiObject] | None:
    """The struct a field holds, directly or as list items (None for scalars and maps)."""
    tp = strip_annotated(strip_optional(tp))
    if typing.get_origin(tp) is list:
        tp = strip_annotated(strip_optional(typing.get_args(tp)[0]))
    return tp if isinstance(tp, type) and issubclass(tp, ApiObject) else None


def _assert_agree(cls: type[ApiObject], node: dict[str, Any], path: str) -> int:
    """Walk a type and a committed schema together; returns the number of fields compared."""
    if node.get("type") == "array":
        node = node["items"]
    fields = {f.json_name: f for f in declared_fields(cls)}
    assert set(node["properties"]) == set(fields), f"{path}: schema and {cls.__name__} disagree"
    required = {name for name, f in fields.items() if f.spec.required}
    assert set(node.get("required", [])) == required, f"{path}: required fields disagree"
    compared = len(fields)
    for name, field in fields.items():
        inner = _struct_type(field.type)
        if inner is not None:
            compared += _assert_agree(inner, node["properties"][name], f"{path}.{name}")
    return compared


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
def test_types_and_committed_schemas_have_the_same_fields(kind: type[CustomObject]) -> None:
    root = schema(kind)
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert root["required"] == ["spec"]
    for part in ("spec", "status"):
        part_type = _struct_type(typing.get_type_hints(kind)[part])
        assert part_type is not None
        assert _assert_agree(part_type, root["properties"][part], part) > 3


def _nodes(node: dict[str, Any], path: str = "") -> typing.Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
def test_schemas_are_structural_and_defaults_obey_their_own_rules(
    kind: type[CustomObject],
) -> None:
    for path, node in _nodes(schema(kind)):
        typed = "type" in node or node.get("x-kubernetes-int-or-string")
        assert typed, f"{kind.KIND}{path} has no type: the API server refuses non-structural CRDs"
        if "default" not in node or node["default"] == {}:
            continue
        default = node["default"]
        if "enum" in node:
            assert default in node["enum"], f"{kind.KIND}{path}: default not in enum"
        if "pattern" in node:
            assert re.search(node["pattern"], default), f"{kind.KIND}{path}: default mismatch"
        if "minimum" in node:
            assert node["minimum"] <= default <= node.get("maximum", default)


def test_every_kind_has_status_short_names_and_the_category() -> None:
    short = {kind.KIND: committed(kind)["spec"]["names"]["shortNames"] for kind in KINDS}
    assert short == {"InferenceService": ["isvc"], "ModelPool": ["mpool"], "ModelRouter": ["mr"]}
    for kind in KINDS:
        crd = committed(kind)
        assert crd["metadata"]["name"] == crd_name(kind)
        assert crd["spec"]["scope"] == "Namespaced"
        assert crd["spec"]["names"]["categories"] == [CATEGORY], "and not `all`"
        assert version(kind)["subresources"] == {"status": {}}
        assert version(kind)["name"] == "v1alpha1"


def test_pool_printer_columns_tell_the_story() -> None:
    columns = version(ModelPool)["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == [
        "Policy",
        "Resident",
        "Pending",
        "Waiting",
        "Phase",
        "Age",
    ]
    assert [c["name"] for c in columns if c.get("priority")] == [
        "Used",
        "Capacity",
        "Idle",
        "Max-Wait",
        "Min-Residency",
    ]
    paths = {c["name"]: c["jsonPath"] for c in columns}
    assert paths["Resident"] == ".status.residents"
    assert (paths["Used"], paths["Capacity"]) == (".status.budget.used", ".status.budget.capacity")
    assert paths["Waiting"] == ".status.waiting[*].member"
    idle = next(c for c in columns if c["name"] == "Idle")
    assert (idle["jsonPath"], idle["type"]) == (".status.idleSince", "date")


def _rules(node: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = node.get("x-kubernetes-validations", [])
    return found


def test_cel_rules_cover_what_a_schema_cannot_say_and_name_their_field() -> None:
    pool_spec = schema(ModelPool)["properties"]["spec"]
    (
        default_rule,
        bound_below_budget,
        idle_back_to_default,
        one_model_server,
        footprints_declared,
    ) = _rules(pool_spec)
    assert idle_back_to_default["fieldPath"] == ".scheduling.idleAction"
    assert "spec.default" in idle_back_to_default["message"]
    assert one_model_server["fieldPath"] == ".slotServer"
    assert one_model_server["reason"] == "FieldValueForbidden"
    assert "spec.capacity" in one_model_server["message"]
    assert footprints_declared["fieldPath"] == ".members"
    assert "spec.members[].gpuMemory" in footprints_declared["message"]
    (one_kind_of_capacity,) = _rules(pool_spec["properties"]["capacity"])
    assert "exactly one" in one_kind_of_capacity["message"]
    (grants,) = _rules(schema(ModelPool)["properties"]["status"])
    assert grants["fieldPath"] == ".members"
    assert "has(self.budget)" in grants["rule"]
    assert default_rule["fieldPath"] == ".default"
    assert "spec.default" in default_rule["message"]
    assert bound_below_budget["fieldPath"] == ".scheduling.maxWait"
    assert "spec.swapBudget" in bound_below_budget["message"]
    scheduling = pool_spec["properties"]["scheduling"]
    (floor_below_bound,) = _rules(scheduling)
    assert floor_below_bound["fieldPath"] == ".minResidency"
    (unique,) = _rules(pool_spec["properties"]["members"])
    assert "exists_one" in unique["rule"]
    assert "spec.members" in unique["message"]
    (positive,) = _rules(pool_spec["properties"]["swapBudget"])
    assert positive["rule"] == "duration(self) > duration('0s')"
    assert "spec.swapBudget" in positive["message"]

    router_spec = schema(ModelRouter)["properties"]["spec"]
    (exactly_one,) = _rules(router_spec["properties"]["backends"]["items"])
    assert exactly_one["rule"] == "has(self.inferenceServiceRef) != has(self.poolRef)"
    (default_backend,) = _rules(router_spec)
    assert default_backend["fieldPath"] == ".defaultBackend"
    assert router_spec["properties"]["backends"]["x-kubernetes-list-map-keys"] == ["name"]


def test_bounds_the_contract_names() -> None:
    isvc = schema(InferenceService)["properties"]["spec"]["properties"]
    assert (isvc["replicas"]["minimum"], isvc["replicas"]["maximum"]) == (0, 1)
    assert "default" not in isvc["replicas"], "absent replicas means 1, decided by the operator"
    assert isvc["runtime"]["enum"] == ["llamacpp"]
    proxy = schema(ModelRouter)["properties"]["spec"]["properties"]["proxy"]["properties"]
    assert (proxy["replicas"]["minimum"], proxy["replicas"]["maximum"]) == (1, 10)
    pool = schema(ModelPool)["properties"]["spec"]["properties"]
    assert pool["swapPolicy"]["enum"] == ["sticky"]
    assert pool["swapBudget"]["default"] == "300s"
    assert pool["members"]["minItems"] == 1
    assert pool["scheduling"]["default"] == {}, "absent scheduling still gets its defaults"
    scheduling = pool["scheduling"]["properties"]
    assert "default" not in scheduling["maxWait"], "an unset bound follows the budget"
    assert scheduling["minResidency"]["default"] == "10s"
    priority = pool["members"]["items"]["properties"]["priority"]
    assert (priority["minimum"], priority["maximum"], priority["default"]) == (0, 1000, 0)


@pytest.mark.parametrize("good", ["300s", "5m", "1h30m", "1.5s", "250ms", "2h"])
def test_duration_pattern_accepts(good: str) -> None:
    assert re.search(DURATION_PATTERN, good)


@pytest.mark.parametrize("bad", ["-5s", "5 minutes", "", "300", "s", "1d", "5m-", "+5s"])
def test_duration_pattern_refuses(bad: str) -> None:
    assert not re.search(DURATION_PATTERN, bad)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("llama-3", True),
        ("a", True),
        ("3llama", False),
        ("Llama", False),
        ("a_b", False),
        ("a.b", False),
        ("a-", False),
        ("", False),
    ],
)
def test_dns_label_pattern(name: str, ok: bool) -> None:
    assert bool(re.search(DNS_LABEL_PATTERN, name)) is ok


@pytest.mark.parametrize(
    ("quantity", "ok"),
    [
        ("100m", True),
        ("1Gi", True),
        ("16Gi", True),
        ("0.5", True),
        ("1e3", True),
        ("2", True),
        ("1x", False),
        ("Gi", False),
        ("1 Gi", False),
        ("1GiB", False),
    ],
)
def test_quantity_pattern(quantity: str, ok: bool) -> None:
    assert bool(re.search(QUANTITY_PATTERN, quantity)) is ok
