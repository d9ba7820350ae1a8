"""The chart on a real cluster: `helm install` takes over the operator the suite installed with
kustomize, a swap runs, `helm upgrade` with changed values rolls the operator in the middle of a
swap, and `helm uninstall` removes the operator but keeps the CRDs and every object of theirs;
the pool invariant monitor watches the member pods throughout.

Why a take-over and not a second install: an operator is a cluster singleton (its CRDs, its
ClusterRole), so a user moving from `kubectl apply -k` to Helm does exactly this. The kustomize
install is put back at the end, as the rest of the kind tier expects it.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import DEPLOYMENTS, PODS
from tests.e2e.clusters import TestCluster
from tests.e2e.helm import CHART, helm
from tests.e2e.incluster import (
    ROLLOUT_TIMEOUT,
    leader_pod,
    rolled_out_operator,
)
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kindstreams import start_stream, stream_end, whole
from tests.e2e.kubectl import KIND_OPERATOR_REPLICAS, OPERATOR_DEPLOYMENT, kubectl
from tests.e2e.test_kind_cluster import (
    ask_in_cluster,
    chat_url,
    pool_behind_router,
    wait_resident,
)
from tests.e2e.test_kind_day2 import member_pods, update_pending
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

RELEASE = "modelpool"
#: The target member loads this long, so the upgrade lands while the swap is running.
SLOW_LOAD_SECONDS = 25
#: Each simulated token takes this long: the stream across the image upgrade lasts about 30 s.
TOKEN_SECONDS = 0.05
STREAM_TOKENS = 600
#: How long after the new leader took over nothing may change in a member's pod.
UPGRADE_SETTLE_SECONDS = 5.0


async def another_tag(cluster: TestCluster) -> str:
    """A second tag of the operator's image in the node (the same bytes under a new name, as a
    release would be), for ``helm upgrade`` to move to."""
    assert cluster.image is not None
    assert cluster.kind is not None
    image = f"{cluster.image}-upgrade"
    node = f"{cluster.kind.name}-control-plane"
    await anyio.run_process(
        ["docker", "exec", node, "ctr", "-n", "k8s.io", "images", "tag", "--force",
         cluster.image, image],
    )  # fmt: skip
    return image


def _image_values(cluster: TestCluster) -> list[str]:
    assert cluster.image is not None
    repository, _, tag = cluster.image.rpartition(":")
    return [
        f"image.repository={repository}",
        f"image.tag={tag}",
        f"replicaCount={KIND_OPERATOR_REPLICAS}",
    ]


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


async def _pool_status(admin: KubeClient, namespace: str) -> dict[str, Any]:
    found = await admin.get(ModelPool.resource(), "gpu", namespace)
    return dict(found.get("status") or {})


async def test_helm_installs_swaps_upgrades_mid_swap_and_uninstalls_keeping_crds(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    timeout = f"{int(ROLLOUT_TIMEOUT)}s"
    monitor = PoolInvariantMonitor(cluster.admin_config(), namespace, sample_processes=False)
    monitor.start()
    try:
        await helm(
            "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
            "--take-ownership", "--force-conflicts", "--wait", "--timeout", timeout,
            *_sets(_image_values(cluster)), cluster=cluster,
        )  # fmt: skip
        deployment = await admin.get(DEPLOYMENTS, OPERATOR_DEPLOYMENT, OPERATOR_NAMESPACE)
        labels = deployment["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert deployment["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE

        await pool_behind_router(
            admin, cluster, namespace, proxies=2, swap_budget="240s",
            b_load_seconds=SLOW_LOAD_SECONDS, token_seconds=TOKEN_SECONDS,
        )  # fmt: skip
        url = chat_url(namespace)
        warm = await ask_in_cluster(cluster, namespace, "warm", url, "a")
        assert warm["status"] == 200, warm

        answers: dict[str, Any] = {}

        async def ask_cold() -> None:
            answers["cold"] = await ask_in_cluster(cluster, namespace, "cold", url, "b")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ask_cold)

            async def swapping() -> bool:
                return (await _pool_status(admin, namespace)).get("pendingMember") == "b"

            await eventually(swapping, timeout=ROLLOUT_TIMEOUT, what="the swap to b started")
            # Mid-swap: new values roll both operator replicas (a leader hand-over included).
            # kubectl's server-side apply still co-owns the fields it set before the take-over,
            # so the upgrade that changes one of them forces the conflict, as a user must.
            await helm(
                "upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
                "--reuse-values", "--set", "logFormat=json", "--force-conflicts",
                "--wait", "--timeout", timeout,
                cluster=cluster,
            )  # fmt: skip
            rolled = await admin.get(DEPLOYMENTS, OPERATOR_DEPLOYMENT, OPERATOR_NAMESPACE)
            args = rolled["spec"]["template"]["spec"]["containers"][0]["args"]
            assert "--log-format=json" in args
        cold = answers["cold"]
        assert cold["status"] == 200, cold
        assert cold["body"]["model"] == "b"
        await wait_resident(admin, namespace, "b")
        assert [(c.old, c.new) for c in monitor.residency_changes("gpu")][-1] == ("a", "b")
        monitor.settle()
        monitor.check()

        # An upgrade to another operator image while b streams: the stream ends whole, and no
        # member's pod changes (nothing in it depends on the operator's image; issue 39).
        (resident,) = await member_pods(admin, namespace, "b")
        image = await another_tag(cluster)
        await start_stream(cluster, namespace, "long", url, "b", STREAM_TOKENS)
        await helm(
            "upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
            "--reuse-values", "--set", f"image.tag={image.rpartition(':')[2]}",
            "--force-conflicts", "--wait", "--timeout", timeout, cluster=cluster,
        )  # fmt: skip
        rolled = await admin.get(DEPLOYMENTS, OPERATOR_DEPLOYMENT, OPERATOR_NAMESPACE)
        assert rolled["spec"]["template"]["spec"]["containers"][0]["image"] == image
        end = await stream_end(cluster, namespace, "long")
        assert whole(end, STREAM_TOKENS), end
        # (The pod's spec: its status names the image by whichever tag the node found first.)
        leader = await admin.get(PODS, await leader_pod(admin), OPERATOR_NAMESPACE)
        assert leader["spec"]["containers"][0]["image"] == image
        await anyio.sleep(UPGRADE_SETTLE_SECONDS)  # the new leader has reconciled every member
        after = await member_pods(admin, namespace, "b")
        assert [p["metadata"]["uid"] for p in after] == [resident["metadata"]["uid"]], after
        assert await update_pending(admin, namespace, "b") is None
        monitor.check()

        await helm(
            "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait",
            "--timeout", timeout, cluster=cluster,
        )  # fmt: skip
        with pytest.raises(NotFound):
            await admin.get(DEPLOYMENTS, OPERATOR_DEPLOYMENT, OPERATOR_NAMESPACE)
        # The CRDs stay (helm.sh/resource-policy: keep), and with them every user's object.
        for kind in (InferenceService, ModelPool, ModelRouter):
            _, out, _ = await kubectl(
                cluster, "get", "crd", f"{kind.PLURAL}.inference.modelpool.dev", "-o",
                "jsonpath={.metadata.annotations.helm\\.sh/resource-policy}",
            )  # fmt: skip
            assert out == "keep"
        assert await admin.get(ModelPool.resource(), "gpu", namespace)
    finally:
        monitor.stop()
        # The rest of the kind tier runs on the kustomize install.
        await helm(
            "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, cluster=cluster, check=False
        )
        await rolled_out_operator(cluster)
