"""The collection's pure parts: what the cluster names, which nodes, the Job, and when it runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from controlplane.api.v1alpha1.modelsource import parse_source
from controlplane.controllers.inferenceservice.weights import (
    FETCH_CONTAINER,
    WeightsPlacement,
    pinned_affinity,
)
from controlplane.controllers.modelcache.desired import (
    CACHE_MOUNT_DIR,
    CollectionSettings,
    collection_job,
    job_node,
    named_paths,
    ready_nodes,
)
from controlplane.controllers.modelcache.reconciler import KEY, ModelCacheCollector
from controlplane.controllers.modelcache.schedule import (
    RETENTION_MARGIN_SECONDS,
    CollectionSchedule,
)

URL = "https://models.example/m/a.gguf"
A = f"{parse_source(URL).cache_key}/a.gguf"
HF = "hf/org/repo/main/sub/h.gguf"


def isvc(source: str, sha256: str | None = None) -> dict[str, Any]:
    model: dict[str, Any] = {"name": "m", "source": source}
    if sha256:
        model["sha256"] = sha256
    return {"metadata": {"name": "x", "namespace": "n"}, "spec": {"model": model}}


def member_pod(*args: str) -> dict[str, Any]:
    init = {"name": FETCH_CONTAINER, "args": ["fetch-model", *args]}
    return {"metadata": {"name": "p"}, "spec": {"initContainers": [init]}}


def test_named_paths_are_the_fetched_sources_of_specs_and_of_pods() -> None:
    named = named_paths(
        [isvc(URL), isvc("hf://org/repo/sub/h.gguf"), isvc("/models/in-image.gguf"),
         isvc("pvc://claim/m.gguf"), {"metadata": {"name": "no-model"}, "spec": {}}],
        [member_pod("--source", "hf://org/repo/old.gguf@v1", "--dest", "/x"),
         member_pod("--source=http://h/b.gguf", "--sha256", "0" * 64),
         {"metadata": {"name": "no-init"}, "spec": {}}],
    )  # fmt: skip
    http = f"{parse_source('http://h/b.gguf', '0' * 64).cache_key}/b.gguf"
    assert named == {A, HF, "hf/org/repo/v1/old.gguf", http}


def test_only_ready_nodes_are_collected() -> None:
    def node(name: str, ready: str | None) -> dict[str, Any]:
        conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
        return {"metadata": {"name": name}, "status": {"conditions": conditions}}

    nodes = [node("b", "True"), node("a", "True"), node("c", "False"), node("d", None)]
    assert ready_nodes(nodes) == ["a", "b"]


def test_the_job_is_pinned_to_its_node_and_mounts_the_cache_read_write() -> None:
    settings = CollectionSettings(namespace="ops", retention=90, max_bytes=1000)
    placement = WeightsPlacement(cache_path="/srv/models", fetch_image="img:1")
    job = collection_job("gpu-1", {HF, A}, settings, placement, 1_700_000_000.5)
    assert job["metadata"]["namespace"] == "ops"
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["spec"]["activeDeadlineSeconds"] > 0
    pod = job["spec"]["template"]["spec"]
    assert pod["affinity"] == pinned_affinity(None, "gpu-1")
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["automountServiceAccountToken"] is False
    (volume,) = pod["volumes"]
    assert volume["hostPath"] == {"path": "/srv/models", "type": "DirectoryOrCreate"}
    (container,) = pod["containers"]
    assert container["image"] == "img:1"
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": CACHE_MOUNT_DIR}]
    assert container["args"] == [
        "collect-model-cache", "--cache-dir", CACHE_MOUNT_DIR, "--retention", "90",
        "--max-bytes", "1000", "--keep", HF, "--keep", A,
    ]  # fmt: skip
    other = collection_job("gpu-2", {A}, settings, placement, 1_700_000_000.5)
    later = collection_job("gpu-1", {A}, settings, placement, 1_700_000_001.0)
    names = {j["metadata"]["name"] for j in (job, other, later)}
    assert len(names) == 3, "one Job per node and per run"


def test_runs_come_every_interval_and_after_a_path_stops_being_named() -> None:
    schedule = CollectionSchedule.starting(0.0, interval=100.0, retention=30.0)
    schedule.observe(frozenset({A, HF}), 0.0)
    assert not schedule.take_due(1.0), "no run at start"
    assert schedule.wake_in(1.0) == 99.0
    schedule.observe(frozenset({A}), 10.0)  # HF's member was deleted
    assert schedule.take_due(10.0), "at once"
    assert schedule.wake_in(10.0) == 30.0 + RETENTION_MARGIN_SECONDS
    assert not schedule.take_due(20.0)
    assert schedule.take_due(10.0 + 30.0 + RETENTION_MARGIN_SECONDS), "once the retention passed"
    schedule.observe(frozenset({A, HF}), 50.0)  # named again: nothing asked
    assert not schedule.take_due(60.0)
    assert schedule.take_due(100.0), "the periodic run"
    assert schedule.wake_in(100.0) == 100.0


class Store:
    """What the collector reads of an informer: its cache's objects."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.items = list(objects)

    def objects(self) -> list[dict[str, Any]]:
        return list(self.items)


class Jobs:
    """The API server as the collector writes to it: applied Jobs land in the Job cache (as
    their watch events would bring them)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def apply(self, resource: Any, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.store.items.append(obj)
        return obj


def ready_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.mark.anyio
async def test_a_path_no_longer_named_starts_one_job_per_node_and_never_two_on_one_node() -> None:
    now = [1000.0]
    isvcs, jobs = Store(isvc(URL)), Store()

    async def placement() -> WeightsPlacement:
        return WeightsPlacement()

    collector = ModelCacheCollector(
        Jobs(jobs),  # type: ignore[arg-type]
        inference_services=SimpleNamespace(store=isvcs),  # type: ignore[arg-type]
        pods=SimpleNamespace(store=Store()),  # type: ignore[arg-type]
        nodes=SimpleNamespace(store=Store(ready_node("gpu-1"), ready_node("gpu-2"))),  # type: ignore[arg-type]
        jobs=SimpleNamespace(store=jobs),  # type: ignore[arg-type]
        settings=CollectionSettings("modelpool-node-cache", interval=3600, retention=60),
        placement=placement,
        clock=lambda: now[0],
    )
    await collector.reconcile(KEY)
    assert jobs.items == [], "nothing is due while the file is named and the interval runs"

    isvcs.items.clear()  # its InferenceService is deleted: the file is no longer named
    await collector.reconcile(KEY)
    assert sorted(job_node(j) or "" for j in jobs.items) == ["gpu-1", "gpu-2"]
    assert all("--keep" not in j["spec"]["template"]["spec"]["containers"][0]["args"]
               for j in jobs.items)  # fmt: skip

    # Past the retention the second run is due, but both nodes' Jobs still run: none is added.
    now[0] += 61 + RETENTION_MARGIN_SECONDS
    await collector.reconcile(KEY)
    assert len(jobs.items) == 2
    # One finishes: its node gets the run that waited; the other's stays queued.
    jobs.items[0]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    await collector.reconcile(KEY)
    assert len(jobs.items) == 3
    assert job_node(jobs.items[2]) == job_node(jobs.items[0])
