"""A kind cluster for the benchmarks, made the way the e2e suite's kind tier makes its own
(``tests/e2e/clusters.py``): the node image, the project image and the member images built by
``make kind-prereqs`` (found here, never built: ``MODELPOOL_NO_BUILD``), the cluster configuration
``hack/kind-up.sh --print-config`` gives, kube-router enforcing NetworkPolicies, and the operator
installed from ``manifests/default`` with the project image (as ``hack/deploy.sh`` does).

Kept apart from the test helpers on purpose (a benchmark does not import ``tests/``); what both
do is the same short list of ``hack/`` scripts and ``kind``/``kubectl`` calls.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

REPO: Final = Path(__file__).resolve().parents[1]
#: The scripts only find what ``make kind-prereqs`` built; a missing part is an error naming it.
FIND_ONLY: Final = {"MODELPOOL_NO_BUILD": "1"}
#: The image the manifests name for the operator, replaced by the one built here.
MANIFEST_IMAGE: Final = "ghcr.io/modelpool/controlplane"
OPERATOR_NAMESPACE: Final = "modelpool-system"
OPERATOR_DEPLOYMENT: Final = "modelpool-operator"
NETWORK_POLICY_MANIFEST: Final = REPO / "hack" / "kind-network-policies.yaml"


class KindError(SystemExit):
    """A step of bringing the cluster up failed; the message names it and its output."""


def hack_lines(script: str, *args: str) -> list[str]:
    """Run ``hack/SCRIPT`` (find-only) and return its standard output's lines."""
    done = subprocess.run(
        [str(REPO / "hack" / script), *args],
        capture_output=True, text=True, check=False, cwd=REPO, env={**os.environ, **FIND_ONLY},
    )  # fmt: skip
    if done.returncode != 0:
        raise KindError(f"hack/{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()


@dataclass(frozen=True)
class Builds:
    """What ``make kind-prereqs`` built: kind, kubectl and the images."""

    kind: Path
    kubectl: Path
    image: str
    llama_image: str
    network_policies_image: str

    @classmethod
    def find(cls) -> Builds:
        hack_lines("docker-engine.sh")
        tools = Path(hack_lines("build-kind-tools.sh")[-1])
        image, _sim, llama = hack_lines("build-image.sh", "--all")[-3:]
        return cls(
            kind=tools / "kind",
            kubectl=Path(hack_lines("build-controlplane.sh")[-1]) / "kubectl",
            image=image,
            llama_image=llama,
            network_policies_image=hack_lines("build-network-policies.sh")[-1],
        )


@dataclass(frozen=True)
class Cluster:
    """A running kind cluster: its name, an admin kubeconfig, and a kubectl for it."""

    name: str
    kubeconfig: Path
    builds: Builds

    def argv(self, *args: str) -> list[str]:
        return [str(self.builds.kubectl), "--kubeconfig", str(self.kubeconfig), *args]

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
        done = subprocess.run(
            self.argv(*args), input=stdin, capture_output=True, text=True, check=False,
            timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            raise KindError(f"kubectl {' '.join(args)[:200]}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def apply(self, objects: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                     stdin=yaml.safe_dump_all(objects))  # fmt: skip

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(
            self.kubectl("get", "-n", namespace, kind, name, "-o", "yaml")
        )
        return found

    def load(self, image: str) -> None:
        _run([str(self.builds.kind), "load", "docker-image", image, "--name", self.name])


def _run(argv: list[str], timeout: float = 600) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if done.returncode != 0:
        raise KindError(f"{' '.join(argv)[:200]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _exists(builds: Builds, name: str) -> bool:
    return name in _run([str(builds.kind), "get", "clusters"]).split()


@contextlib.contextmanager
def kind_cluster(name: str, *, create: bool, keep: bool) -> Iterator[Cluster]:
    """The cluster ``name`` with the images loaded, NetworkPolicies enforced and the operator
    rolled out. With ``create``, a new cluster of that name (one left by an earlier run is
    deleted first), deleted at the end unless ``keep``; without, an existing one, left as is."""
    builds = Builds.find()
    with tempfile.TemporaryDirectory(prefix="bench-kind-") as folder:
        kubeconfig = Path(folder) / "kubeconfig"
        kind = str(builds.kind)
        if create:
            _run([kind, "delete", "cluster", "--name", name])
            config = Path(folder) / "kind-config.yaml"
            config.write_text("\n".join(hack_lines("kind-up.sh", "--print-config")) + "\n")
            _run([kind, "create", "cluster", "--name", name, "--config", str(config),
                  "--kubeconfig", str(kubeconfig), "--wait", "180s"])  # fmt: skip
        elif not _exists(builds, name):
            raise KindError(f"no kind cluster named {name} (leave out --cluster to create one)")
        else:
            kubeconfig.write_text(_run([kind, "get", "kubeconfig", "--name", name]))
        cluster = Cluster(name, kubeconfig, builds)
        try:
            for image in (builds.image, builds.llama_image, builds.network_policies_image):
                cluster.load(image)
            manifest = NETWORK_POLICY_MANIFEST.read_text().replace(
                "image: IMAGE", f"image: {builds.network_policies_image}"
            )
            cluster.kubectl("apply", "-f", "-", stdin=manifest)
            install_operator(cluster)
            yield cluster
        finally:
            if create and not keep:
                _run([kind, "delete", "cluster", "--name", name])


def install_operator(cluster: Cluster) -> None:
    """``manifests/default`` with the project image (as ``hack/deploy.sh`` applies it: the
    operator's own flags, one replica), rolled out and Available."""
    rendered = cluster.kubectl("kustomize", str(REPO / "manifests" / "default"))
    documents = [doc for doc in yaml.safe_load_all(rendered) if doc]
    for doc in documents:
        template = (doc.get("spec") or {}).get("template") or {}
        for container in (template.get("spec") or {}).get("containers") or ():
            if str(container.get("image", "")).startswith(MANIFEST_IMAGE + ":"):
                container["image"] = cluster.builds.image
    cluster.apply(documents)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/modelpools.inference.modelpool.dev")  # fmt: skip
    cluster.kubectl("-n", OPERATOR_NAMESPACE, "rollout", "status",
                    f"deployment/{OPERATOR_DEPLOYMENT}", "--timeout=300s")  # fmt: skip
    cluster.kubectl("-n", OPERATOR_NAMESPACE, "wait", "--for=condition=Available",
                    "--timeout=120s", f"deployment/{OPERATOR_DEPLOYMENT}")  # fmt: skip
