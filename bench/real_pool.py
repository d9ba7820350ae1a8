"""The local tier with real llama-server members, for the benchmarks that swap them
(``bench.kv_cache_swap``, ``bench.router_mode_bench``).

What runs is what ``make demo MEMBERS=llama-server`` runs, nothing lighter: a real control plane
on loopback, the manifests applied, the operator under its ServiceAccount, the node stand-in
playing the member pods as real ``llama-server`` processes (``--threads 1``) and the router's
proxy pod as a ``controlplane router-proxy`` process under the router's ServiceAccount. Pool
``gpu-0`` has members ``a`` and ``b``, serving two tiny generated models (seeds 1 and 2) as
``tiny-a`` and ``tiny-b``, ``--parallel 1``; router ``router`` fronts it. Requests go to the
router's local address, as a client's would.

:func:`alternate` is the request sequence both benchmarks use, against this pool or any
OpenAI-compatible server that answers for both models.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import yaml

from controlplane.envtest import ControlPlane
from controlplane.envtest.tinymodel import TinyModelSpec, tiny_model
from controlplane.local.system import local_system, wait_router_address

NAMESPACE: Final = "bench"
POOL: Final = "gpu-0"
ROUTER: Final = "router"
MEMBERS: Final = ("a", "b")
#: The models' trained context, and each member's --ctx-size (one slot).
CONTEXT: Final = 8192
#: A prompt of about 420 tokens with the tiny models' vocabulary, the same for every request.
PROMPT: Final = " ".join(f"word{i} alpha" for i in range(100))
MAX_TOKENS: Final = 8
REQUEST_TIMEOUT: Final = 120.0
READY_TIMEOUT: Final = 120.0


def model_name(member: str) -> str:
    return f"tiny-{member}"


def models() -> dict[str, Path]:
    """``{member: GGUF path}``: the two tiny models (generated once, then cached)."""
    return {
        member: tiny_model(TinyModelSpec(seed=seed, context_length=CONTEXT))
        for seed, member in enumerate(MEMBERS, start=1)
    }


@dataclass(frozen=True)
class Answer:
    """One request: the model asked for, how long the client waited, the server's timings."""

    model: str
    seconds: float
    timings: dict[str, Any]


def ask(url: str, model: str) -> Answer:
    """:data:`PROMPT` as a chat completion to ``url`` for ``model``; the answer must name it."""
    body = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    started = time.perf_counter()
    response = httpx.post(
        f"{url}/v1/chat/completions", json=body, timeout=REQUEST_TIMEOUT, trust_env=False
    )
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"{model}: HTTP {response.status_code}: {response.text[:500]}")
    answered = response.json()
    if answered.get("model") != model:
        raise SystemExit(f"asked for {model}, answered by {answered.get('model')}")
    return Answer(model, seconds, dict(answered["timings"]))


@dataclass(frozen=True)
class Switch:
    """A request for the model not loaded (``cold``), then one more for it (``warm``)."""

    cold: Answer
    warm: Answer


def alternate(
    url: str, switches: int, after_switch: Callable[[Switch], None] | None = None
) -> tuple[Answer, list[Switch]]:
    """The sequence: ``tiny-a`` (the first load, or the resident), then ``switches`` times the
    other model, each asked twice (the switch, then a request with nothing to switch).
    ``after_switch`` sees each switch as it completes (to read what the operator recorded)."""
    first = ask(url, model_name(MEMBERS[0]))
    done: list[Switch] = []
    for i in range(switches):
        model = model_name(MEMBERS[(i + 1) % 2])
        switch = Switch(ask(url, model), ask(url, model))
        if after_switch is not None:
            after_switch(switch)
        done.append(switch)
    return first, done


def member_body(member: str, model: Path, *, kv_cache: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": model_name(member), "source": str(model)},
        "args": ["--parallel", "1", "--ctx-size", str(CONTEXT)],
        "replicas": 1 if member == MEMBERS[0] else 0,
    }
    if kv_cache:
        spec["kvCache"] = {"enabled": True}
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": member, "namespace": NAMESPACE},
        "spec": spec,
    }


def pool_objects(*, kv_cache: bool) -> list[dict[str, Any]]:
    """The namespace, both members, the pool and the router."""
    group = "inference.modelpool.dev/v1alpha1"
    paths = models()
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *(member_body(m, paths[m], kv_cache=kv_cache) for m in MEMBERS),
        {
            "apiVersion": group,
            "kind": "ModelPool",
            "metadata": {"name": POOL, "namespace": NAMESPACE},
            "spec": {
                "members": [{"inferenceServiceRef": {"name": m}} for m in MEMBERS],
                "default": MEMBERS[0],
                "swapBudget": f"{REQUEST_TIMEOUT:.0f}s",
                # no anti-thrash floor: a switch asked right after the resident's last request
                # would otherwise wait for its activity window (2 s) first; these benchmarks
                # time the switch itself (bench-fairness times the scheduling)
                "scheduling": {"minResidency": "0s"},
            },
        },
        {
            "apiVersion": group,
            "kind": "ModelRouter",
            "metadata": {"name": ROUTER, "namespace": NAMESPACE},
            "spec": {"backends": [{"name": "gpu", "poolRef": {"name": POOL}}]},
        },
    ]


@dataclass(frozen=True)
class RealPool:
    """A running pool: where its router answers, and a kubectl for reading it."""

    url: str
    kubectl: Callable[..., str]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(
            self.kubectl("get", "-n", NAMESPACE, kind, name, "-o", "yaml")
        )
        return found


@contextlib.contextmanager
def real_pool(llama_server: Path, *, kv_cache: bool) -> Iterator[RealPool]:
    """The whole local system with the pool above (``spec.kvCache`` on both members or on
    neither), ready and answering at its router; everything stopped and removed after."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-real-pool-"))
    plane = ControlPlane(with_controller_manager=True).start()
    try:
        kubectl_binary = plane.binaries.kubectl or shutil.which("kubectl")
        if kubectl_binary is None:
            raise SystemExit("kubectl not found: run `make controlplane-bins`")

        def kubectl(*args: str, stdin: str | None = None) -> str:
            argv = [str(kubectl_binary), "--kubeconfig", str(plane.admin_kubeconfig), *args]
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
            return done.stdout

        def quiet_kubectl(*args: str, stdin: str | None = None) -> None:
            """``local_system``'s kubectl: its output is not the benchmark's."""
            kubectl(*args, stdin=stdin)

        system = local_system(
            plane.admin_kubeconfig, quiet_kubectl, workdir, llama_server=llama_server
        )
        with system as node:
            kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(pool_objects(kv_cache=kv_cache)))
            wait = ("wait", "-n", NAMESPACE, f"--timeout={READY_TIMEOUT:.0f}s")
            kubectl(*wait, "--for=jsonpath={.status.phase}=Ready", f"mpool/{POOL}")
            kubectl(*wait, "--for=jsonpath={.status.phase}=Ready", f"mr/{ROUTER}")
            url = wait_router_address(node, f"{NAMESPACE}/{ROUTER}", timeout=READY_TIMEOUT)
            _wait_ready(url)
            yield RealPool(url, kubectl)
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_ready(url: str) -> None:
    """Until the router's proxy answers ``/readyz`` 200 (its caches are synced)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"the router at {url} was not ready in {READY_TIMEOUT:.0f} s")
