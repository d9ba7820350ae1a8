"""Helm for e2e tests: the binary built by ``hack/build-helm.sh``, acting as the cluster admin."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import yaml

from controlplane.envtest.helm import find_helm
from tests.e2e.clusters import TestCluster
from tests.e2e.kubectl import REPO

CHART = REPO / "charts" / "modelpool"
#: The values files the chart is tested under (chart-testing's ``ci/`` convention).
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
#: Labels Helm's templates add that the kustomize manifests do not carry.
HELM_ONLY_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")


async def helm(
    *args: str, cluster: TestCluster | None = None, check: bool = True
) -> tuple[int, str, str]:
    """Run helm (against ``cluster`` when given); return code, stdout, stderr."""
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/modelpool-helm/cache"}
    env["HELM_CONFIG_HOME"] = "/tmp/modelpool-helm/config"
    env["HELM_DATA_HOME"] = "/tmp/modelpool-helm/data"
    if cluster is not None:
        env["KUBECONFIG"] = str(cluster.admin_kubeconfig)
    done = await anyio.run_process([str(find_helm()), *args], env=env, check=False, cwd=REPO)
    out, err = done.stdout.decode(), done.stderr.decode()
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{out}\n{err}"
    return done.returncode, out, err


async def template(namespace: str, *values: Path | str, sets: tuple[str, ...] = ()) -> str:
    """``helm template`` of the chart into ``namespace`` with ``values`` files and ``--set``s."""
    args = ["template", "modelpool", str(CHART), "--namespace", namespace]
    for item in values:
        args += ["--values", str(item)]
    for item in sets:
        args += ["--set", item]
    _, out, _ = await helm(*args)
    return out


def documents(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]
