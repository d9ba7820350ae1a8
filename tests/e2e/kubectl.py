"""kubectl for e2e tests: the binary built with the control plane, acting as the cluster admin."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import yaml

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.envtest import find_binaries
from controlplane.envtest.errors import EnvtestError
from tests.e2e.clusters import TestCluster

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"


async def kubectl(
    cluster: TestCluster, *args: str, check: bool = True, stdin: str = ""
) -> tuple[int, str, str]:
    """Run kubectl (the one built by hack/, else one on PATH); return code, stdout, stderr."""
    try:
        binary = find_binaries().kubectl
    except EnvtestError:
        binary = None
    found = str(binary) if binary is not None else shutil.which("kubectl")
    assert found is not None, "kubectl is built by hack/build-controlplane.sh"
    env = {**os.environ, "KUBECONFIG": str(cluster.admin_kubeconfig)}
    done = await anyio.run_process(
        [found, *args], input=stdin.encode(), env=env, check=False, cwd=REPO
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    if check:
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{out}\n{err}"
    return done.returncode, out, err


#: The image the manifests name for the operator; a kind cluster runs the one built here instead.
MANIFEST_IMAGE = "ghcr.io/modelpool/controlplane"


def with_image(rendered: str, image: str) -> str:
    """``rendered`` manifests with every container of :data:`MANIFEST_IMAGE` running ``image``
    (what kustomize's ``images:`` does in ``hack/deploy.sh``)."""
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    for doc in documents:
        template = (doc.get("spec") or {}).get("template") or {}
        for container in (template.get("spec") or {}).get("containers") or ():
            if str(container.get("image", "")).startswith(MANIFEST_IMAGE + ":"):
                container["image"] = image
    return yaml.safe_dump_all(documents)


#: The operator Deployment's name in the manifests.
OPERATOR_DEPLOYMENT = "modelpool-operator"
#: Operator replicas in the kind tier: a leader and a standby (the manifests ship 1).
KIND_OPERATOR_REPLICAS = 2


def with_operator_replicas(rendered: str, replicas: int) -> str:
    """``rendered`` manifests with the operator Deployment scaled to ``replicas``."""
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    for doc in documents:
        if doc.get("kind") == "Deployment" and doc["metadata"]["name"] == OPERATOR_DEPLOYMENT:
            doc["spec"]["replicas"] = replicas
    return yaml.safe_dump_all(documents)


async def install(cluster: TestCluster) -> None:
    """The documented install (`kubectl apply -k manifests/default`), CRDs established. On kind
    the operator Deployment runs the image built and loaded by the suite, so it really runs, with
    :data:`KIND_OPERATOR_REPLICAS` replicas (one leads, the other waits for the Lease). Every
    install on kind applies the same, so installing again never scales the operator down."""
    if cluster.image is None:
        await kubectl(cluster, "apply", "-k", str(MANIFESTS / "default"))
    else:
        _, rendered, _ = await kubectl(cluster, "kustomize", str(MANIFESTS / "default"))
        manifests = with_operator_replicas(
            with_image(rendered, cluster.image), KIND_OPERATOR_REPLICAS
        )
        await kubectl(
            cluster,
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            stdin=manifests,
        )
    crds = [
        f"crd/{kind.PLURAL}.inference.modelpool.dev"
        for kind in (InferenceService, ModelPool, ModelRouter)
    ]
    await kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", *crds)
    # kubectl's discovery cache may predate the CRDs (the apply itself filled it): refreshed, so
    # `kubectl get modelpool-all` knows the category at once, as `make deploy` does for users.
    await kubectl(cluster, "api-resources", "--categories=modelpool-all")
