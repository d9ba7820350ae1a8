"""What the kind tests do to the system running in the cluster: the operator's rollout, the
router's proxy Deployment, component logs."""

from __future__ import annotations

from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import install, kubectl
from tests.e2e.waiting import eventually

OPERATOR_LABEL = "app.kubernetes.io/name=modelpool-operator"
#: A pod start in kind (image present, no pull) takes seconds; rollouts get minutes.
ROLLOUT_TIMEOUT = 180.0


async def rolled_out_operator(cluster: TestCluster) -> str:
    """Install with the image built here, wait for the operator's rollout; its running pod."""
    assert cluster.image is not None, "the kind tier loads the project image into the cluster"
    await install(cluster)
    await kubectl(
        cluster,
        "-n",
        OPERATOR_NAMESPACE,
        "rollout",
        "status",
        "deployment/modelpool-operator",
        f"--timeout={int(ROLLOUT_TIMEOUT)}s",
    )
    _, name, _ = await kubectl(
        cluster,
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "pods",
        "-l",
        OPERATOR_LABEL,
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    )
    return name


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
