"""The client's verbs against a real API server: each promise in its docstring, exercised."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.runtime.client import JSON_PATCH, STRATEGIC_MERGE_PATCH, KubeClient
from controlplane.runtime.errors import AlreadyExists, Conflict, Invalid, NotFound
from controlplane.runtime.resources import CONFIGMAPS, DEPLOYMENTS, LEASES

pytestmark = pytest.mark.any_cluster


def _deployment(name: str) -> dict[str, object]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


async def test_list_pages_through_continue_tokens(admin: KubeClient, namespace: str) -> None:
    # Labelled, beside one that is not: every page must keep the selector (a cluster adds
    # ConfigMaps of its own to a namespace too, kube-root-ca.crt).
    mine = "e2e.modelpool.dev/pages=yes"
    await admin.create(CONFIGMAPS, {"metadata": {"name": "d-unlabelled"}}, namespace)
    for i in range(7):
        body = {"metadata": {"name": f"c{i}", "labels": {"e2e.modelpool.dev/pages": "yes"}}}
        await admin.create(CONFIGMAPS, body, namespace)
    pages = [
        page
        async for page in admin.list_pages(CONFIGMAPS, namespace, page_size=3, label_selector=mine)
    ]
    assert [len(page.items) for page in pages] == [3, 3, 1]
    assert all(page.continue_token for page in pages[:-1])
    assert not pages[-1].continue_token
    listed = await admin.list(CONFIGMAPS, namespace, page_size=3, label_selector=mine)
    assert sorted(o["metadata"]["name"] for o in listed.items) == [f"c{i}" for i in range(7)]
    assert listed.resource_version
    # A listed object is what a watch event would carry: the API server leaves kind and
    # apiVersion out of a list's items, and a child compared with what a controller wants would
    # otherwise differ (and be applied again on every reconcile) until its next change.
    assert {(o["kind"], o["apiVersion"]) for o in listed.items} == {("ConfigMap", "v1")}
    deployments = await admin.list(DEPLOYMENTS, namespace)
    assert all(o["kind"] == "Deployment" for o in deployments.items)


async def test_create_twice_is_already_exists_and_a_conflict(
    admin: KubeClient, namespace: str
) -> None:
    await admin.create(CONFIGMAPS, {"metadata": {"name": "once"}}, namespace)
    with pytest.raises(AlreadyExists) as raised:
        await admin.create(CONFIGMAPS, {"metadata": {"name": "once"}}, namespace)
    assert isinstance(raised.value, Conflict)


async def test_patches_merge_json_and_strategic(admin: KubeClient, namespace: str) -> None:
    await admin.create(CONFIGMAPS, {"metadata": {"name": "p"}, "data": {"a": "1"}}, namespace)
    merged = await admin.patch(CONFIGMAPS, "p", {"data": {"b": "2"}}, namespace)
    assert merged["data"] == {"a": "1", "b": "2"}
    patched = await admin.patch(
        CONFIGMAPS, "p", [{"op": "remove", "path": "/data/a"}], namespace, patch_type=JSON_PATCH
    )
    assert patched["data"] == {"b": "2"}
    await admin.create(DEPLOYMENTS, _deployment("d"), namespace)
    containers = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}}}
    strategic = await admin.patch(
        DEPLOYMENTS, "d", containers, namespace, patch_type=STRATEGIC_MERGE_PATCH
    )
    assert strategic["spec"]["template"]["spec"]["containers"][0]["image"] == "x:2"


async def test_server_side_apply_owns_fields_per_manager(admin: KubeClient, namespace: str) -> None:
    mine = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ssa", "namespace": namespace}, "data": {"mine": "1"}}  # fmt: skip
    await admin.apply(CONFIGMAPS, mine, field_manager="first")
    theirs = {**mine, "data": {"mine": "2"}}
    with pytest.raises(Conflict):  # the field belongs to "first"
        await admin.apply(CONFIGMAPS, theirs, field_manager="second")
    forced = await admin.apply(CONFIGMAPS, theirs, field_manager="second", force=True)
    assert forced["data"] == {"mine": "2"}
    managers = {entry["manager"] for entry in forced["metadata"]["managedFields"]}
    assert "second" in managers


@pytest.mark.local_only  # it writes a Deployment's status, as a cluster's controller does too
async def test_status_subresource_and_preconditioned_delete(
    admin: KubeClient, namespace: str
) -> None:
    deployment = await admin.create(DEPLOYMENTS, _deployment("s"), namespace)
    deployment["status"] = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1}
    written = await admin.update_status(DEPLOYMENTS, deployment)
    assert written["status"]["readyReplicas"] == 1
    with pytest.raises(Conflict):  # the object moved on since this version
        await admin.delete(
            DEPLOYMENTS, "s", namespace, resource_version=deployment["metadata"]["resourceVersion"]
        )
    await admin.delete(
        DEPLOYMENTS, "s", namespace, resource_version=written["metadata"]["resourceVersion"]
    )


async def test_invalid_object_is_invalid_and_missing_is_not_found(
    admin: KubeClient, namespace: str
) -> None:
    with pytest.raises(Invalid) as raised:
        await admin.create(
            LEASES, {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": -1}}, namespace
        )
    assert "leaseDurationSeconds" in raised.value.message
    with pytest.raises(NotFound):
        await admin.get(LEASES, "absent", namespace)


async def test_an_apply_carrying_a_stale_resource_version_is_refused(
    admin: KubeClient, namespace: str
) -> None:
    """The InferenceService controller's raise relies on this (docs/faults.md, "Fencing"): an
    apply that names the resourceVersion it decided on is a precondition, even when forced."""
    meta = {"name": "fenced", "namespace": namespace}
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                            "data": {"replicas": "0"}}  # fmt: skip
    first = await admin.apply(CONFIGMAPS, body, field_manager="a", force=True)
    read = first["metadata"]["resourceVersion"]
    await admin.apply(CONFIGMAPS, {**body, "data": {"replicas": "0", "by": "b"}},
                      field_manager="b", force=True)  # fmt: skip
    stale: dict[str, Any] = {**body, "metadata": {**meta, "resourceVersion": read},
                             "data": {"replicas": "1"}}  # fmt: skip
    with pytest.raises(Conflict):
        await admin.apply(CONFIGMAPS, stale, field_manager="a", force=True)
    current = (await admin.get(CONFIGMAPS, "fenced", namespace))["metadata"]["resourceVersion"]
    stale["metadata"]["resourceVersion"] = current
    applied = await admin.apply(CONFIGMAPS, stale, field_manager="a", force=True)
    assert applied["data"]["replicas"] == "1"
