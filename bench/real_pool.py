"""The local tier with real llama-server members, for the benchmarks that swap them
(``bench.kv_cache_swap``, ``bench.router_mode_bench``).

What runs is what ``make demo MEMBERS=llama-server`` runs, nothing lighter: a real control plane
on loopback, the manifests applied, the operator under its ServiceAccount, the node stand-in
playing the member pods as real ``llama-server`` processes (``--threads 1``) and the router's
proxy pod as a ``controlplane router-proxy`` process under the router's ServiceAccount. Pool
``gpu-0`` has members ``a`` and ``b``, serving two tiny generated models (seeds 1 and 2) as
``tiny-a`` and ``tiny-b``, ``--parallel 1``; router ``router`` fronts it. Requests go to the
router's local address, as a client's would.

With ``slot_server`` the same pool sets ``spec.slotServer`` instead (issue 22): one long-lived
``llama-server`` in router mode, models loaded and unloaded in it by the pool controller. The
members' flags move into ``slotServer.args`` and their weights become node files (``file://``
under :data:`NODE_MODELS`, linked to the same tiny models in the stand-in's host root), since a
slot server mounts each member's weights into its own pod.

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

from controlplane.controllers.modelpool.slotserver import slot_server_name
from controlplane.envtest import ControlPlane
from controlplane.envtest.tinymodel import TinyModelSpec, tiny_model
from controlplane.local.system import local_system, wait_router_address
from controlplane.runtime.endpoints import MEMBER_PORT_NAME, SERVICE_NAME_LABEL, ready_urls
from controlplane.standin.settings import NodeSettings

NAMESPACE: Final = "bench"
POOL: Final = "gpu-0"
ROUTER: Final = "router"
MEMBERS: Final = ("a", "b")
#: The models' trained context, and each member's --ctx-size (one slot).
CONTEXT: Final = 8192
#: A prompt of about 420 tokens with the tiny models' vocabulary, the same for every request.
PROMPT: Final = " ".join(f"word{i} alpha" for i in range(100))
MAX_TOKENS: Final = 8
#: Where a slot-server pool's members find their weights on the node (``file://`` sources).
NODE_MODELS: Final = "/var/lib/modelpool/bench-models"
#: The flags of a member's server, or of the slot server (which its children inherit).
SERVER_ARGS: Final = ("--parallel", "1", "--ctx-size", str(CONTEXT))
#: The slot server's flags: the members' plus ``--threads 1``, as router mode gets in the
#: benchmark (the stand-in adds it to a member's own server unless given).
SLOT_SERVER_ARGS: Final = (*SERVER_ARGS, "--threads", "1")
REQUEST_TIMEOUT: Final = 120.0
READY_TIMEOUT: Final = 120.0
#: The node stand-in's ``--log-dir`` under the work folder (``NodeStandInProcess``), whose
#: ``hostpath`` folder is the node's disk.
NODE_LOG_DIR: Final = "simulators"


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


def member_body(member: str, source: str, *, kv_cache: bool, slot_server: bool) -> dict[str, Any]:
    """A member with its own server's flags, or none when the pool's slot server serves it (its
    flags are the slot server's then, and its Deployment stays at 0 whatever ``replicas``)."""
    spec: dict[str, Any] = {
        "model": {"name": model_name(member), "source": source},
        "replicas": 1 if member == MEMBERS[0] else 0,
    }
    if not slot_server:
        spec["args"] = list(SERVER_ARGS)
    if kv_cache:
        spec["kvCache"] = {"enabled": True}
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": member, "namespace": NAMESPACE},
        "spec": spec,
    }


def node_source(member: str) -> str:
    """A slot-server member's weights: a file on the node (:func:`place_on_node` puts it there)."""
    return f"file://{NODE_MODELS}/{model_name(member)}.gguf"


def place_on_node(host_root: Path) -> None:
    """Link the tiny models into the node's disk (the stand-in's ``host_root``) where
    :func:`node_source` names them: links, not copies, so both systems read the same bytes."""
    for member, path in models().items():
        here = host_root / NODE_MODELS.lstrip("/") / f"{model_name(member)}.gguf"
        here.parent.mkdir(parents=True, exist_ok=True)
        here.symlink_to(path)


def pool_objects(*, kv_cache: bool, slot_server: bool = False) -> list[dict[str, Any]]:
    """The namespace, both members, the pool (with a slot server, or members as pods) and the
    router."""
    group = "inference.modelpool.dev/v1alpha1"
    paths = models()
    sources = {m: node_source(m) if slot_server else str(paths[m]) for m in MEMBERS}
    pool_spec: dict[str, Any] = {
        "members": [{"inferenceServiceRef": {"name": m}} for m in MEMBERS],
        "default": MEMBERS[0],
        "swapBudget": f"{REQUEST_TIMEOUT:.0f}s",
        # no anti-thrash floor: a switch asked right after the resident's last request
        # would otherwise wait for its activity window (2 s) first; these benchmarks
        # time the switch itself (bench-fairness times the scheduling)
        "scheduling": {"minResidency": "0s"},
    }
    if slot_server:
        pool_spec["slotServer"] = {"args": list(SLOT_SERVER_ARGS)}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *(member_body(m, sources[m], kv_cache=kv_cache, slot_server=slot_server) for m in MEMBERS),
        {
            "apiVersion": group,
            "kind": "ModelPool",
            "metadata": {"name": POOL, "namespace": NAMESPACE},
            "spec": pool_spec,
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
    """A running pool: where its router answers, a kubectl for reading it, and the work folder
    that holds every process's log (the operator's, the stand-in's, each pod's)."""

    url: str
    kubectl: Callable[..., str]
    workdir: Path

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(
            self.kubectl("get", "-n", NAMESPACE, kind, name, "-o", "yaml")
        )
        return found

    def listed(self, kind: str, selector: str) -> list[dict[str, Any]]:
        """The objects of ``kind`` in the namespace with the label ``selector``."""
        found = yaml.safe_load(
            self.kubectl("get", "-n", NAMESPACE, kind, "-l", selector, "-o", "yaml")
        )
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    def slot_server_url(self) -> str:
        """The pool's slot server, from its Service's EndpointSlice (``<pool>-slot``), as the pool
        controller finds it: the way to its ``/models`` without going through our proxy."""
        selector = f"{SERVICE_NAME_LABEL}={slot_server_name(POOL)}"
        urls = ready_urls(self.listed("endpointslices", selector), MEMBER_PORT_NAME)
        if len(urls) != 1:
            raise SystemExit(f"slot server {slot_server_name(POOL)}: ready endpoints {urls}")
        return urls[0]


@contextlib.contextmanager
def real_pool(
    llama_server: Path, *, kv_cache: bool, slot_server: bool = False
) -> Iterator[RealPool]:
    """The whole local system with the pool above (``spec.kvCache`` on both members or on
    neither; members as pods, or in a slot server), ready and answering at its router."""

    def prepare(workdir: Path) -> None:
        if slot_server:
            place_on_node(NodeSettings(log_dir=workdir / NODE_LOG_DIR).host_root)

    objects = pool_objects(kv_cache=kv_cache, slot_server=slot_server)
    with local_pool(objects, llama_server=llama_server, prepare=prepare) as pool:
        yield pool


@contextlib.contextmanager
def local_pool(
    objects: list[dict[str, Any]],
    *,
    llama_server: Path | None = None,
    prepare: Callable[[Path], None] | None = None,
    prefix: str = "bench-real-pool-",
) -> Iterator[RealPool]:
    """The whole local system (``make dev``'s) with ``objects`` applied in :data:`NAMESPACE`,
    every pool and router in them ready and the router :data:`ROUTER` answering at its local
    address; ``prepare`` sees the work folder before anything starts (the node's disk is under
    it). Everything is stopped after, and the work folder removed unless the block failed (the
    operator's and the node's logs are in it): a benchmark that finds a fault raises inside the
    block to keep them. Shared by the benchmarks that drive the local tier from this process
    (the real-member ones above, ``bench.no_cut_bench``) rather than through a runner script."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    if prepare is not None:
        prepare(workdir)
    plane = ControlPlane(with_controller_manager=True).start()
    failed = True
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
            kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
            wait = ("wait", "-n", NAMESPACE, f"--timeout={READY_TIMEOUT:.0f}s")
            for obj in objects:
                if obj["kind"] in ("ModelPool", "ModelRouter"):
                    kind = "mpool" if obj["kind"] == "ModelPool" else "mr"
                    kubectl(*wait, f"--for={_ready_when(obj)}", f"{kind}/{obj['metadata']['name']}")
            url = wait_router_address(node, f"{NAMESPACE}/{ROUTER}", timeout=READY_TIMEOUT)
            _wait_ready(url)
            yield RealPool(url, kubectl, workdir)
        failed = False
    finally:
        plane.stop()
        if failed:
            print(f"the run failed: its logs are kept in {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _ready_when(obj: dict[str, Any]) -> str:
    """What ``kubectl wait`` waits for: phase Ready, but the Ready condition for a pool that
    gives an idle slot back (it may be ``Idle`` already by then, and still serves)."""
    if "idleAfter" in (obj["spec"].get("scheduling") or {}):
        return "condition=Ready"
    return "jsonpath={.status.phase}=Ready"


def _wait_ready(url: str) -> None:
    """Until the router's proxy answers ``/readyz`` 200 (its caches are synced)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"the router at {url} was not ready in {READY_TIMEOUT:.0f} s")
