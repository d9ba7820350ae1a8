"""The clusters the e2e suite can run against: local (built here), kind, or any kubeconfig.

Every mode yields a :class:`TestCluster`; tests use only what it offers, so the same suite runs
unchanged on all three. The kind cluster is made from the node image ``hack/`` builds (no
registry), through pytest-kind's :class:`~pytest_kind.KindCluster`, with the configuration
``hack/kind-up.sh --print-config`` gives, and the project image is loaded into it; kube-router's
network policy controller (``hack/kind-network-policies.yaml``) enforces NetworkPolicies there,
which the node's bridge CNI does not. The images of a real Prometheus, prometheus-operator and its
config reloader (``hack/build-monitoring-images.sh``) are loaded too, for the test that runs them.

Nothing is built here: ``make test-kind`` builds kind's programs and every image as Make
prerequisites (``make kind-prereqs``) before pytest starts, and the suite runs the same scripts
with ``MODELPOOL_NO_BUILD`` set, so they only find what was built (a build inside a session
fixture would run under the per-test timeout) and name what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pytest_kind import KindCluster

from controlplane.envtest import ControlPlane
from controlplane.runtime.config import ClientConfig

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class MonitoringImages:
    """The kind tier's real Prometheus, built from Go modules: its three images and the folder of
    prometheus-operator's CRDs of the same release (``hack/build-monitoring-images.sh`` prints
    them in this order)."""

    prometheus: str
    operator: str
    config_reloader: str
    crds: str

    def images(self) -> tuple[str, str, str]:
        return (self.prometheus, self.operator, self.config_reloader)


@dataclass
class TestCluster:
    """One API server the suite talks to, with an admin identity."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    mode: str
    admin_kubeconfig: Path
    local: ControlPlane | None = None
    #: kind only: the cluster, the project image loaded into it (operator, proxy), and the member
    #: images: the simulator (``controlplane llama-sim``, taking a member's llama-server arguments)
    #: and the real llama-server with two tiny models (``/models/tiny-1.gguf``, ``tiny-2.gguf``).
    kind: KindCluster | None = None
    image: str | None = None
    sim_image: str | None = None
    llama_image: str | None = None
    #: kind only: the images of the real Prometheus the monitors are tested with.
    monitoring: MonitoringImages | None = None

    def admin_config(self) -> ClientConfig:
        return ClientConfig.from_kubeconfig(self.admin_kubeconfig)

    def logs(self) -> dict[str, Path]:
        return self.local.logs() if self.local is not None else {}

    def diagnostics(self) -> dict[str, str]:
        """kind only: every pod's log (last lines) and the cluster's events, for a failed test."""
        if self.kind is None:
            return {}
        binary = str(self.kind.kubectl_path)

        def kubectl(*args: str) -> str:
            done = subprocess.run(
                [binary, "--kubeconfig", str(self.admin_kubeconfig), *args],
                capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
            return str(done.stdout) + str(done.stderr)

        found: dict[str, str] = {
            "events": kubectl("get", "events", "-A", "--sort-by=.lastTimestamp")
        }
        pods = kubectl(
            "get",
            "pods",
            "-A",
            "--no-headers",
            "-o",
            "custom-columns=NS:.metadata.namespace,NAME:.metadata.name",
        )
        for line in pods.splitlines():
            namespace, _, name = line.partition(" ")
            name = name.strip()
            if namespace and name and namespace != "kube-system":
                found[f"pod {namespace}/{name}"] = kubectl(
                    "-n", namespace, "logs", name, "--all-containers", "--tail=40"
                )
        return found


#: ConfigMaps bypass the API server's watch cache, so a test can force ``410 Gone`` on a watch by
#: compacting etcd (a cached resource would serve old versions from memory for a while).
UNCACHED_WATCH_ARGS = ("--watch-cache-sizes=configmaps#0",)


def start_local() -> TestCluster:
    """etcd + kube-apiserver + kube-controller-manager built from Go modules (``hack/``)."""
    plane = ControlPlane(with_controller_manager=True, extra_apiserver_args=UNCACHED_WATCH_ARGS)
    plane.start()
    return TestCluster("local", plane.admin_kubeconfig, plane)


class ClusterStartError(Exception):
    """A step of bringing the kind tier up failed; the message names it and its output."""


#: The scripts only find what ``make kind-prereqs`` built; a missing part is an error naming it.
FIND_ONLY = {"MODELPOOL_NO_BUILD": "1"}


def hack(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``hack/SCRIPT`` and return the last line of its output (what each script prints)."""
    lines = hack_lines(script, *args, env=env)
    return lines[-1] if lines else ""


def hack_lines(script: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """Run ``hack/SCRIPT`` and return the lines of its standard output."""
    done = subprocess.run(
        [str(REPO / "hack" / script), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise ClusterStartError(f"hack/{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()


def start_kind(name: str, workdir: Path) -> TestCluster:
    """A kind cluster from the node image built here, with the project image loaded in it."""
    hack("docker-engine.sh")
    tools = Path(hack("build-kind-tools.sh", env=FIND_ONLY))
    image, sim_image, llama_image = hack_lines("build-image.sh", "--all", env=FIND_ONLY)[-3:]
    network_policies = hack("build-network-policies.sh", env=FIND_ONLY)
    monitoring = MonitoringImages(*hack_lines("build-monitoring-images.sh", env=FIND_ONLY)[-4:])
    config = workdir / "kind-config.yaml"
    config.write_text("\n".join(hack_lines("kind-up.sh", "--print-config", env=FIND_ONLY)) + "\n")
    kubectl = Path(hack("build-controlplane.sh", env=FIND_ONLY)) / "kubectl"
    cluster = KindCluster(name, kind_path=tools / "kind", kubectl_path=kubectl)
    # A cluster of that name left by an earlier run (or stopped with its Docker engine) is
    # deleted, not reused: nothing from another run leaks into this one; a new one takes ~15 s.
    cluster.delete()
    cluster.create(config)
    cluster.load_docker_image(image)
    for member_image in (sim_image, llama_image):
        cluster.load_docker_image(member_image)
    for monitoring_image in monitoring.images():
        cluster.load_docker_image(monitoring_image)
    enforce_network_policies(cluster, network_policies)
    return TestCluster(
        "kind",
        Path(cluster.kubeconfig_path),
        kind=cluster,
        image=image,
        sim_image=sim_image,
        llama_image=llama_image,
        monitoring=monitoring,
    )


#: What enforces NetworkPolicies in the kind tier (the node's bridge CNI does not): kube-router's
#: network policy controller, a DaemonSet in ``kube-system`` (docs/network.md).
NETWORK_POLICY_MANIFEST = REPO / "hack" / "kind-network-policies.yaml"


def enforce_network_policies(cluster: KindCluster, image: str) -> None:
    """Load ``image`` and apply :data:`NETWORK_POLICY_MANIFEST` with it. Not waited on here:
    the test of the refusals fails, naming it, when the DaemonSet is not Ready."""
    cluster.load_docker_image(image)
    manifest = NETWORK_POLICY_MANIFEST.read_text().replace("image: IMAGE", f"image: {image}")
    try:
        cluster.kubectl("apply", "-f", "-", input=manifest, stderr=subprocess.PIPE)
    except subprocess.CalledProcessError as err:
        why = f"applying {NETWORK_POLICY_MANIFEST.name} failed:\n{err.stderr}"
        raise ClusterStartError(why) from err


def docker_unavailable_reason() -> str | None:
    """Why kind cannot run here, or None when a Docker engine answers."""
    if shutil.which("docker") is None:
        return "kind needs Docker and there is no docker binary"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        why = probe.stderr.strip()[:200]
        return f"kind needs a running Docker engine: `docker info` failed: {why}"
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
