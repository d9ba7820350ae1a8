"""Which pool a member belongs to (api/v1alpha1/membership.py): the pool whose claim stands, the
rule the pool controller refuses the others by and the router-proxy routes a member through."""

from __future__ import annotations

from typing import Any

from controlplane.api.v1alpha1.membership import claiming_pool

Object = dict[str, Any]


def pool(name: str, created: str, *members: str, decided: str | None = None) -> Object:
    status = {"members": [{"name": decided, "slot": "Released"}]} if decided else {}
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"members": [{"inferenceServiceRef": {"name": m}} for m in members]},
        "status": status,
    }


def test_no_pool_lists_it() -> None:
    assert claiming_pool([pool("gpu-0", "2024-01-01T00:00:00Z", "b")], "a") is None
    assert claiming_pool([], "a") is None


def test_the_pool_that_decided_about_it_holds_it_over_an_older_one() -> None:
    older = pool("aa-old", "2024-01-01T00:00:00Z", "a")
    newer = pool("zz-new", "2024-06-01T00:00:00Z", "a", decided="a")
    assert claiming_pool([older, newer], "a") == "zz-new"
    assert claiming_pool([newer, older], "a") == "zz-new"


def test_then_the_pool_created_first_then_by_name() -> None:
    older = pool("zz-old", "2024-01-01T00:00:00Z", "a")
    newer = pool("aa-new", "2024-06-01T00:00:00Z", "a")
    assert claiming_pool([newer, older], "a") == "zz-old"
    twin = pool("mm-twin", "2024-01-01T00:00:00Z", "a")
    assert claiming_pool([older, twin], "a") == "mm-twin"


def test_a_pool_being_deleted_claims_nothing() -> None:
    going = pool("gpu-0", "2024-01-01T00:00:00Z", "a", decided="a")
    going["metadata"]["deletionTimestamp"] = "2024-07-01T00:00:00Z"
    assert claiming_pool([going], "a") is None
    assert claiming_pool([going, pool("gpu-1", "2024-06-01T00:00:00Z", "a")], "a") == "gpu-1"
