"""e2e wiring: one real cluster per session, a fresh namespace per test.

``--cluster=local`` (default) starts etcd, kube-apiserver and kube-controller-manager built by
``hack/``; ``--cluster=kind`` makes a kind cluster from images built by ``hack/`` through
pytest-kind (``--cluster-name``, ``--keep-cluster``), runs the operator in it from the project
image, and runs the tests that make sense there (see :func:`pytest_collection_modifyitems`); it is
skipped with a reason where no Docker engine can be started, and fails under CI.
``--cluster=kubeconfig`` uses ``--kubeconfig``. A local control plane that cannot start fails the
session: this tier is never silently skipped.
"""

from __future__ import annotations

import contextlib
import inspect
import secrets
import subprocess
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import anyio
import pytest

from controlplane.envtest import EnvtestError
from controlplane.envtest.jaeger import JaegerBackend
from controlplane.envtest.process import tail
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import NAMESPACES
from tests.e2e.clusters import (
    ClusterStartError,
    TestCluster,
    docker_unavailable_reason,
    in_ci,
    start_kind,
    start_local,
)
from tests.e2e.incluster import rolled_out_operator
from tests.e2e.invariants import note_test_outcome
from tests.e2e.kubectl import install
from tests.e2e.operator_process import (
    LocalProcess,
    OperatorProcess,
    start_operator,
    stopped_at_exit,
)
from tests.e2e.operator_rbac import operator_without_grant_rules
from tests.e2e.workers import pytest_xdist_make_scheduler  # noqa: F401  (a hook: pytest finds it)

_session_cluster: TestCluster | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster",
        choices=("local", "kind", "kubeconfig"),
        default="local",
        help="where the e2e tier runs: a control plane built here, kind, or --kubeconfig",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark e2e tests, and choose the ones the ``--cluster`` mode runs. The local tier runs all
    but the ``kind`` ones (they need the operator in a cluster, from the image). On kind, the
    ``kind`` tests run, and of the ``any_cluster`` ones those also marked ``cluster_install``
    (RBAC and the manifests as a cluster's install has them): the rest prove the API server's own
    behaviour and the framework against it, which the local tier's kube-apiserver (the same
    version, built from the same source) already proves, so the kind tier does not run them
    again (docs/testing.md). ``--cluster=kubeconfig`` runs every ``any_cluster`` test: there the
    cluster under test is the user's. Tests that drive processes only the local tier has (the node
    stand-in, a local operator, a SIGSTOPped API server) are deselected, counted in the summary."""
    mode = config.getoption("--cluster")
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        if "tests/e2e" not in str(item.path):
            kept.append(item)
            continue
        item.add_marker(pytest.mark.e2e)
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            item.add_marker(pytest.mark.anyio)
        in_kind_tier = item.get_closest_marker("kind") is not None
        if mode == "local":
            runs = not in_kind_tier
        else:
            anywhere = item.get_closest_marker("any_cluster") is not None
            anywhere = anywhere and item.get_closest_marker("local_only") is None
            if mode == "kind":
                install = item.get_closest_marker("cluster_install") is not None
                runs = in_kind_tier or (anywhere and install)
            else:
                runs = anywhere
        (kept if runs else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    global _session_cluster
    mode = request.config.getoption("--cluster")
    if mode == "local":
        found = start_local()  # raises (never skips) when the control plane cannot start
    elif mode == "kind":
        found = _start_kind(request)
    else:
        path = request.config.getoption("--kubeconfig")
        if not path:
            pytest.fail("--cluster=kubeconfig needs --kubeconfig PATH")
        found = TestCluster("kubeconfig", Path(path))
    _session_cluster = found
    yield found
    _session_cluster = None
    if found.local is not None:
        found.local.stop()
    if found.kind is not None and not request.config.getoption("keep_cluster"):
        found.kind.delete()


def _start_kind(request: pytest.FixtureRequest) -> TestCluster:
    """The kind tier: a cluster from the node image built here (never pulled). Without a Docker
    engine that can be started, it is skipped with the reason, except under CI, where it fails."""
    workdir = request.getfixturevalue("tmp_path_factory").mktemp("kind")
    try:
        return start_kind(request.config.getoption("cluster_name"), workdir)
    except (ClusterStartError, subprocess.CalledProcessError) as err:
        reason = docker_unavailable_reason()
        if reason is not None and not in_ci():
            pytest.skip(reason)
        pytest.fail(f"the kind tier could not start: {err}")


@pytest.fixture(scope="session")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JaegerBackend]:
    """A Jaeger all-in-one on free loopback ports (``hack/build-jaeger.sh`` builds it; ``make
    test-e2e`` does so on first use). Without it the tracing tests FAIL, never skip: a trace
    backend that cannot start is a broken tier, not a missing optional."""
    try:
        backend = JaegerBackend(tmp_path_factory.mktemp("jaeger")).start()
    except EnvtestError as err:
        pytest.fail(f"the Jaeger trace backend could not start: {err}")
    try:
        yield backend
    finally:
        backend.stop()


@pytest.fixture
async def admin(cluster: TestCluster) -> AsyncIterator[KubeClient]:
    async with KubeClient(cluster.admin_config()) as client:
        yield client


@pytest.fixture
async def namespace(admin: KubeClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A namespace of this test's own, deleted afterwards (kube-controller-manager empties it)."""
    stem = request.node.name.split("[")[0].replace("_", "-").lower()[:40].strip("-")
    name = f"{stem}-{secrets.token_hex(3)}"
    await admin.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(NotFound):
            await admin.delete(NAMESPACES, name)


@pytest.fixture(scope="module")
async def operator(
    cluster: TestCluster, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[OperatorProcess]:
    """One operator process per test module, under its own ServiceAccount (it watches every
    namespace); the install it needs (CRDs, RBAC) is applied first."""
    stem = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    await install(cluster)
    workdir = tmp_path_factory.mktemp(f"{stem}-operator")
    with stopped_at_exit() as started:
        async with KubeClient(cluster.admin_config()) as admin:
            found = await start_operator(
                cluster, admin, workdir, f"{stem}-e2e-{secrets.token_hex(3)}", f"{stem}-op", started
            )
        yield found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the end of each control-plane log (on kind: every pod's log and the cluster's
    events) to a failed e2e test's report; tell the pool
    invariant monitor whether the test's body failed (its teardown then skips the settle check)."""
    report = yield
    if report.when in ("setup", "call"):
        note_test_outcome(report.failed)
    if report.failed and _session_cluster is not None:
        for name, path in _session_cluster.logs().items():
            report.sections.append((f"{name} log (last lines)", tail(path)))
        for name, text in _session_cluster.diagnostics().items():
            report.sections.append((name, text[-4000:]))
    return report


@pytest.fixture
async def reduced_operator(admin: KubeClient, namespace: str) -> AsyncIterator[None]:
    """The operator's account without the ClusterRole's grant-only rules, for one test."""
    async with operator_without_grant_rules(admin, namespace):
        yield


@pytest.fixture(scope="module")
async def operator_pod(cluster: TestCluster) -> str:
    """kind: the operator Deployment installed with the image built here and rolled out; the
    name of its running pod."""
    return await rolled_out_operator(cluster)


@pytest.fixture
def started() -> Iterator[list[LocalProcess]]:
    """Processes a test starts (operator, node stand-in, proxies), stopped when it ends."""
    with stopped_at_exit() as processes:
        yield processes
