"""The informer's store: keys, indexes kept in step with updates, and copies for readers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.runtime.cache import (
    LABEL_INDEX,
    NAMESPACE_INDEX,
    OWNER_UID_INDEX,
    Store,
    StoreChange,
    object_key,
)


def _obj(name: str, rv: str = "1", ns: str | None = "ns", **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": rv, **meta}
    if ns is not None:
        metadata["namespace"] = ns
    return {"metadata": metadata, "spec": {"x": [1, 2]}}


def test_keys_follow_client_go() -> None:
    assert object_key(_obj("a")) == "ns/a"
    assert object_key(_obj("node-1", ns=None)) == "node-1"


def test_readers_get_copies_that_cannot_change_the_cache() -> None:
    store = Store()
    store.upsert(_obj("a"))
    first = store.get("ns/a")
    assert first is not None
    first["spec"]["x"].append(3)
    first["metadata"]["name"] = "mutated"
    again = store.get("ns/a")
    assert again == _obj("a")
    assert store.objects() == [_obj("a")]


def test_indexes_follow_updates_and_deletes() -> None:
    store = Store()
    owners = [{"uid": "u1", "kind": "Pool", "name": "p"}]
    store.upsert(_obj("a", labels={"app": "x"}, ownerReferences=owners))
    store.upsert(_obj("b", labels={"app": "x"}))
    assert store.index_keys(LABEL_INDEX, "app=x") == ["ns/a", "ns/b"]
    assert store.index_keys(OWNER_UID_INDEX, "u1") == ["ns/a"]
    assert store.index_keys(NAMESPACE_INDEX, "ns") == ["ns/a", "ns/b"]

    store.upsert(_obj("a", rv="2", labels={"app": "y"}))  # label changed, owner removed
    assert store.index_keys(LABEL_INDEX, "app=x") == ["ns/b"]
    assert store.index_keys(LABEL_INDEX, "app=y") == ["ns/a"]
    assert store.index_keys(OWNER_UID_INDEX, "u1") == []
    assert "u1" not in list(store.index_values(OWNER_UID_INDEX))

    store.delete("ns/b")
    assert store.index_keys(LABEL_INDEX, "app=x") == []
    assert store.by_index(NAMESPACE_INDEX, "ns")[0]["metadata"]["resourceVersion"] == "2"


def test_unknown_index_is_named() -> None:
    with pytest.raises(KeyError, match="no index named 'nope'"):
        Store().index_keys("nope", "v")


def test_replace_reports_exactly_what_changed_as_it_goes() -> None:
    store = Store()
    for name in ("keep", "change", "vanish"):
        store.upsert(_obj(name))
    changes: list[StoreChange] = []
    consumed: list[str] = []

    def listed() -> Iterator[dict[str, Any]]:
        for obj in (_obj("keep"), _obj("change", rv="2"), _obj("new")):
            consumed.append(obj["metadata"]["name"])
            yield obj

    def record(change: StoreChange) -> None:
        # Each change is reported before the next object is even produced.
        changes.append(change)
        assert consumed[-1] == change.obj["metadata"]["name"] or change.kind == "deleted"

    store.replace(listed(), record)
    summary = [(c.kind, c.obj["metadata"]["name"], c.old and c.old["metadata"]["resourceVersion"])
               for c in changes]  # fmt: skip
    assert summary == [
        ("updated", "change", "1"),
        ("added", "new", None),
        ("deleted", "vanish", None),
    ]
    assert sorted(store.keys()) == ["ns/change", "ns/keep", "ns/new"]


def test_custom_indexers_replace_the_defaults() -> None:
    store = Store({"by-x": lambda o: [str(v) for v in o["spec"]["x"]]})
    store.upsert(_obj("a"))
    assert store.index_keys("by-x", "2") == ["ns/a"]
    with pytest.raises(KeyError):
        store.index_keys(LABEL_INDEX, "app=x")
