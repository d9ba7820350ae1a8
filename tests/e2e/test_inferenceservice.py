"""The InferenceService controller in the operator process, against a real API server.

The operator runs as a separate process under its own ServiceAccount (only the generated RBAC
manifests grant it anything); the node stand-in runs as the admin in each test's namespace and
gives member Deployments pods backed by simulator processes. kube-controller-manager's garbage
collector makes ownerReferences cascade. Nothing is asserted on timing except generous deadlines.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.inferenceservice import CONTROLLER_NAME, ISVC_LABEL
from controlplane.controllers.inferenceservice.desired import STARTUP_FAILURE_THRESHOLD
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import ready_urls
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, ENDPOINT_SLICES, PODS, SERVICES
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import (
    LocalProcess,
    NodeStandInProcess,
    OperatorProcess,
    metric_sum,
    start_node,
    stopped_at_exit,
)
from tests.e2e.waiting import eventually

ISVC = InferenceService.resource()
READY_TIMEOUT = 60.0
MODEL = "tiny-llama"


@pytest.fixture
def node(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[NodeStandInProcess]:
    """The node stand-in for this test's namespace; stopping it takes its pods along."""
    started: list[LocalProcess]
    with stopped_at_exit() as started:
        yield start_node(cluster, tmp_path, started, namespace=namespace)


def isvc_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"model": {"name": MODEL, "source": "/models/tiny.gguf"}, **spec},
    }


async def wait_phase(admin: KubeClient, namespace: str, name: str, phase: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        found = await admin.get(ISVC, name, namespace)
        return found if (found.get("status") or {}).get("phase") == phase else None

    return await eventually(reached, timeout=READY_TIMEOUT, what=f"{name} to be {phase}")


async def ready_address(admin: KubeClient, namespace: str, service: str) -> str | None:
    """``http://HOST:PORT`` of the Service's ready endpoint, from its EndpointSlices."""
    slices = await admin.list(
        ENDPOINT_SLICES, namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    urls = ready_urls(slices.items)
    return urls[0] if urls else None


async def chat(url: str, text: str) -> dict[str, Any]:
    async with http_client(base_url=url, timeout=30) as http:
        body = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
        response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def apiserver_writes(cluster: TestCluster) -> float:
    """Writes the API server has answered to InferenceService status, Deployments, Services."""
    config = cluster.admin_config()
    async with httpx.AsyncClient(base_url=config.server, verify=config.ssl_context) as http:
        text = (await http.get("/metrics", headers=dict(config.auth_headers()))).text

    total = 0.0
    writes = {"POST", "PUT", "PATCH", "APPLY"}
    watched = {("inferenceservices", "status"), ("deployments", ""), ("services", "")}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "apiserver_request_total"
                and labels.get("verb") in writes
                and (labels.get("resource"), labels.get("subresource", "")) in watched
            ):
                total += sample.value
    return total


async def test_isvc_serves_stops_and_comes_back(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    operator: OperatorProcess,
    node: NodeStandInProcess,
) -> None:
    name = "llama"
    args = ["--parallel", "2", "--ctx-size", "4096"]
    created = await admin.create(
        ISVC, isvc_body(name, args=args, resources={"limits": {"memory": "1Gi"}}), namespace
    )
    ready = await wait_phase(admin, namespace, name, "Ready")
    status = ready["status"]
    assert status["readyReplicas"] == 1
    assert status["endpoint"] == f"http://{name}.{namespace}.svc:8080"
    assert status["observedGeneration"] == ready["metadata"]["generation"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert set(conditions) == {"Ready", "ModelReady", "UpdatePending"}
    assert conditions["Ready"]["status"] == "True"
    # Nothing about its pod waits (docs/inferenceservice.md, "Changing a serving member").
    assert (conditions["UpdatePending"]["status"], conditions["UpdatePending"]["reason"]) == (
        "False",
        "UpToDate",
    )
    # A model baked into the image is read where it is: ready without a fetch.
    assert (conditions["ModelReady"]["status"], conditions["ModelReady"]["reason"]) == (
        "True",
        "NotFetched",
    )
    assert status["model"]["summary"] == "Ready (image)"

    # The children: owned by the InferenceService, shaped as the spec says.
    owner = {"apiVersion": "inference.modelpool.dev/v1alpha1", "kind": "InferenceService",
             "name": name, "uid": created["metadata"]["uid"], "controller": True,
             "blockOwnerDeletion": True}  # fmt: skip
    deployment = await admin.get(DEPLOYMENTS, name, namespace)
    service = await admin.get(SERVICES, name, namespace)
    assert deployment["metadata"]["ownerReferences"] == [owner]
    assert service["metadata"]["ownerReferences"] == [owner]
    spec = deployment["spec"]
    assert spec["replicas"] == 1, "no spec.replicas means 1"
    assert spec["strategy"] == {"type": "Recreate"}
    assert spec["selector"] == {"matchLabels": {ISVC_LABEL: name}}
    (container,) = spec["template"]["spec"]["containers"]
    assert container["args"] == ["--model", "/models/tiny.gguf", "--alias", MODEL, "--host",
                                 "0.0.0.0", "--port", "8080", "--metrics", *args]  # fmt: skip
    assert container["ports"][0]["containerPort"] == 8080
    assert container["resources"] == {"limits": {"memory": "1Gi"}}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["startupProbe"]["failureThreshold"] == STARTUP_FAILURE_THRESHOLD
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {ISVC_LABEL: name}
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http", 8080, "http")
    ]

    # The simulator behind the EndpointSlice answers, as the model and with the slots asked for.
    url = await eventually(
        lambda: ready_address(admin, namespace, name), what="a ready endpoint for the Service"
    )
    answer = await chat(url, "hello pool")
    assert answer["model"] == MODEL
    assert answer["choices"][0]["message"]["content"].startswith("hello pool")
    async with http_client(timeout=10) as http:
        assert len((await http.get(f"{url}/slots")).json()) == 2, "--parallel 2 reached the server"
        # --metrics reached it too: the members' PodMonitor has a /metrics to scrape.
        metrics = await http.get(f"{url}/metrics")
    assert metrics.status_code == 200, metrics.text
    assert "llamacpp:tokens_predicted_total " in metrics.text

    await _no_op_resync_writes_nothing(cluster, admin, namespace, name, operator)

    # Scale to zero: the pod is Terminating (its server stopping) before it is gone, the
    # endpoint stops being ready, and only then is the InferenceService Stopped.
    pod_events: list[tuple[str, dict[str, Any]]] = []
    async with anyio.create_task_group() as group:
        pods_before = await admin.list(PODS, namespace)
        (first_pod,) = pods_before.items
        group.start_soon(_record_pods, admin, namespace, pods_before.resource_version, pod_events)
        await admin.patch(ISVC, name, {"spec": {"replicas": 0}}, namespace)
        stopped = await wait_phase(admin, namespace, name, "Stopped")
        group.cancel_scope.cancel()
    assert stopped["status"]["readyReplicas"] == 0
    assert (await admin.get(DEPLOYMENTS, name, namespace))["spec"]["replicas"] == 0
    assert (await admin.list(PODS, namespace)).items == []
    terminating = [
        obj
        for kind, obj in pod_events
        if kind == "MODIFIED" and obj["metadata"].get("deletionTimestamp")
    ]
    deleted = [obj for kind, obj in pod_events if kind == "DELETED"]
    assert terminating, f"the pod was never seen Terminating: {[k for k, _ in pod_events]}"
    assert [p["metadata"]["uid"] for p in deleted] == [first_pod["metadata"]["uid"]]
    # One etcd orders every write: Stopped was written after the pod was really gone.
    assert int(stopped["metadata"]["resourceVersion"]) > int(
        deleted[0]["metadata"]["resourceVersion"]
    )
    assert await ready_address(admin, namespace, name) is None

    # Back to "absent means 1": a new pod, Ready again, answering.
    await admin.patch(ISVC, name, {"spec": {"replicas": None}}, namespace)
    await wait_phase(admin, namespace, name, "Ready")
    (second_pod,) = (await admin.list(PODS, namespace)).items
    assert second_pod["metadata"]["uid"] != first_pod["metadata"]["uid"]
    url = await eventually(
        lambda: ready_address(admin, namespace, name), what="a ready endpoint again"
    )
    assert (await chat(url, "welcome back"))["model"] == MODEL


async def _record_pods(
    admin: KubeClient, namespace: str, version: str, events: list[tuple[str, dict[str, Any]]]
) -> None:
    async with admin.watch(PODS, namespace, resource_version=version) as stream:
        async for event in stream:
            if event.type != "BOOKMARK":
                events.append((event.type, event.object))


async def _no_op_resync_writes_nothing(
    cluster: TestCluster, admin: KubeClient, namespace: str, name: str, operator: OperatorProcess
) -> None:
    """A Deployment event that changes nothing we own reconciles, and writes nothing.

    Counted at the API server (``apiserver_request_total``), so a controller that re-applied its
    children or re-wrote an identical status on every reconcile would fail here even though such
    no-op writes leave resourceVersions unchanged.
    """

    async def others() -> bool:  # writes for any other InferenceService would be counted too
        found = await admin.list(ISVC)
        return [i["metadata"]["name"] for i in found.items] == [name]

    await eventually(others, what="no other InferenceService in the cluster")
    before_isvc = await admin.get(ISVC, name, namespace)
    reconciles = await metric_sum(
        operator.metrics_url, "controller_runtime_reconcile_total", controller=CONTROLLER_NAME
    )
    writes = await apiserver_writes(cluster)
    touch = {"metadata": {"annotations": {"e2e.modelpool.dev/touched": secrets.token_hex(3)}}}
    await admin.patch(DEPLOYMENTS, name, touch, namespace)  # one write: ours

    async def reconciled() -> bool:
        now = await metric_sum(
            operator.metrics_url, "controller_runtime_reconcile_total", controller=CONTROLLER_NAME
        )
        return now > reconciles

    await eventually(reconciled, what="the operator to reconcile the touched Deployment")
    assert await apiserver_writes(cluster) == writes + 1, "a no-op reconcile wrote something"
    after_isvc = await admin.get(ISVC, name, namespace)
    assert after_isvc["metadata"]["resourceVersion"] == before_isvc["metadata"]["resourceVersion"]


async def test_a_deployment_it_does_not_own_is_left_alone_and_the_isvc_is_pending(
    admin: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    name = "taken"
    labels = {"app": "someone-else"}
    pod = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    spec = {"replicas": 0, "selector": {"matchLabels": labels}, "template": pod}
    foreign = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": spec,
    }
    before = await admin.create(DEPLOYMENTS, foreign, namespace)
    await admin.create(ISVC, isvc_body(name), namespace)
    pending = await wait_phase(admin, namespace, name, "Pending")
    condition = next(c for c in pending["status"]["conditions"] if c["type"] == "Ready")
    assert condition["reason"] == "NotOwned"
    assert "Deployment" in condition["message"]
    after = await admin.get(DEPLOYMENTS, name, namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not after["metadata"].get("ownerReferences")


async def test_deleting_the_isvc_cascades_to_its_deployment_service_and_pods(
    admin: KubeClient, namespace: str, operator: OperatorProcess, node: NodeStandInProcess
) -> None:
    name = "doomed"
    await admin.create(ISVC, isvc_body(name), namespace)
    await wait_phase(admin, namespace, name, "Ready")
    await admin.delete(ISVC, name, namespace)

    async def all_gone() -> bool:
        for resource in (DEPLOYMENTS, SERVICES):
            try:
                await admin.get(resource, name, namespace)
                return False
            except NotFound:
                pass
        slices = await admin.list(ENDPOINT_SLICES, namespace)
        return not (await admin.list(PODS, namespace)).items and not slices.items

    await eventually(all_gone, timeout=READY_TIMEOUT, what="Deployment, Service, pods to go")
