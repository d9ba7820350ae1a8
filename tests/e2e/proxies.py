"""Router-proxy processes and what they serve, for the e2e tests that run proxies locally.

Members are InferenceServices the node stand-in plays as simulators; proxies are
``controlplane router-proxy`` processes under a ServiceAccount bound to a Role made of
``ROUTER_PROXY_RULES`` only, each on its own loopback port.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from controlplane.controllers.rbac import ROUTER_PROXY_RULES
from controlplane.local.system import RouterProxyProcess, kubeconfig_for_token
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import ROLE_BINDINGS, ROLES, SERVICE_ACCOUNTS
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.kubectl import REPO
from tests.e2e.operator_process import LocalProcess, service_account_token
from tests.e2e.waiting import eventually

TIMEOUT = 60.0
PROXY_ACCOUNT = "e2e-router-proxy"
Object = dict[str, Any]


def isvc_body(name: str, replicas: int, load_seconds: float | None = None) -> Object:
    args = ["--parallel", "2"]
    if load_seconds is not None:
        args += ["--sim-load-seconds", str(load_seconds)]  # the node stand-in's per-member load
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": f"model-{name}", "source": f"/models/{name}.gguf"},
            "args": args,
            "replicas": replicas,
        },
    }


async def start_proxies(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    workdir: Path,
    started: list[LocalProcess],
    count: int,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> list[RouterProxyProcess]:
    """``count`` proxies under a ServiceAccount bound to a Role of ROUTER_PROXY_RULES only;
    ``env`` is added to their environment, ``extra_args`` to their flags."""
    kubeconfig = await proxy_kubeconfig(cluster, admin, namespace, workdir)
    return await run_proxies(kubeconfig, namespace, workdir, started, count, env, extra_args)


async def proxy_kubeconfig(
    cluster: TestCluster, admin: KubeClient, namespace: str, workdir: Path
) -> Path:
    """The proxies' ServiceAccount, bound to a Role of ROUTER_PROXY_RULES only, and a kubeconfig
    with its token."""
    await admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": PROXY_ACCOUNT}}, namespace)
    await admin.create(
        ROLES,
        {
            "metadata": {"name": PROXY_ACCOUNT},
            "rules": [rule.to_manifest() for rule in ROUTER_PROXY_RULES],
        },
        namespace,
    )
    await admin.create(
        ROLE_BINDINGS,
        {
            "metadata": {"name": PROXY_ACCOUNT},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": PROXY_ACCOUNT,
            },
            "subjects": [{"kind": "ServiceAccount", "name": PROXY_ACCOUNT, "namespace": namespace}],
        },
        namespace,
    )
    token = await service_account_token(admin, namespace, PROXY_ACCOUNT)
    return kubeconfig_for_token(cluster.admin_kubeconfig, token, workdir / "proxy.kubeconfig")


async def run_proxies(
    kubeconfig: Path,
    namespace: str,
    workdir: Path,
    started: list[LocalProcess],
    count: int,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    prefix: str = "proxy",
    router: str = "router",
) -> list[RouterProxyProcess]:
    """``count`` proxies of ModelRouter ``router`` named ``PREFIX-I`` with ``kubeconfig``, each
    ready when returned."""
    proxies = [
        RouterProxyProcess(
            kubeconfig,
            workdir,
            namespace,
            f"{prefix}-{i}",
            router=router,
            cwd=REPO,
            env=env,
            extra_args=extra_args,
        )
        for i in range(count)
    ]
    started.extend(proxies)
    async with http_client(timeout=5) as http:
        for proxy in proxies:

            async def ready(proxy: RouterProxyProcess = proxy) -> bool:
                assert proxy.running(), f"{proxy.name} exited:\n{proxy.output()[-2000:]}"
                try:
                    return (await http.get(f"{proxy.url}/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(ready, timeout=TIMEOUT, interval=0.2, what=f"{proxy.name} ready")
    return proxies


def chat(model: str, **extra: Any) -> Object:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], **extra}
