"""The kind tier of model weights: members whose weights come from a claim and from a download.

A pool of two real llama-server members behind a router, in the cluster: ``disk`` reads its model
from a PersistentVolumeClaim (``pvc://weights/models/tiny-1.gguf``), ``web`` downloads its model
from a file server pod over HTTPS (``https://files.NS.svc/tiny-2.gguf``, a private CA;
:mod:`tests.e2e.kindweights` says how the fetcher is made to trust it). What only a cluster shows:
the fetch Job runs on a real kubelet from the operator's image and completes, its success is
``ModelReady`` (``status.model`` Ready, the digest and the node), the member's pod starts with
the ``fetch-model`` init container that finds the cached file and downloads nothing, its server
reads ``--model`` from the node cache mounted under ``/var/lib/modelpool/model``, the claim's
member reads it from the claim, and requests through the router's Service swap the pool both ways
with the invariant monitor watching the member pods. A wrong ``sha256`` fails the fetch Job at
once (the fetcher's permanent exit code) and the member with ``ModelReady`` False,
``DigestMismatch``, naming both digests, and no member pod ever starts.
"""

from __future__ import annotations

import hashlib
import json
from functools import partial
from typing import Any, Final

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.controllers.inferenceservice.fetching import JOB_NAME_LABEL
from controlplane.controllers.inferenceservice.weights import (
    FETCH_CONTAINER,
    MODEL_MOUNT_DIR,
    MODEL_OF_LABEL,
)
from controlplane.controllers.modelcache.desired import COMPONENT as COLLECTOR
from controlplane.controllers.modelcache.desired import COMPONENT_LABEL as COLLECTOR_LABEL
from controlplane.controllers.modelcache.desired import DEFAULT_NAMESPACE as COLLECT_NAMESPACE
from controlplane.controllers.modelcache.desired import job_finished
from controlplane.modelfetch.progress import Done, parse_line
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import DEPLOYMENTS, JOBS, PODS
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import ROLLOUT_TIMEOUT, wait_available
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kindweights import (
    PATH_IN_CLAIM,
    SERVED,
    ca_config_map,
    file_server,
    filled_claim,
    remove_volume,
)
from tests.e2e.kubectl import kubectl
from tests.e2e.test_kind_cluster import ask_in_cluster, router
from tests.e2e.test_modelrouter import condition
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

ISVCS: Final = InferenceService.resource()
POOLS: Final = ModelPool.resource()
#: A tiny model's download and a real server's start on two shared cores: minutes at most.
WEIGHTS_TIMEOUT: Final = 240.0


def member(
    cluster: TestCluster,
    name: str,
    source: str,
    *,
    sha256: str | None = None,
    ca_bundle: str | None = None,
) -> dict[str, Any]:
    """A real llama-server member (the image's server, the operator's arguments) of ``source``."""
    assert cluster.llama_image is not None
    model: dict[str, Any] = {"name": name, "source": source}
    if sha256 is not None:
        model["sha256"] = sha256
    if ca_bundle is not None:
        model["caBundle"] = {"name": ca_bundle}
    spec: dict[str, Any] = {"model": model, "image": cluster.llama_image,
                            "args": ["--threads", "1"]}  # fmt: skip
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": spec,
    }


async def weights_settled(admin: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The InferenceService once ``status.model.state`` is Ready or Failed (for this source)."""

    async def settled() -> dict[str, Any] | None:
        found = await admin.get(ISVCS, name, namespace)
        model = (found.get("status") or {}).get("model") or {}
        if model.get("source") != found["spec"]["model"]["source"]:
            return None
        return found if model.get("state") in ("Ready", "Failed") else None

    return await eventually(
        settled, timeout=WEIGHTS_TIMEOUT, interval=0.5, what=f"the weights of {name} settled"
    )


async def fetch_container_record(cluster: TestCluster, namespace: str, pod: str) -> Done | None:
    """The last record the pod's ``fetch-model`` container printed, if it is ``done``."""
    _, out, _ = await kubectl(cluster, "-n", namespace, "logs", pod, "-c", FETCH_CONTAINER)
    lines = [line for line in out.splitlines() if line.strip()]
    record = parse_line(lines[-1]) if lines else None
    return record if isinstance(record, Done) else None


async def job_pods(admin: KubeClient, namespace: str, job: str) -> list[dict[str, Any]]:
    return (await admin.list(PODS, namespace, label_selector=f"{JOB_NAME_LABEL}={job}")).items


async def member_pod(admin: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The member's one running pod (not being deleted)."""

    async def running() -> dict[str, Any] | None:
        pods = await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}={name}")
        live = [
            pod
            for pod in pods.items
            if not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") == "Running"
        ]
        return live[0] if len(live) == 1 else None

    return await eventually(running, timeout=ROLLOUT_TIMEOUT, what=f"the pod of {name}")


def server_model_arg(pod: dict[str, Any]) -> str:
    (server,) = pod["spec"]["containers"]
    args = [*server.get("command", []), *server.get("args", [])]
    return str(args[args.index("--model") + 1])


def job_condition(job: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


async def assert_fetched(
    admin: KubeClient, cluster: TestCluster, namespace: str, name: str, digest: str
) -> None:
    """``name``'s weights Ready by its fetch Job: Complete, the download's digest ``digest``."""
    found = await weights_settled(admin, namespace, name)
    model = found["status"]["model"]
    ready = condition(found, "ModelReady") or {}
    assert model["state"] == "Ready", model
    assert (ready.get("status"), ready.get("reason")) == ("True", "Cached"), ready
    assert model["sha256"] == digest, model
    assert model["path"].endswith(f"/{SERVED}"), model
    job = await admin.get(JOBS, model["fetchJob"], namespace)
    assert job_condition(job, "Complete"), job.get("status")
    assert job["metadata"]["labels"][MODEL_OF_LABEL] == name
    assert ISVC_LABEL not in job["spec"]["template"]["metadata"].get("labels", {})
    pods = [pod for pod in await job_pods(admin, namespace, job["metadata"]["name"])
            if pod["status"].get("phase") == "Succeeded"]  # fmt: skip
    assert pods, f"no fetch pod of {job['metadata']['name']} succeeded"
    record = await fetch_container_record(cluster, namespace, pods[0]["metadata"]["name"])
    assert record is not None, "the fetch pod logged no done record"
    assert record.downloaded, record
    assert record.sha256 == digest, record
    assert model["node"] == pods[0]["spec"]["nodeName"], model


async def resident(admin: KubeClient, namespace: str, pool: str, name: str) -> bool:
    found = await admin.get(POOLS, pool, namespace)
    return (found.get("status") or {}).get("residentMember") == name


@pytest.mark.timeout(900)
async def test_a_pool_of_a_claims_member_and_a_downloaded_member_swaps_through_the_router(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    assert cluster.image is not None
    monitor = PoolInvariantMonitor(
        cluster.admin_config(), namespace, sample_processes=False
    ).start()
    try:
        claim_source = await filled_claim(admin, cluster, namespace)
        files = await file_server(admin, cluster, namespace)
        ca = await ca_config_map(admin, namespace, files.ca_pem)
        await admin.create(ISVCS, member(cluster, "disk", claim_source), namespace)
        await admin.create(ISVCS, member(cluster, "web", files.https, ca_bundle=ca), namespace)
        pool = pool_body("gpu", ("disk", "web"), default="disk", swap_budget="180s")
        await admin.create(POOLS, pool, namespace)
        body = router("chat", cluster.image, 1)
        body["spec"]["backends"] = [{"name": "gpu", "poolRef": {"name": "gpu"}}]
        await admin.create(ModelRouter.resource(), body, namespace)

        # The claim's member is Ready where it is; the downloaded one by its fetch Job.
        disk = await weights_settled(admin, namespace, "disk")
        assert disk["status"]["model"]["state"] == "Ready", disk["status"]["model"]
        assert (condition(disk, "ModelReady") or {}).get("reason") == "NotFetched"
        await assert_fetched(admin, cluster, namespace, "web", files.sha256)
        _, table, _ = await kubectl(cluster, "-n", namespace, "get", "isvc")
        assert "WEIGHTS" in table.splitlines()[0], table
        rows = {line.split()[0]: line for line in table.splitlines()[1:]}
        assert "Ready (pvc)" in rows["disk"], table
        assert "Ready" in rows["web"], table

        await wait_available(admin, namespace, "chat", 1)
        await eventually(
            partial(resident, admin, namespace, "gpu", "disk"),
            timeout=ROLLOUT_TIMEOUT,
            what="disk resident",
        )
        url = f"http://chat.{namespace}.svc/v1/chat/completions"
        for asked, model in (("ask-disk", "disk"), ("ask-web", "web"), ("ask-disk-again", "disk")):
            answer = await ask_in_cluster(cluster, namespace, asked, url, model)
            assert answer["status"] == 200, answer
            assert answer["body"]["model"] == model, answer
            await eventually(
                partial(resident, admin, namespace, "gpu", model),
                timeout=ROLLOUT_TIMEOUT,
                what=f"{model} resident",
            )
            pod = await member_pod(admin, namespace, model)
            if model == "web":
                await assert_started_from_the_cache(cluster, namespace, pod)
            else:
                assert server_model_arg(pod) == f"{MODEL_MOUNT_DIR}/{PATH_IN_CLAIM}"
                volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "model")
                assert volume["persistentVolumeClaim"]["claimName"] == "weights", volume
                assert not pod["spec"].get("initContainers"), pod["spec"]["initContainers"]
        changes = [(c.old, c.new) for c in monitor.residency_changes("gpu")]
        assert changes[-2:] == [("disk", "web"), ("web", "disk")], changes
        # At most one member's pod at any instant (watch order), and settled: disk's pod alone.
        monitor.settle()
        monitor.check()
        await assert_collected_on_the_node(admin, cluster, namespace)
    finally:
        monitor.stop()
        with anyio.CancelScope(shield=True):
            await remove_volume(admin, namespace)


async def assert_collected_on_the_node(
    admin: KubeClient, cluster: TestCluster, namespace: str
) -> None:
    """Once no InferenceService names web's file, the operator runs the node cache's collection
    as a Job in ``modelpool-node-cache``: admitted there (privileged Pod Security), it runs on the
    real node with the cache mounted and keeps the file, unused for less than the 24 h retention
    (removal itself is proven in the local tier, with a short retention)."""
    selector = f"{COLLECTOR_LABEL}={COLLECTOR}"
    listed = await admin.list(JOBS, COLLECT_NAMESPACE, label_selector=selector)
    before = {j["metadata"]["name"] for j in listed.items}
    await admin.delete(ISVCS, "web", namespace)

    async def finished() -> dict[str, Any] | None:
        jobs = (await admin.list(JOBS, COLLECT_NAMESPACE, label_selector=selector)).items
        done = [j for j in jobs if j["metadata"]["name"] not in before and job_finished(j)]
        return done[0] if done else None

    job = await eventually(finished, timeout=ROLLOUT_TIMEOUT, what="a collection Job finished")
    assert job_condition(job, "Complete"), job.get("status")
    _, out, _ = await kubectl(
        cluster, "-n", COLLECT_NAMESPACE, "logs", f"job/{job['metadata']['name']}"
    )
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    summary = records[-1]
    assert summary["event"] == "summary", out
    assert summary["files"] >= 1, summary
    assert summary["removedFiles"] == 0, records


async def assert_started_from_the_cache(
    cluster: TestCluster, namespace: str, pod: dict[str, Any]
) -> None:
    """The downloaded member's pod: the ``fetch-model`` init container ran and found the file
    the Job had cached (it downloaded nothing), and the server reads it from the node cache."""
    (init,) = pod["spec"]["initContainers"]
    assert init["name"] == FETCH_CONTAINER, init
    assert init["image"] == cluster.image, init
    assert server_model_arg(pod) == f"{MODEL_MOUNT_DIR}/{SERVED}", pod["spec"]["containers"]
    (status,) = pod["status"]["initContainerStatuses"]
    terminated = (status.get("state") or {}).get("terminated") or {}
    assert terminated.get("exitCode") == 0, status
    record = await fetch_container_record(cluster, namespace, pod["metadata"]["name"])
    assert record is not None, "the init container logged no done record"
    assert not record.downloaded, record


async def test_a_wrong_sha256_fails_the_member_without_starting_it(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    files = await file_server(admin, cluster, namespace)
    wrong = hashlib.sha256(b"not the model").hexdigest()
    await admin.create(ISVCS, member(cluster, "bad", files.http, sha256=wrong), namespace)
    found = await weights_settled(admin, namespace, "bad")
    model = found["status"]["model"]
    ready = condition(found, "ModelReady") or {}
    assert model["state"] == "Failed", model
    assert (ready.get("status"), ready.get("reason")) == ("False", "DigestMismatch"), ready
    for digest in (files.sha256, wrong):
        assert digest in ready.get("message", ""), ready
    job = await admin.get(JOBS, model["fetchJob"], namespace)
    assert job_condition(job, "Failed"), job.get("status")
    # A permanent failure: the Job fails at once, no retry by its backoff.
    assert len(await job_pods(admin, namespace, job["metadata"]["name"])) == 1
    deployment = await admin.get(DEPLOYMENTS, "bad", namespace)
    assert deployment["spec"]["replicas"] == 0, deployment["spec"]
    pods = await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}=bad")
    assert pods.items == [], [p["metadata"]["name"] for p in pods.items]
