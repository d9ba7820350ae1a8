"""The node cache is collected: a named file stays, an unnamed one goes after the retention, and
a size cap evicts the least recently used unnamed file first.

Against the real API server and kube-controller-manager (its job controller runs the fetch and
the collection Jobs; its TTL controller is not needed here); the operator runs as its own process
under its ServiceAccount with a short ``--model-cache-retention`` (or a cap) and its collection
Jobs in the test's namespace (``--model-cache-collect-namespace``), where the node stand-in plays
them: the real ``controlplane collect-model-cache`` on the node's disk (``host_root``). The
weights come from the HTTPS file server of :mod:`tests.e2e.test_weights`. A file's last use is its
marker's modification time, which the test sets where it needs an order (what the fetcher's fast
path does on each start); everything else is waited for, never slept out.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import anyio

from controlplane.api.v1alpha1.modelsource import parse_source
from controlplane.controllers.inferenceservice.weights import DEFAULT_MODEL_CACHE_PATH
from controlplane.controllers.modelcache.desired import COMPONENT, COMPONENT_LABEL
from controlplane.envtest.fileserver import FileServer
from controlplane.modelfetch.marker import marker_path
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import JOBS, PODS
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import install
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node, start_operator
from tests.e2e.test_modelpool import ISVC, TIMEOUT
from tests.e2e.test_weights import (  # noqa: F401  (fixtures: pytest finds them by name)
    digest,
    files,
    host_root,
    https,
    https_member,
    tls,
    wait_weights,
)
from tests.e2e.waiting import eventually

COLLECTOR = f"{COMPONENT_LABEL}={COMPONENT}"
#: Long enough that no test run sees it pass by itself.
LONG_AGO = 10 * 24 * 3600.0


async def collecting_operator(
    cluster: TestCluster,
    admin: KubeClient,
    tmp_path: Path,
    started: list[LocalProcess],
    namespace: str,
    *flags: str,
) -> OperatorProcess:
    await install(cluster)
    workdir = tmp_path / "operator"
    workdir.mkdir()
    return await start_operator(
        cluster, admin, workdir, f"cache-e2e-{secrets.token_hex(3)}", "cache-op", started,
        extra_args=["--model-cache-collect-namespace", namespace, *flags],
    )  # fmt: skip


def node_cache(root: Path) -> Path:
    """The operator's cache folder on the stand-in node's disk."""
    return root / DEFAULT_MODEL_CACHE_PATH.lstrip("/")


def cached_file(root: Path, source: str) -> Path:
    parsed = parse_source(source)
    return node_cache(root) / parsed.cache_key / parsed.file_in_cache


def last_used(file: Path, seconds_ago: float) -> None:
    when = time.time() - seconds_ago
    os.utime(marker_path(file), (when, when))


async def collections_settled(admin: KubeClient, namespace: str) -> list[dict[str, Any]]:
    """Every collection Job of the namespace, once each has finished (and at least one ran)."""

    async def settled() -> list[dict[str, Any]] | None:
        jobs = (await admin.list(JOBS, namespace, label_selector=COLLECTOR)).items
        finished = all(
            any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                for c in (job.get("status") or {}).get("conditions") or ())
            for job in jobs
        )  # fmt: skip
        return jobs if jobs and finished else None

    return await eventually(settled, timeout=TIMEOUT, what="the collection Jobs to finish")


async def collector_records(admin: KubeClient, namespace: str) -> list[dict[str, Any]]:
    """Every record the collection pods printed."""
    records: list[dict[str, Any]] = []
    for pod in (await admin.list(PODS, namespace, label_selector=COLLECTOR)).items:
        text = await admin.get_bytes(PODS.path(namespace, pod["metadata"]["name"], "log"))
        records += [json.loads(line) for line in text.decode().splitlines() if line.startswith("{")]
    return records


async def gone(file: Path) -> None:
    async def absent() -> bool:
        return not await anyio.Path(file).exists()

    await eventually(absent, timeout=TIMEOUT, what=f"{file.name} to be collected")


async def test_a_named_file_stays_and_one_no_longer_named_goes_after_the_retention(
    admin: KubeClient, namespace: str, cluster: TestCluster, tmp_path: Path,
    started: list[LocalProcess], https: FileServer, files: Path,  # noqa: F811
    tls: tuple[Path, Path, Path], host_root: Path,  # noqa: F811
) -> None:  # fmt: skip
    await collecting_operator(
        cluster, admin, tmp_path, started, namespace, "--model-cache-retention", "2"
    )
    start_node(cluster, tmp_path, started, namespace=namespace)
    for name in ("a", "b"):
        await admin.create(ISVC, https_member(name, https, files, tls[0], replicas=0), namespace)
    for name in ("a", "b"):
        await wait_weights(admin, namespace, name, "Ready")
    a = cached_file(host_root, https.url_of("models/a.gguf"))
    b = cached_file(host_root, https.url_of("models/b.gguf"))
    last_used(a, LONG_AGO)  # named, and unused far past the retention: still never removed
    await admin.delete(ISVC, "b", namespace)
    await gone(b)
    # The file goes first, then its marker and bookkeeping, then its folder (modelcache/disk.py):
    # one removal, watched to its end rather than read in its middle.
    await gone(marker_path(b))
    await gone(b.parent)
    await collections_settled(admin, namespace)
    assert a.exists(), "a named file was collected"
    assert marker_path(a).exists()

    # A source that changes leaves its old file unnamed: it goes too, the new one stays.
    c_source = https.url_of("models/c.gguf")
    patch = {"spec": {"model": {"source": c_source, "sha256": digest(files / "models/c.gguf")}}}
    await admin.patch(ISVC, "a", patch, namespace)
    await gone(a)

    async def fetched_c() -> bool:
        model = ((await admin.get(ISVC, "a", namespace)).get("status") or {}).get("model") or {}
        return model.get("source") == c_source and model.get("state") == "Ready"

    await eventually(fetched_c, timeout=TIMEOUT, what="a's new source to be fetched")
    c = cached_file(host_root, c_source)
    last_used(c, LONG_AGO)
    await collections_settled(admin, namespace)
    assert c.exists(), "the file the spec names now was collected"
    removed = {
        r["path"] for r in await collector_records(admin, namespace) if r["event"] == "removed"
    }
    assert removed == {
        str(f.relative_to(host_root / DEFAULT_MODEL_CACHE_PATH.lstrip("/"))) for f in (a, b)
    }


async def test_a_cap_evicts_the_least_recently_used_unnamed_file_first(
    admin: KubeClient, namespace: str, cluster: TestCluster, tmp_path: Path,
    started: list[LocalProcess], https: FileServer, files: Path,  # noqa: F811
    tls: tuple[Path, Path, Path], host_root: Path,  # noqa: F811
) -> None:  # fmt: skip
    size = (files / "models" / "a.gguf").stat().st_size
    await collecting_operator(
        cluster, admin, tmp_path, started, namespace,
        "--model-cache-retention", "3600", "--model-cache-max-bytes", str(size * 5 // 2),
    )  # fmt: skip
    start_node(cluster, tmp_path, started, namespace=namespace)
    for name in ("a", "b", "c"):
        await admin.create(ISVC, https_member(name, https, files, tls[0], replicas=0), namespace)
    for name in ("a", "b", "c"):
        await wait_weights(admin, namespace, name, "Ready")
    a, b, c = (cached_file(host_root, https.url_of(f"models/{n}.gguf")) for n in "abc")
    last_used(a, 900)  # the oldest, but named
    last_used(b, 600)
    last_used(c, 300)
    for name in ("b", "c"):
        await admin.delete(ISVC, name, namespace)
    await gone(b)
    await collections_settled(admin, namespace)
    assert c.exists(), "more was evicted than the cap needed"
    assert a.exists(), "a named file was evicted for the cap"
    records = await collector_records(admin, namespace)
    assert [r["why"] for r in records if r["event"] == "removed"] == ["OverCap"]
