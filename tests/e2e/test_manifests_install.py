"""`kubectl apply -k manifests/default` and the samples install on a real API server and read well.

With no kubelet the operator's pod never runs; what is proven here is what the API server itself
decides: every object is accepted, the CRDs are established, defaults are applied, and `kubectl
get` prints the columns the design promises.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import Forbidden
from controlplane.runtime.resources import DEPLOYMENTS, NAMESPACES, PODS, SERVICE_ACCOUNTS
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import MANIFESTS, install, kubectl

pytestmark = [pytest.mark.any_cluster, pytest.mark.cluster_install]


async def test_default_install_and_samples_are_accepted(
    cluster: TestCluster, admin: KubeClient, namespace: str
) -> None:
    await install(cluster)
    # No default for replicas: absent means 1 and a pool decides. Read from a server-side dry
    # run, the object as it would be stored, before any operator (in a cluster, one runs) acts.
    _, dry, _ = await kubectl(
        cluster, "create", "--dry-run=server", "-o", "json", "-n", namespace,
        "-f", str(MANIFESTS / "samples" / "inferenceservice_qwen.yaml"),
    )  # fmt: skip
    assert "replicas" not in json.loads(dry)["spec"]
    _, out, _ = await kubectl(cluster, "apply", "-n", namespace, "-f", str(MANIFESTS / "samples"))
    assert "modelpool.inference.modelpool.dev/gpu-0 created" in out
    assert "modelrouter.inference.modelpool.dev/chat created" in out

    # Server-side defaults arrived; the typed objects read them.
    pool = ModelPool.from_dict(await admin.get(ModelPool.resource(), "gpu-0", namespace))
    assert pool.spec.member_names() == ["llama-3-8b", "qwen-2-7b"]
    assert (pool.spec.swap_policy, pool.spec.swap_budget) == ("sticky", "300s")
    isvc = InferenceService.from_dict(
        await admin.get(InferenceService.resource(), "qwen-2-7b", namespace)
    )
    assert (isvc.spec.port, isvc.spec.runtime) == (8080, "llamacpp")
    assert isvc.spec.image
    router = ModelRouter.from_dict(await admin.get(ModelRouter.resource(), "chat", namespace))
    assert router.spec.proxy is not None
    assert router.spec.proxy.replicas == 2
    # No schema default: an unset image runs the operator's own (controlplane/operator/proxyimage).
    assert router.spec.proxy.image is None

    # Installing again is a no-op, as an install must be: no object's spec changes.
    operator = await admin.get(DEPLOYMENTS, "modelpool-operator", "modelpool-system")
    await install(cluster)
    again = await admin.get(DEPLOYMENTS, "modelpool-operator", "modelpool-system")
    assert again["metadata"]["generation"] == operator["metadata"]["generation"]


@pytest.mark.local_only  # the story is told with no operator running; in a cluster one runs
async def test_kubectl_get_tells_the_story(
    cluster: TestCluster, admin: KubeClient, namespace: str
) -> None:
    await install(cluster)
    await kubectl(cluster, "apply", "-n", namespace, "-f", str(MANIFESTS / "samples"))
    status = {"status": {"phase": "Swapping", "residentMember": "llama-3-8b",
                         "residents": ["llama-3-8b"], "pendingMember": "qwen-2-7b",
                         "waiting": [{"member": "qwen-2-7b", "requests": 3,
                                      "since": "2026-12-01T10:00:00Z"}]}}  # fmt: skip
    await admin.patch(ModelPool.resource(), "gpu-0", status, namespace, subresource="status")

    _, out, _ = await kubectl(cluster, "get", "mpool", "-n", namespace)
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "POLICY", "RESIDENT", "PENDING", "WAITING", "PHASE", "AGE"]
    assert row.split()[:6] == [
        "gpu-0", "sticky", '["llama-3-8b"]', "qwen-2-7b", "qwen-2-7b", "Swapping"
    ]  # fmt: skip
    _, out, _ = await kubectl(cluster, "get", "mpool", "-n", namespace, "-o", "wide")
    header, row = out.strip().splitlines()
    assert header.split()[-2:] == ["MAX-WAIT", "MIN-RESIDENCY"]
    assert row.split()[-2:] == ["30s", "10s"], "the sample's scheduling defaults are shown"

    _, out, _ = await kubectl(cluster, "get", "modelpool-all", "-n", namespace, "-o", "name")
    assert sorted(out.split()) == [
        "inferenceservice.inference.modelpool.dev/llama-3-8b",
        "inferenceservice.inference.modelpool.dev/qwen-2-7b",
        "inferenceservice.inference.modelpool.dev/qwen-small",
        "modelpool.inference.modelpool.dev/gpu-0",
        "modelrouter.inference.modelpool.dev/chat",
    ]
    # REPLICAS is what the member's Deployment is given (its pool's decision), not its spec:
    # a member its pool has released shows 0 while its last replica still serves.
    draining = {"status": {"phase": "Draining", "desiredReplicas": 0, "readyReplicas": 1,
                           "pool": "gpu-0", "model": {"summary": "Ready"}}}  # fmt: skip
    await admin.patch(InferenceService.resource(), "qwen-2-7b", draining, namespace,
                      subresource="status")  # fmt: skip
    _, out, _ = await kubectl(cluster, "get", "isvc", "qwen-2-7b", "-n", namespace)
    header, row = out.strip().splitlines()
    assert header.split()[:7] == [
        "NAME", "MODEL", "REPLICAS", "POOL", "READY", "PHASE", "WEIGHTS"
    ]  # fmt: skip
    assert row.split()[2:7] == ["0", "gpu-0", "1", "Draining", "Ready"], row

    _, out, _ = await kubectl(cluster, "get", "isvc,mr", "-n", namespace)
    assert "MODEL" in out
    assert "DEFAULT" in out
    _, out, _ = await kubectl(cluster, "get", "all", "-n", namespace, "-o", "name")
    assert "modelpool" not in out, "our kinds stay out of `kubectl get all`"


async def test_operator_deployment_is_hardened(
    cluster: TestCluster, admin: KubeClient, namespace: str
) -> None:
    await install(cluster)
    deployment: dict[str, Any] = await admin.get(
        DEPLOYMENTS, "modelpool-operator", "modelpool-system"
    )
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == "modelpool-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["args"][0] == "operator"
    assert container["resources"]["requests"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"

    # The restricted Pod Security Standard, judged by the API server's own admission: a pod made
    # from the operator's template is admitted in a namespace that enforces it.
    await admin.patch(
        NAMESPACES,
        namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    # The ServiceAccount admission of a cluster wants the pod's account to exist.
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "modelpool-operator"},
    }
    await admin.create(SERVICE_ACCOUNTS, account, namespace)
    pod_spec = {**pod, "containers": [{**container, "image": "example.invalid/operator:test"}]}
    created = await admin.create(
        PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "op"}, "spec": pod_spec},
        namespace,
    )  # fmt: skip
    assert created["metadata"]["name"] == "op"
    root = {**pod_spec, "securityContext": {}, "containers": [{**container, "securityContext": {}}]}
    with pytest.raises(Forbidden, match="violates PodSecurity"):
        await admin.create(
            PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r"}, "spec": root},
            namespace,
        )  # fmt: skip
