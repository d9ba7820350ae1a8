"""A real control plane on loopback: etcd, kube-apiserver and optionally kube-controller-manager.

This mirrors what controller-runtime's envtest does, with two additions the project needs: RBAC
authorization is on (escalation checks are part of what we test), and a ServiceAccount issuer is
configured so TokenRequest works and any ServiceAccount can be acted as. The admin identity is a
client certificate in ``system:masters``; other identities are minted on demand.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import ssl
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from controlplane.envtest.binaries import Binaries, find_binaries
from controlplane.envtest.errors import EnvtestError
from controlplane.envtest.kubeconfig import write_kubeconfig
from controlplane.envtest.pki import CertificateAuthority, service_account_key_pair
from controlplane.envtest.ports import free_port
from controlplane.envtest.process import ManagedProcess, ensure_port_free

#: Upper bounds for each process to become healthy; generous because CI machines have 2 cores.
ETCD_START_TIMEOUT = 30.0
APISERVER_START_TIMEOUT = 90.0
CONTROLLER_MANAGER_START_TIMEOUT = 60.0
#: The controllers that make namespaces, ownerReferences, ServiceAccounts and aggregated roles work,
#: and Jobs (the operator's model prefetch): the job-controller makes a Job's pods and reads their
#: ends; the node stand-in (``controlplane sim-node``) binds and runs them. And the disruption
#: controller, which keeps each PodDisruptionBudget's status (what the Eviction API checks).
CONTROLLER_MANAGER_CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "clusterrole-aggregation-controller",
    "job-controller",
    "disruption-controller",
)
ADMIN_USER = "admin"
ADMIN_GROUPS = ("system:masters",)
HOST = "127.0.0.1"


@functools.cache
def _no_verify() -> ssl.SSLContext:
    """For the health polls of a server whose certificate is ours; built on first use, not at
    import (the node stand-in imports this package for its PKI and never polls)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class ControlPlane:
    """Start with :meth:`start` (or ``with``); everything is stopped and removed by :meth:`stop`."""

    def __init__(
        self,
        *,
        with_controller_manager: bool = False,
        binaries: Binaries | None = None,
        workdir: Path | None = None,
        apiserver_port: int | None = None,
        etcd_port: int | None = None,
        extra_apiserver_args: tuple[str, ...] = (),
    ) -> None:
        self.binaries = binaries or find_binaries()
        if with_controller_manager and self.binaries.kube_controller_manager is None:
            raise EnvtestError(
                "kube-controller-manager was requested but not found; run `make controlplane-bins`"
            )
        self.with_controller_manager = with_controller_manager
        self._owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="modelpool-envtest-"))
        for port in (apiserver_port, etcd_port):
            if port is not None:
                ensure_port_free(port)
        self.apiserver_port = apiserver_port or free_port()
        self.etcd_port = etcd_port or free_port()
        self.etcd_peer_port = free_port()
        self.controller_manager_port = free_port()
        self.extra_apiserver_args = extra_apiserver_args
        self.ca = CertificateAuthority()
        self.processes: dict[str, ManagedProcess] = {}
        #: Seconds each process took to become healthy, for the record.
        self.startup_seconds: dict[str, float] = {}
        self._admin_kubeconfig: Path | None = None

    # -- addresses and identities -------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{HOST}:{self.etcd_port}"

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        if self._admin_kubeconfig is None:
            raise EnvtestError("the control plane has not been started")
        return self._admin_kubeconfig

    def kubeconfig_for_user(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig authenticating as ``user`` in ``groups`` by client certificate."""
        pair = self.ca.client_pair(user, groups)
        safe = user.replace(":", "_").replace("/", "_")
        return write_kubeconfig(
            self.workdir / "kubeconfigs" / f"user-{safe}.yaml",
            server=self.server,
            ca_pem=self.ca_pem,
            user=user,
            client_cert_pem=pair.cert_pem,
            client_key_pem=pair.key_pem,
        )

    def kubeconfig_for_token(self, token: str, name: str) -> Path:
        """A kubeconfig authenticating with a bearer token (for example a ServiceAccount's)."""
        safe = name.replace(":", "_").replace("/", "_")
        return write_kubeconfig(
            self.workdir / "kubeconfigs" / f"token-{safe}.yaml",
            server=self.server,
            ca_pem=self.ca_pem,
            user=name,
            token=token,
        )

    def admin_http(self, timeout: float = 10.0) -> httpx.Client:
        """A synchronous HTTP client acting as the admin (for set-up, not for product code)."""
        pki = self.workdir / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        return httpx.Client(base_url=self.server, verify=context, timeout=timeout)

    # -- life cycle ---------------------------------------------------------------------------

    def _process(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.workdir / "logs" / f"{name}.log")
        self.processes[name] = process
        process.start()
        return process

    def _write_pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(self.ca.cert_pem)
        self.ca.serving_pair(("localhost", HOST)).write(pki, "apiserver")
        self.ca.client_pair(ADMIN_USER, ADMIN_GROUPS).write(pki, "admin")
        private, public = service_account_key_pair()
        (pki / "sa.key").write_bytes(private)
        (pki / "sa.key").chmod(0o600)
        (pki / "sa.pub").write_bytes(public)

    def _start_etcd(self) -> None:
        peer = f"http://{HOST}:{self.etcd_peer_port}"
        process = self._process(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=envtest",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=envtest={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            try:
                return httpx.get(f"{self.etcd_url}/health", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        self.startup_seconds["etcd"] = process.wait_until(healthy, ETCD_START_TIMEOUT)

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        process = self._process(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={HOST}",
                f"--advertise-address={HOST}",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.server}/",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                # The default ServiceAccount is made by a controller; without one, pods would wait.
                "--disable-admission-plugins=ServiceAccount",
                "--profiling=false",
                # A loopback address is not a valid endpoint for the `kubernetes` Service.
                "--endpoint-reconciler-type=none",
                # Logs and exec are proxied to a node's kubelet at its InternalIP first: the node
                # stand-in's is 127.0.0.1, and its Hostname (the node's name) resolves nowhere.
                "--kubelet-preferred-address-types=InternalIP,Hostname,InternalDNS,ExternalDNS,"
                "ExternalIP",
                *self.extra_apiserver_args,
            ],
        )
        self._admin_kubeconfig = write_kubeconfig(
            self.workdir / "kubeconfigs" / "admin.yaml",
            server=self.server,
            ca_pem=self.ca_pem,
            user=ADMIN_USER,
            client_cert_pem=(pki / "admin.crt").read_bytes(),
            client_key_pem=(pki / "admin.key").read_bytes(),
        )
        with self.admin_http(timeout=2.0) as http:

            def healthy() -> bool:
                try:
                    return http.get("/readyz").status_code == 200
                except httpx.HTTPError:
                    return False

            self.startup_seconds["kube-apiserver"] = process.wait_until(
                healthy, APISERVER_START_TIMEOUT
            )

    def _start_controller_manager(self) -> None:
        assert self.binaries.kube_controller_manager is not None
        kubeconfig = str(self.admin_kubeconfig)
        process = self._process(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--controllers={','.join(CONTROLLER_MANAGER_CONTROLLERS)}",
                f"--service-account-private-key-file={self.workdir / 'pki' / 'sa.key'}",
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                f"--bind-address={HOST}",
                f"--secure-port={self.controller_manager_port}",
                f"--cert-dir={self.workdir / 'controller-manager'}",
            ],
        )
        url = f"https://{HOST}:{self.controller_manager_port}/healthz"

        def healthy() -> bool:
            try:
                # Its serving certificate is self-signed; only liveness is asked here.
                return httpx.get(url, verify=_no_verify(), timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        self.startup_seconds["kube-controller-manager"] = process.wait_until(
            healthy, CONTROLLER_MANAGER_START_TIMEOUT
        )

    def start(self) -> Self:
        """Start every process and wait until each is healthy; on failure stop what started."""
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        (self.workdir / "kubeconfigs").mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        started = time.monotonic()
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            if self.with_controller_manager:
                self._start_controller_manager()
        except BaseException:
            self.stop(remove_workdir=False)
            raise
        self.startup_seconds["total"] = time.monotonic() - started
        return self

    def stop(self, *, remove_workdir: bool = True) -> None:
        """Stop every process, newest first. Idempotent; safe from atexit."""
        for process in reversed(list(self.processes.values())):
            process.stop()
        if remove_workdir and self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision; return that revision.

        Watches from any older ``resourceVersion`` then fail with ``410 Gone`` (unless the API
        server's watch cache still holds it), which is how tests force an informer to relist.
        """
        with httpx.Client(base_url=self.etcd_url, timeout=10.0) as etcd:
            header = etcd.post("/v3/kv/range", json={"key": "AA=="}).json()["header"]
            revision = int(header["revision"])
            answer = etcd.post("/v3/kv/compaction", json={"revision": revision, "physical": True})
            if answer.status_code != 200:
                raise EnvtestError(f"etcd compaction at {revision} failed: {answer.text}")
        return revision

    def logs(self) -> dict[str, Path]:
        """Log file of each process, for showing when a test fails."""
        return {name: p.log_path for name, p in self.processes.items()}

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
