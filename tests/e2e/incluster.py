"""What the kind tests do to the system running in the cluster: the operator's rollout (two
replicas, one leading), the router's proxy Deployment, component logs."""

from __future__ import annotations

from typing import Any

from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.operator.settings import LEADER_ELECTION_ID
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, LEASES, PODS
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import KIND_OPERATOR_REPLICAS, OPERATOR_DEPLOYMENT, install, kubectl
from tests.e2e.waiting import eventually

OPERATOR_LABEL = "app.kubernetes.io/name=modelpool-operator"
#: The operator's container in its pod (manifests/operator/deployment.yaml).
OPERATOR_CONTAINER = "operator"
#: The operator's leader-election Lease, in :data:`OPERATOR_NAMESPACE`. Its ``holderIdentity`` is
#: the leader's pod name: the operator's ``--identity`` defaults to ``$POD_NAME``, which the
#: Deployment sets from ``metadata.name``.
OPERATOR_LEASE = LEADER_ELECTION_ID
#: A pod start in kind (image present, no pull) takes seconds; rollouts get minutes.
ROLLOUT_TIMEOUT = 180.0


async def rolled_out_operator(cluster: TestCluster) -> str:
    """Install with the image built here (:data:`KIND_OPERATOR_REPLICAS` operator replicas),
    wait for the rollout and every replica Available; the name of the leader's pod."""
    assert cluster.image is not None, "the kind tier loads the project image into the cluster"
    await install(cluster)
    await kubectl(
        cluster,
        "-n",
        OPERATOR_NAMESPACE,
        "rollout",
        "status",
        f"deployment/{OPERATOR_DEPLOYMENT}",
        f"--timeout={int(ROLLOUT_TIMEOUT)}s",
    )
    async with KubeClient(cluster.admin_config()) as admin:
        await wait_operator_available(admin)
        return await leader_pod(admin)


async def operator_pods(admin: KubeClient) -> list[str]:
    """The operator's pods that are running and not being deleted."""
    pods = await admin.list(PODS, OPERATOR_NAMESPACE, label_selector=OPERATOR_LABEL)
    return [
        p["metadata"]["name"]
        for p in pods.items
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") == "Running"
    ]


async def operator_lease_holder(admin: KubeClient) -> str:
    """``spec.holderIdentity`` of the operator's Lease; empty when nobody holds it."""
    try:
        lease = await admin.get(LEASES, OPERATOR_LEASE, OPERATOR_NAMESPACE)
    except NotFound:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def leader_pod(admin: KubeClient, timeout: float = ROLLOUT_TIMEOUT) -> str:
    """The operator pod that leads: the Lease's holder, once that names a running pod (right
    after a rollout, or a leader's death, the Lease may still name a pod that is gone)."""

    async def found() -> str | None:
        holder = await operator_lease_holder(admin)
        return holder if holder and holder in await operator_pods(admin) else None

    return await eventually(found, timeout=timeout, what="an operator pod holding the Lease")


async def wait_operator_available(
    admin: KubeClient, replicas: int = KIND_OPERATOR_REPLICAS
) -> None:
    """Until the operator Deployment has ``replicas`` Available, and as many running pods that
    are not being deleted."""

    async def up() -> bool:
        deployment = await admin.get(DEPLOYMENTS, OPERATOR_DEPLOYMENT, OPERATOR_NAMESPACE)
        available = int((deployment.get("status") or {}).get("availableReplicas") or 0)
        return available == replicas and len(await operator_pods(admin)) == replicas

    await eventually(up, timeout=ROLLOUT_TIMEOUT, what=f"{replicas} operator replicas available")


async def operator_container(admin: KubeClient, pod: str) -> dict[str, Any]:
    """The status of the operator container of ``pod`` (``containerID``, ``restartCount``,
    ``state``, ``lastState``); empty while the kubelet has reported none."""
    found = await admin.get(PODS, pod, OPERATOR_NAMESPACE)
    for status in (found.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == OPERATOR_CONTAINER:
            return dict(status)
    return {}


async def previous_operator_log(cluster: TestCluster, pod: str) -> list[str]:
    """The log of the operator container of ``pod`` before its last restart, one line each,
    every line prefixed with the time the node's runtime read it (``--timestamps``, RFC 3339)."""
    _, out, _ = await kubectl(
        cluster, "-n", OPERATOR_NAMESPACE, "logs", pod, "-c", OPERATOR_CONTAINER,
        "--previous", "--timestamps", "--tail=-1",
    )  # fmt: skip
    return out.splitlines()


async def available_proxies(admin: KubeClient, namespace: str, name: str) -> int:
    deployment = await admin.get(DEPLOYMENTS, f"{name}-proxy", namespace)
    return int((deployment.get("status") or {}).get("availableReplicas") or 0)


async def wait_available(admin: KubeClient, namespace: str, name: str, replicas: int) -> None:
    async def up() -> bool:
        try:
            return await available_proxies(admin, namespace, name) == replicas
        except NotFound:
            return False

    await eventually(up, timeout=ROLLOUT_TIMEOUT, what=f"{replicas} proxies of {name} available")


async def logs(cluster: TestCluster, namespace: str, selector: str) -> str:
    _, out, _ = await kubectl(
        cluster, "-n", namespace, "logs", "-l", selector, "--all-containers", "--tail=-1"
    )
    return out
