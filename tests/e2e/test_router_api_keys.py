"""A ModelRouter that asks for API keys, as the OpenAI SDK sees it, on the local tier.

The operator (under its ServiceAccount, with no access to Secrets) writes the router's proxy
Deployment with the Secret it names as a volume; the node stand-in plays that Deployment
(``--router-proxies``): it writes the Secret's keys into the pod's volume as a kubelet does, and
runs the proxy with ``--api-keys-dir`` pointed there. Through the router's local address,
openai-python gets ``AuthenticationError`` (401) without a key and with a wrong one, and a
completion with the right one. A key added to the Secret is accepted, and a key removed is
refused, by the same proxy process (no restart). No log of the proxy, the stand-in or the
operator holds a key.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import PODS, SECRETS
from tests.e2e.bodies import pool_body, router_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import LocalProcess, OperatorProcess, start_node
from tests.e2e.proxies import isvc_body
from tests.e2e.waiting import eventually

TIMEOUT = 90.0
KEY = "sk-e2e-first-4b1d2f7a9c3e8d60"
ROTATED = "sk-e2e-second-0c5a7e9b1f3d2a84"
WRONG = "sk-e2e-wrong-77aa55cc33ee11ff"
MESSAGES: Any = [{"role": "user", "content": "hello"}]


def _data(**keys: str) -> dict[str, str]:
    return {name: base64.b64encode(value.encode()).decode() for name, value in keys.items()}


def _client(url: str, key: str | None) -> openai.AsyncOpenAI:
    """openai-python against the router, with ``key`` (None: a placeholder the request omits)."""
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key or "unused", max_retries=0)


def _headers(key: str | None) -> Any:
    """What a request adds to the client's headers: without a key, ``Authorization`` omitted
    (openai-python's way of sending none)."""
    return {"Authorization": openai.Omit()} if key is None else None


async def _answers(url: str, key: str) -> bool:
    """Whether a completion with ``key`` is answered (False on a 401, so callers can wait)."""
    async with _client(url, key) as client:
        try:
            completion = await client.chat.completions.create(model="model-a", messages=MESSAGES)
        except openai.AuthenticationError:
            return False
    assert completion.model == "model-a"
    return True


async def _refused(url: str, key: str | None) -> str:
    """The message of the 401 openai-python raises for ``key``."""
    async with _client(url, key) as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.chat.completions.create(
                model="model-a", messages=MESSAGES, extra_headers=_headers(key)
            )
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"
    assert refused.value.response.headers["www-authenticate"].startswith("Bearer")
    return refused.value.message


async def _proxy_pods(admin: KubeClient, namespace: str) -> list[tuple[str, int]]:
    """The router's proxy pods: uid and restart count."""
    pods = await admin.list(
        PODS, namespace, label_selector="inference.modelpool.dev/modelrouter=router"
    )
    return [
        (
            pod["metadata"]["uid"],
            sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or ()),
        )
        for pod in pods.items
    ]


def _all_logs(folder: Path) -> str:
    """Every log file under ``folder`` (the stand-in's, each pod's, the proxy's), joined."""
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*.log") if p.is_file())


async def test_the_openai_sdk_needs_the_key_and_rotation_needs_no_restart(
    cluster: TestCluster,
    admin: KubeClient,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    node = start_node(cluster, tmp_path, started, namespace=namespace, router_proxies=True)
    secret = {"metadata": {"name": "router-keys"}, "type": "Opaque", "data": _data(first=KEY)}
    await admin.create(SECRETS, secret, namespace)
    await admin.create(InferenceService.resource(), isvc_body("a", 1), namespace)
    await admin.create(ModelPool.resource(), pool_body("gpu-0", ("a",), "a"), namespace)
    router = router_body("router", "gpu-0")
    router["spec"]["auth"] = {"apiKeySecret": {"name": "router-keys"}}
    await admin.create(ModelRouter.resource(), router, namespace)

    async def address() -> str | None:
        return node.router_addresses().get(f"{namespace}/router")

    url = await eventually(address, timeout=TIMEOUT, what="the router's local address")
    await eventually(
        lambda: _answers(url, KEY), timeout=TIMEOUT, interval=0.5, what="served with the key"
    )

    assert "No API key" in await _refused(url, None)
    assert "not accepted" in await _refused(url, WRONG)
    async with http_client(timeout=10) as http:  # the probes stay open
        assert (await http.get(f"{url}/readyz")).status_code == 200
    pods = await _proxy_pods(admin, namespace)
    assert len(pods) == 1

    # Rotation: the new key is added, accepted beside the old one, then the old one removed.
    secret = await admin.get(SECRETS, "router-keys", namespace)
    secret["data"] = _data(first=KEY, second=ROTATED)
    secret = await admin.update(SECRETS, secret)
    await eventually(
        lambda: _answers(url, ROTATED), timeout=TIMEOUT, interval=0.5, what="the added key"
    )
    assert await _answers(url, KEY)
    secret["data"] = _data(second=ROTATED)
    await admin.update(SECRETS, secret)

    async def old_key_refused() -> bool:
        return not await _answers(url, KEY)

    await eventually(old_key_refused, timeout=TIMEOUT, interval=0.5, what="the removed key refused")
    assert await _answers(url, ROTATED)
    assert await _proxy_pods(admin, namespace) == pods, "the proxy was restarted"

    text = await anyio.to_thread.run_sync(_all_logs, tmp_path)
    assert "reason=invalid_api_key" in text  # the proxy's log is among them
    assert "API keys reloaded" in text
    for key in (KEY, ROTATED, WRONG):
        assert key not in text
    assert KEY not in operator.output()
