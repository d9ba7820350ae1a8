"""The RBAC preflight against a real API server: its real authorizer decides every review.

Identities are ServiceAccounts (as the processes run in a cluster) holding exactly the rules the
code declares, or one rule less; never ``system:masters``.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from controlplane.cli import main
from controlplane.controllers import rbac
from controlplane.envtest.kubeconfig import write_kubeconfig
from controlplane.envtest.ports import free_port
from controlplane.preflight import (
    EXIT_ALLOWED,
    EXIT_DENIED,
    EXIT_INCONCLUSIVE,
    Component,
    Outcome,
    Preflight,
    Source,
    VerdictCache,
    run_preflight,
)
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.rbac import PolicyRule
from controlplane.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
)
from tests.e2e.clusters import TestCluster

pytestmark = [pytest.mark.any_cluster, pytest.mark.cluster_install]

RBAC_V1 = "rbac.authorization.k8s.io/v1"


async def run_cli(argv: list[str]) -> int:
    """The console script, in a thread: it runs its own event loop, as it does in a pod."""
    return await anyio.to_thread.run_sync(main, argv)


def _rules(rules: tuple[PolicyRule, ...]) -> list[dict[str, Any]]:
    return [rule.to_manifest() for rule in rules]


async def _service_account_token(admin: KubeClient, namespace: str, name: str) -> str:
    await admin.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        namespace,
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"expirationSeconds": 3600},
    }
    answer = await admin.create(SERVICE_ACCOUNTS, request, namespace, subresource="token")
    token = answer["status"]["token"]
    assert isinstance(token, str)
    return token


def _subject(namespace: str, name: str) -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]


async def _grant_role(
    admin: KubeClient, namespace: str, account: str, rules: tuple[PolicyRule, ...]
) -> None:
    name = f"{account}-{secrets.token_hex(3)}"
    await admin.create(
        ROLES,
        {"apiVersion": RBAC_V1, "kind": "Role", "metadata": {"name": name}, "rules": _rules(rules)},
        namespace,
    )
    await admin.create(
        ROLE_BINDINGS,
        {
            "apiVersion": RBAC_V1,
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": _subject(namespace, account),
        },
        namespace,
    )


async def _grant_cluster_role(
    admin: KubeClient, namespace: str, account: str, rules: tuple[PolicyRule, ...]
) -> str:
    name = f"preflight-{namespace}-{account}"
    await admin.create(
        CLUSTER_ROLES,
        {
            "apiVersion": RBAC_V1,
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": _rules(rules),
        },
    )
    await admin.create(
        CLUSTER_ROLE_BINDINGS,
        {
            "apiVersion": RBAC_V1,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": _subject(namespace, account),
        },
    )
    return name


def _token_config(cluster: TestCluster, token: str) -> ClientConfig:
    return cluster.admin_config().with_bearer_token(token)


def _token_kubeconfig(cluster: TestCluster, token: str, path: Path, server: str = "") -> Path:
    admin = cluster.admin_config()
    assert admin.upstream is not None
    assert admin.upstream.ssl_ca_cert
    return write_kubeconfig(
        path,
        server=server or admin.server,
        ca_pem=Path(admin.upstream.ssl_ca_cert).read_bytes(),
        user="preflight",
        token=token,
    )


async def test_router_proxy_with_its_declared_role_is_allowed_and_then_served_from_cache(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = await _service_account_token(admin, namespace, "router")
    await _grant_role(admin, namespace, "router", rbac.ROUTER_PROXY_RULES)
    config = _token_config(cluster, token)

    first = await run_preflight(config, Component.ROUTER_PROXY, namespace, cache_dir=tmp_path)
    assert (first.outcome, first.source) == (Outcome.ALLOWED, Source.LIVE), first.message
    assert first.reviews_sent == sum(len(list(r.permissions())) for r in rbac.ROUTER_PROXY_RULES)

    # A second run within the hour, in a new "process" (fresh in-memory cache), makes no request.
    requests: list[str] = []
    original = KubeClient.request

    async def counting(self: KubeClient, method: str, path: str, **kwargs: Any) -> Any:
        requests.append(f"{method} {path}")
        return await original(self, method, path, **kwargs)

    monkeypatch.setattr(KubeClient, "request", counting)
    second = await run_preflight(config, Component.ROUTER_PROXY, namespace, cache_dir=tmp_path)
    assert (second.outcome, second.source) == (Outcome.ALLOWED, Source.CACHE)
    assert requests == []
    # The counter works: the same check with the cache cleared does reach the API server.
    third = await Preflight(
        config, Component.ROUTER_PROXY, namespace, cache=VerdictCache(None)
    ).run()
    assert third.source is Source.LIVE
    assert len(requests) == third.reviews_sent > 0


async def test_router_proxy_missing_one_rule_is_denied_by_name_and_exits_77(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = await _service_account_token(admin, namespace, "router")
    without_delete = tuple(
        PolicyRule(r.api_groups, r.resources, tuple(v for v in r.verbs if v != "delete"))
        for r in rbac.ROUTER_PROXY_RULES
    )
    await _grant_role(admin, namespace, "router", without_delete)
    kubeconfig = _token_kubeconfig(cluster, token, tmp_path / "kubeconfig")
    argv = ["preflight", "--component", "router-proxy", "--namespace", namespace]
    argv += ["--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]

    assert await run_cli(argv) == EXIT_DENIED
    err = capsys.readouterr().err
    assert "preflight DENIED" in err
    assert f"  - delete leases.coordination.k8s.io in namespace {namespace}" in err
    assert "NOT a permissions denial" not in err
    assert not list((tmp_path / "cache").glob("*.json"))  # a denial is never cached

    # Granting the missing verb turns the same command into exit 0.
    await _grant_role(
        admin,
        namespace,
        "router",
        (PolicyRule(("coordination.k8s.io",), ("leases",), ("delete",)),),
    )
    assert await run_cli(argv) == EXIT_ALLOWED
    assert "preflight ALLOWED" in capsys.readouterr().out


async def test_operator_needs_its_cluster_rules_cluster_wide(
    cluster: TestCluster, admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    token = await _service_account_token(admin, namespace, "operator")
    config = _token_config(cluster, token)
    await _grant_role(admin, namespace, "operator", rbac.LEADER_ELECTION_RULES)
    # The cluster rules bound in one namespace only do not cover a cluster-wide need.
    await _grant_role(admin, namespace, "operator", rbac.OPERATOR_CLUSTER_RULES)
    scoped = await Preflight(
        config, Component.OPERATOR, namespace, cache=VerdictCache(tmp_path)
    ).run()
    assert scoped.outcome is Outcome.DENIED
    assert {p.namespace for p in scoped.missing} == {None}
    assert "modelpools/status" in "\n".join(str(p.permission) for p in scoped.missing)
    assert "cluster-wide" in scoped.message

    name = await _grant_cluster_role(admin, namespace, "operator", rbac.OPERATOR_CLUSTER_RULES)
    try:
        verdict = await Preflight(
            config, Component.OPERATOR, namespace, cache=VerdictCache(tmp_path)
        ).run()
        assert verdict.outcome is Outcome.ALLOWED, verdict.message
    finally:
        await admin.delete(CLUSTER_ROLE_BINDINGS, name)
        await admin.delete(CLUSTER_ROLES, name)


async def test_no_api_server_at_all_is_inconclusive_not_denied_and_exits_75(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nowhere = f"https://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    kubeconfig = _token_kubeconfig(cluster, "any-token", tmp_path / "kubeconfig", nowhere)
    argv = ["preflight", "--component", "router-proxy", "--namespace", namespace]
    argv += ["--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache")]
    assert await run_cli([*argv, "--retry-budget", "2"]) == EXIT_INCONCLUSIVE
    err = capsys.readouterr().err
    assert "preflight INCONCLUSIVE" in err
    assert "This is NOT a permissions denial" in err
    assert "DENIED" not in err
