"""Weights that reach the member: downloaded once into the node cache, verified, never on a swap.

Against the real API server and kube-controller-manager (its job controller runs the fetch
Jobs); the operator runs as its own process under its ServiceAccount, and the node stand-in plays
the kubelet for the member and fetch pods, running the real ``controlplane fetch-model`` (with
the node cache a folder of its disk, ``LOG_DIR/hostpath``). The weights come from a local HTTPS
server under a private CA (``SSL_CERT_FILE`` in ``spec.pod.env``, given to the fetcher) and from
a local server speaking the Hub's download protocol (``HF_ENDPOINT``), each of which logs every
request, so "downloaded once" and "no download during a swap" are counted, not assumed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.api.v1alpha1.modelsource import parse_source
from controlplane.controllers.inferenceservice.weights import (
    DEFAULT_MODEL_CACHE_PATH,
    FETCH_CONTAINER,
    MODEL_MOUNT_DIR,
    MODEL_OF_LABEL,
)
from controlplane.envtest.fileserver import FileServer
from controlplane.envtest.pki import CertificateAuthority
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import DEPLOYMENTS, EVENTS, JOBS, PODS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import kubectl
from tests.e2e.operator_process import LocalProcess, NodeStandInProcess, start_node, stopped_at_exit
from tests.e2e.test_modelpool import (
    ISVC,
    LOAD_SECONDS,
    POOL,
    TIMEOUT,
    TOKEN_SECONDS,
    chat,
    condition,
    ready_url,
    settled,
    take_lease,
    wait_pool,
)
from tests.e2e.waiting import eventually

Object = dict[str, Any]
NODE_NAME = "modelpool-sim-node"
ORG_REPO = "tiny-org/tiny-models"


@pytest.fixture
def node(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[NodeStandInProcess]:
    started: list[LocalProcess]
    with stopped_at_exit() as started:
        yield start_node(cluster, tmp_path, started, namespace=namespace,
                         load_seconds=LOAD_SECONDS, token_seconds=TOKEN_SECONDS)  # fmt: skip


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    """The stand-in node's disk: a hostPath ``/P`` is ``host_root/P``."""
    return tmp_path / "simulators" / "hostpath"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "models").mkdir(parents=True)
    (root / ORG_REPO).mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / "models" / f"{name}.gguf").write_bytes(os.urandom(256 * 1024))
    (root / ORG_REPO / "hub.gguf").write_bytes(os.urandom(256 * 1024))
    return root


@pytest.fixture
def tls(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A private CA's certificate, and a serving pair for 127.0.0.1 signed by it."""
    authority = CertificateAuthority("weights-e2e-ca")
    folder = tmp_path / "tls"
    folder.mkdir()
    cert, key = authority.serving_pair().write(folder, "server")
    ca = folder / "ca.crt"
    ca.write_bytes(authority.cert_pem)
    return ca, cert, key


@pytest.fixture
def https(files: Path, tls: tuple[Path, Path, Path]) -> Iterator[FileServer]:
    with FileServer(files, tls=(tls[1], tls[2])) as server:
        yield server


@pytest.fixture
def hub(files: Path) -> Iterator[FileServer]:
    with FileServer(files, hub=True) as server:
        yield server


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetched_member(
    name: str,
    source: str,
    *,
    sha256: str | None = None,
    env: dict[str, str] | None = None,
    replicas: int | None = None,
) -> Object:
    model: Object = {"name": name, "source": source}
    if sha256 is not None:
        model["sha256"] = sha256
    spec: Object = {
        "model": model,
        "args": ["--parallel", "2"],
        "pod": {"env": [{"name": k, "value": v} for k, v in (env or {}).items()]},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def https_member(name: str, https: FileServer, files: Path, ca: Path, **kw: Any) -> Object:
    file = files / "models" / f"{name}.gguf"
    return fetched_member(name, https.url_of(f"models/{name}.gguf"),
                          sha256=kw.pop("sha256", digest(file)),
                          env={"SSL_CERT_FILE": str(ca)}, **kw)  # fmt: skip


async def model_status(admin: KubeClient, namespace: str, name: str) -> Object:
    found: Object = ((await admin.get(ISVC, name, namespace)).get("status") or {}).get(
        "model"
    ) or {}
    return found


async def wait_weights(admin: KubeClient, namespace: str, name: str, state: str) -> Object:
    async def reached() -> Object | None:
        obj = await admin.get(ISVC, name, namespace)
        model = (obj.get("status") or {}).get("model") or {}
        return obj if model.get("state") == state else None

    return await eventually(reached, timeout=TIMEOUT, what=f"{name}'s weights to be {state}")


async def wait_isvc(admin: KubeClient, namespace: str, name: str, phase: str) -> Object:
    async def reached() -> Object | None:
        obj = await admin.get(ISVC, name, namespace)
        return obj if (obj.get("status") or {}).get("phase") == phase else None

    return await eventually(reached, timeout=TIMEOUT, what=f"{name} to be {phase}")


def model_condition(obj: Object) -> Object:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next(c for c in conditions if c["type"] == "ModelReady")


def printed_column(table: str, name: str) -> list[str]:
    """The values of column ``name`` of a ``kubectl get`` table (cut at the header's offsets:
    an empty cell, such as an unlisted member's POOL, leaves no word to count)."""
    header, *rows = table.splitlines()
    start = header.index(name)
    rest = header[start + len(name) :]
    end = start + len(name) + (len(rest) - len(rest.lstrip())) if rest.strip() else None
    return [row[start:end].strip() for row in rows]


def gets_of(server: FileServer, path: str) -> int:
    return len([r for r in server.requests("GET") if r.path == path])


async def test_an_https_and_an_hf_member_are_downloaded_once_verified_cached_and_served(
    admin: KubeClient, namespace: str, operator: Any, node: NodeStandInProcess,
    cluster: TestCluster, https: FileServer, hub: FileServer, files: Path,
    tls: tuple[Path, Path, Path], host_root: Path,
) -> None:  # fmt: skip
    hub_file = files / ORG_REPO / "hub.gguf"
    await admin.create(ISVC, https_member("a", https, files, tls[0], replicas=1), namespace)
    hf_source = f"hf://{ORG_REPO}/hub.gguf"
    await admin.create(
        ISVC,
        fetched_member(
            "h", hf_source, sha256=digest(hub_file), env={"HF_ENDPOINT": hub.url}, replicas=1
        ),
        namespace,
    )
    for name, file, source in (
        ("a", files / "models" / "a.gguf", https.url_of("models/a.gguf")),
        ("h", hub_file, hf_source),
    ):
        ready = await wait_isvc(admin, namespace, name, "Ready")
        model = ready["status"]["model"]
        assert model["state"] == "Ready"
        assert model["sha256"] == digest(file), "the digest verified is reported"
        assert model["node"] == NODE_NAME
        assert model["summary"] == "Ready"
        assert (model_condition(ready)["status"], model_condition(ready)["reason"]) == (
            "True",
            "Cached",
        )
        parsed = parse_source(source)
        expected = f"{DEFAULT_MODEL_CACHE_PATH}/{parsed.cache_key}/{parsed.file_in_cache}"
        assert model["path"] == expected
        cached = host_root / expected.lstrip("/")
        assert cached.read_bytes() == file.read_bytes(), "the node cache holds the file"
        # The server reads it from the cache folder, mounted read-only, after the init container.
        selector = f"inference.modelpool.dev/inferenceservice={name}"
        (pod,) = (await admin.list(PODS, namespace, label_selector=selector)).items
        (init,) = pod["spec"]["initContainers"]
        assert init["name"] == FETCH_CONTAINER
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--model") + 1] == f"{MODEL_MOUNT_DIR}/{parsed.file_in_cache}"
        affinity = pod["spec"]["affinity"]["nodeAffinity"]
        term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        assert term["matchFields"][0]["values"] == [NODE_NAME], "pinned to the cache's node"
        answer = await chat(await ready_url(admin, namespace, name), name)
        assert answer
    # Downloaded once each: by the fetch Job; the pod's init container found it cached.
    assert gets_of(https, "/models/a.gguf") == 1, https.requests()
    assert len(hub.requests("GET")) == 1, hub.requests()
    jobs = (await admin.list(JOBS, namespace, label_selector=f"{MODEL_OF_LABEL}=a")).items
    assert len(jobs) == 1
    assert any(c["type"] == "Complete" and c["status"] == "True"
               for c in jobs[0]["status"]["conditions"])  # fmt: skip
    reasons = {e["reason"] for e in (await admin.list(EVENTS, namespace)).items
               if e["regarding"]["name"] == "a"}  # fmt: skip
    assert "DownloadSucceeded" in reasons
    _, out, _ = await kubectl(cluster, "get", "isvc", "a", "h", "-n", namespace)
    assert printed_column(out, "WEIGHTS") == ["Ready", "Ready"], out


async def test_a_wrong_digest_fails_the_member_naming_both_digests_and_nothing_starts(
    admin: KubeClient, namespace: str, operator: Any, node: NodeStandInProcess,
    https: FileServer, files: Path, tls: tuple[Path, Path, Path], host_root: Path,
) -> None:  # fmt: skip
    wrong = "0" * 64
    actual = digest(files / "models" / "a.gguf")
    await admin.create(
        ISVC, https_member("a", https, files, tls[0], sha256=wrong, replicas=1), namespace
    )
    failed = await wait_isvc(admin, namespace, "a", "Failed")
    condition_ = model_condition(failed)
    assert (condition_["status"], condition_["reason"]) == ("False", "DigestMismatch")
    assert wrong in condition_["message"]
    assert actual in condition_["message"]
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "WeightsFailed"
    assert failed["status"]["model"]["summary"] == "Failed: DigestMismatch"
    deployment = await admin.get(DEPLOYMENTS, "a", namespace)
    assert deployment["spec"]["replicas"] == 0, "a server without its weights is never started"
    member_pods = await admin.list(
        PODS, namespace, label_selector="inference.modelpool.dev/inferenceservice=a"
    )
    assert member_pods.items == []
    parsed = parse_source(https.url_of("models/a.gguf"))
    cached = host_root / DEFAULT_MODEL_CACHE_PATH.lstrip("/") / parsed.cache_key / "a.gguf"
    assert not cached.exists(), "a file that does not match is not kept"
    assert gets_of(https, "/models/a.gguf") == 1, "a permanent failure is not retried"


async def test_a_pool_prefetches_its_members_and_swaps_without_a_download(
    admin: KubeClient, namespace: str, operator: Any, node: NodeStandInProcess,
    https: FileServer, files: Path, tls: tuple[Path, Path, Path],
) -> None:  # fmt: skip
    await admin.create(ISVC, https_member("a", https, files, tls[0], replicas=0), namespace)
    await admin.create(ISVC, https_member("b", https, files, tls[0], replicas=0), namespace)
    await admin.create(POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
    await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
    # b was never granted the slot, and its weights are on the node all the same.
    parked = await wait_weights(admin, namespace, "b", "Ready")
    assert parked["status"]["phase"] == "Stopped"
    before = len(https.requests())
    for target in ("b", "a", "b"):
        await take_lease(admin, namespace, "gpu", target=target)
        await wait_pool(admin, namespace, "gpu", settled(target), f"{target} to be resident")
        assert await chat(await ready_url(admin, namespace, target), target)
    assert https.requests()[before:] == [], "a swap asked the file server for something"


async def test_a_swap_to_a_member_without_weights_waits_and_says_so(
    admin: KubeClient, namespace: str, operator: Any, node: NodeStandInProcess,
    https: FileServer, files: Path, tls: tuple[Path, Path, Path],
) -> None:  # fmt: skip
    https.fail("/models/b.gguf", 404, times=1000)
    await admin.create(ISVC, https_member("a", https, files, tls[0], replicas=0), namespace)
    await admin.create(ISVC, https_member("b", https, files, tls[0], replicas=0), namespace)
    await admin.create(POOL, pool_body("gpu", ["a", "b"], "a"), namespace)
    await wait_pool(admin, namespace, "gpu", settled("a"), "a to be resident")
    await wait_weights(admin, namespace, "b", "Failed")
    await take_lease(admin, namespace, "gpu", target="b")

    def waiting(pool: Object) -> bool:
        allocated = condition(pool, "SlotAllocated")
        return allocated["reason"] == "WaitingForWeights" and "b" in allocated["message"]

    pool = await wait_pool(admin, namespace, "gpu", waiting, "the swap to wait for b's weights")
    assert "Failed: NotFound" in condition(pool, "SlotAllocated")["message"]
    slots = {m["name"]: m.get("slot") for m in pool["status"]["members"]}
    assert slots["a"] == "Granted", "the resident was drained for a member that cannot start"
    assert pool["status"]["residentMember"] == "a"
    assert await chat(await ready_url(admin, namespace, "a"), "a"), "a still serves"


async def test_a_50_mb_downloads_progress_is_seen_moving(
    admin: KubeClient, namespace: str, operator: Any, node: NodeStandInProcess,
    cluster: TestCluster, https: FileServer, files: Path, tls: tuple[Path, Path, Path],
) -> None:  # fmt: skip
    big = files / "models" / "c.gguf"
    with big.open("wb") as out:
        for _ in range(50):
            out.write(os.urandom(1024 * 1024))
    https.throttle = 8 * 1024 * 1024  # about 6 s
    await admin.create(ISVC, https_member("c", https, files, tls[0], replicas=1), namespace)
    seen: list[int] = []
    shown: set[str] = set()
    #: The Deployment's replicas each time the download was seen running.
    started: list[int] = []

    async def done() -> bool | None:
        model = await model_status(admin, namespace, "c")
        summary = str(model.get("summary") or "")
        if summary.startswith("Downloading ") and summary.endswith("%"):
            percent = int(summary.removeprefix("Downloading ").removesuffix("%"))
            if not seen or seen[-1] != percent:
                seen.append(percent)
            _, out, _ = await kubectl(cluster, "get", "isvc", "c", "-n", namespace)
            shown.update(printed_column(out, "WEIGHTS"))
            deployment = await admin.get(DEPLOYMENTS, "c", namespace)
            started.append(int(deployment["spec"].get("replicas") or 0))
        return True if model.get("state") == "Ready" else None

    await eventually(done, timeout=TIMEOUT, interval=0.3, what="c's 50 MB download to finish")
    assert len(seen) >= 2, f"progress did not move: {seen}"
    assert seen == sorted(seen), f"progress went backwards: {seen}"
    assert any(cell.startswith("Downloading ") and cell.endswith("%") for cell in shown), (
        f"kubectl get isvc did not show the download's percentage: {shown}"
    )
    assert set(started) == {0}, "the server was started before its weights were there"
    model = await model_status(admin, namespace, "c")
    assert model["bytesTotal"] == 50 * 1024 * 1024
    assert model["sha256"] == digest(big)
