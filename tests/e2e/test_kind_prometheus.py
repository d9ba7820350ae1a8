"""A real Prometheus scrapes the operator, a router-proxy and a member through the monitors of
manifests/monitoring, and a swap shows in ``modelpool_swaps_total``.

Everything runs as a user runs it: prometheus-operator v0.94.1 and its config reloader, with the
CRDs of the same module, run a ``Prometheus`` (v3.16.0) that selects monitors and rules by one
label, in the operator's namespace only; the monitors get that label through a kustomize overlay
(manifests/monitoring/kustomization.yaml says to). All three programs are built here from their Go
modules (``make monitoring-images``). No scrape configuration is written by hand: the targets are
what prometheus-operator makes of the monitors, so a selector that selects nothing, a port name
no container has, a relabeling that loses the ``job`` the alerts use, or a NetworkPolicy that
refuses the scraper fails here. The members' NetworkPolicies admit the Prometheus' namespace
because the operator is run with ``--member-network-policy-allow-namespace`` naming it (the
chart's ``networkPolicy.allowNamespaces``); the operator's own pods admit their metrics port from
anywhere (manifests/network-policy). kube-router enforces both.

What the test installs is removed at its end (the Prometheus' namespace, its ClusterRoles, the
labelled monitors, the CRDs it added) and the operator is put back as the kind tier installs it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import pytest
import yaml

from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import NETWORK_POLICIES
from tests.e2e.clusters import TestCluster
from tests.e2e.incluster import (
    ROLLOUT_TIMEOUT,
    rolled_out_operator,
    wait_operator_available,
)
from tests.e2e.kubectl import (
    KIND_OPERATOR_REPLICAS,
    MANIFESTS,
    OPERATOR_DEPLOYMENT,
    kubectl,
    with_image,
    with_operator_replicas,
)
from tests.e2e.prometheusstack import (
    CRDS,
    PROMETHEUS_NAME,
    Stack,
    api_path,
    crd_files,
    labelled_monitors,
    operator_objects,
    prometheus_objects,
    vector,
)
from tests.e2e.test_kind_cluster import (
    ask_in_cluster,
    chat_url,
    pool_behind_router,
    wait_resident,
)
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

#: The Prometheus' namespace (a fixed one: the members' NetworkPolicies name it).
STACK_NAMESPACE = "modelpool-prometheus-e2e"
#: The scrape pools prometheus-operator makes of the three monitors, and no other.
SCRAPE_POOLS = {
    "serviceMonitor/modelpool-system/modelpool-operator/0",
    "podMonitor/modelpool-system/modelpool-router-proxy/0",
    "podMonitor/modelpool-system/modelpool-members/0",
}
#: The monitors' scrape interval in this test: their own 30 s, replaced by the test's overlay as a
#: user's overlay would, so that a series is there within seconds.
SCRAPE_INTERVAL = "5s"
#: How long a scrape pool or a series may take to appear (several intervals, a slow moment).
SCRAPED_TIMEOUT = 150.0
#: The operator's two rollouts (admitting the Prometheus, then put back), a pool, a swap and the
#: monitors' scrapes can take longer than the suite's 300 s default allows in a slow moment.
TEST_TIMEOUT = 600


def _write_overlay(stack: Stack, overlay: Path) -> Path:
    """The kustomization labelling manifests/monitoring for ``stack``'s Prometheus, in
    ``overlay``. kustomize takes a relative path to a base outside it, never an absolute one."""
    overlay.mkdir()
    base = os.path.relpath(MANIFESTS / "monitoring", overlay)
    (overlay / "kustomization.yaml").write_text(labelled_monitors(stack, base, SCRAPE_INTERVAL))
    return overlay


async def _apply(cluster: TestCluster, documents: list[dict[str, Any]] | str) -> None:
    text = documents if isinstance(documents, str) else yaml.safe_dump_all(documents)
    await kubectl(
        cluster, "apply", "--server-side", "--force-conflicts", "--field-manager=e2e-prometheus",
        "-f", "-", stdin=text,
    )  # fmt: skip


async def _run_operator_admitting(cluster: TestCluster, namespace: str) -> None:
    """The kind tier's operator install, its container given
    ``--member-network-policy-allow-namespace=<namespace>``; rolled out."""
    assert cluster.image is not None
    _, rendered, _ = await kubectl(cluster, "kustomize", str(MANIFESTS / "default"))
    documents = [
        doc
        for doc in yaml.safe_load_all(
            with_operator_replicas(with_image(rendered, cluster.image), KIND_OPERATOR_REPLICAS)
        )
        if doc
    ]
    (deployment,) = [doc for doc in documents if doc["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["args"] = [*container["args"], f"--member-network-policy-allow-namespace={namespace}"]
    await kubectl(
        cluster, "apply", "--server-side", "--force-conflicts", "-f", "-",
        stdin=yaml.safe_dump_all(documents),
    )  # fmt: skip
    await kubectl(
        cluster, "-n", OPERATOR_NAMESPACE, "rollout", "status",
        f"deployment/{OPERATOR_DEPLOYMENT}", f"--timeout={int(ROLLOUT_TIMEOUT)}s",
    )  # fmt: skip
    async with KubeClient(cluster.admin_config()) as admin:
        await wait_operator_available(admin)


async def _query(
    cluster: TestCluster, stack: Stack, promql: str
) -> list[tuple[dict[str, str], float]]:
    _, out, _ = await kubectl(
        cluster, "get", "--raw", api_path(stack, f"/api/v1/query?query={quote(promql)}")
    )
    return vector(json.loads(out))


async def _api(cluster: TestCluster, stack: Stack, path: str) -> dict[str, Any]:
    _, out, _ = await kubectl(cluster, "get", "--raw", api_path(stack, path))
    answer = json.loads(out)
    assert answer.get("status") == "success", answer
    return dict(answer["data"])


async def _diagnose(cluster: TestCluster, stack: Stack) -> None:
    """Print (pytest shows it for a failed test) what the Prometheus stack said."""
    for args in (
        ("-n", stack.namespace, "get", "all,prometheus", "-o", "wide"),
        ("-n", stack.namespace, "logs", "deployment/prometheus-operator", "--tail=60"),
        ("-n", stack.namespace, "logs", f"prometheus-{PROMETHEUS_NAME}-0", "--all-containers",
         "--tail=60"),
        ("-n", stack.namespace, "get", "prometheus", PROMETHEUS_NAME, "-o", "jsonpath={.status}"),
    ):  # fmt: skip
        _, out, err = await kubectl(cluster, *args, check=False)
        print(f"--- kubectl {' '.join(args)}\n{out}{err}")


async def _remove(cluster: TestCluster, stack: Stack, overlay: Path, added_crds: list[str]) -> None:
    """Everything the test installed, the operator put back as the kind tier installs it."""
    await kubectl(cluster, "delete", "-k", str(overlay), "--ignore-not-found", check=False)
    await kubectl(
        cluster, "-n", stack.namespace, "delete", "prometheus", PROMETHEUS_NAME,
        "--ignore-not-found", "--timeout=60s", check=False,
    )  # fmt: skip
    await kubectl(
        cluster,
        "delete",
        "namespace",
        stack.namespace,
        "--ignore-not-found",
        "--wait=false",
        check=False,
    )
    for account in (stack.operator_account, stack.prometheus_account):
        name = stack.cluster_name(account)
        await kubectl(
            cluster, "delete", f"clusterrolebinding/{name}", f"clusterrole/{name}",
            "--ignore-not-found", check=False,
        )  # fmt: skip
    if added_crds:
        await kubectl(
            cluster, "delete", *added_crds, "--ignore-not-found", "--timeout=120s", check=False
        )
    await rolled_out_operator(cluster)


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_a_real_prometheus_scrapes_through_the_monitors_and_sees_a_swap(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str, tmp_path: Path
) -> None:
    assert cluster.monitoring is not None, "the kind tier loads the monitoring images"
    stack = Stack(STACK_NAMESPACE, cluster.monitoring)
    overlay = _write_overlay(stack, tmp_path / "monitors")
    crd_names = [f"crd/{plural}.monitoring.coreos.com" for plural in CRDS]
    # CRDs that were there before stay after (their version may change, to the operator's).
    _, present, _ = await kubectl(cluster, "get", *crd_names, "-o", "name", check=False)
    present_names = {
        line.replace("customresourcedefinition.apiextensions.k8s.io/", "crd/")
        for line in present.split()
    }
    added_crds = [name for name in crd_names if name not in present_names]
    try:
        # Server side: the CRDs are too large for client-side apply's last-applied annotation.
        files = [arg for path in crd_files(cluster.monitoring.crds) for arg in ("-f", path)]
        await kubectl(cluster, "apply", "--server-side", "--force-conflicts", *files)
        await kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", *crd_names)
        # The Prometheus starts while the operator rolls out and the pool comes up.
        await _apply(cluster, operator_objects(stack))
        _, monitors, _ = await kubectl(cluster, "kustomize", str(overlay))
        await _apply(cluster, monitors)
        await _apply(cluster, prometheus_objects(stack))
        await _run_operator_admitting(cluster, stack.namespace)

        await pool_behind_router(admin, cluster, namespace, proxies=2)
        policy = await admin.get(NETWORK_POLICIES, "b", namespace)
        peers = policy["spec"]["ingress"][0]["from"]
        assert {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": stack.namespace}}
        } in peers, peers
        cold = await ask_in_cluster(cluster, namespace, "cold", chat_url(namespace), "b")
        assert cold["status"] == 200, cold
        await wait_resident(admin, namespace, "b")

        # The targets are the monitors', and only theirs.
        async def discovered() -> set[str] | None:
            data = await _api(cluster, stack, "/api/v1/targets?state=active")
            pools = {target["scrapePool"] for target in data["activeTargets"]}
            return pools if pools == SCRAPE_POOLS else None

        await eventually(
            discovered,
            timeout=SCRAPED_TIMEOUT,
            interval=2.0,
            what=f"the scrape pools {sorted(SCRAPE_POOLS)}",
        )

        # up == 1: both operator replicas, both proxies of this router, the resident member.
        async def all_up() -> bool:
            up = await _query(cluster, stack, "up")
            operator = [value for labels, value in up if labels.get("job") == "modelpool-operator"]
            proxies = [
                value
                for labels, value in up
                if labels.get("job") == "modelpool-router-proxy"
                and labels.get("namespace") == namespace
            ]
            members = [
                (labels.get("inferenceservice"), value)
                for labels, value in up
                if labels.get("job") == "modelpool-member" and labels.get("namespace") == namespace
            ]
            seen = f"operator {operator}, proxies {proxies}, members {members}"
            assert operator == [1.0] * KIND_OPERATOR_REPLICAS, seen
            assert proxies == [1.0, 1.0], seen
            assert members == [("b", 1.0)], seen
            return True

        await eventually(
            all_up,
            timeout=SCRAPED_TIMEOUT,
            interval=2.0,
            what="up == 1 for the operator, the proxies and member b",
        )

        # The swap, counted by the proxy that drove it, as Prometheus stored it: a to b.
        swaps = (
            f'sum by (pool, from, to) (modelpool_swaps_total{{namespace="{namespace}",pool="gpu"}})'
        )

        async def swapped() -> bool:
            found = {
                (labels["from"], labels["to"]): value
                for labels, value in await _query(cluster, stack, swaps)
            }
            assert found.get(("a", "b"), 0) >= 1, f"{swaps}: {found}"
            return True

        await eventually(swapped, timeout=SCRAPED_TIMEOUT, interval=2.0, what=swaps)
        # The operator's series keep the pool's namespace (the ServiceMonitor's honorLabels).
        resident = await _query(
            cluster,
            stack,
            f'modelpool_pool_resident_member{{namespace="{namespace}",pool="gpu",member="b"}} == 1',
        )
        assert len(resident) == 1, resident
        # The alert rules, selected by the same label, are loaded.
        rules = await _api(cluster, stack, "/api/v1/rules?type=alert")
        alerts = {rule["name"] for group in rules["groups"] for rule in group["rules"]}
        assert "ModelPoolOperatorDown" in alerts, alerts
    except BaseException:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await _diagnose(cluster, stack)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _remove(cluster, stack, overlay, added_crds)
