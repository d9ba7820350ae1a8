"""Running the system locally: the operator under its own ServiceAccount, and the node stand-in.

*Why one module of this size:* the processes (operator, stand-in, router-proxy) and the two
scripts that run them (demo, dev) share their start, readiness and stop; the demo's steps are most
of it.

Used by ``controlplane demo``, ``controlplane dev`` and the e2e tests, so all run the operator the
way a cluster would: a separate process (``controlplane operator``) authenticated by a TokenRequest
token of ``modelpool-system/modelpool-operator`` and allowed only what the generated RBAC
manifests grant. The node stand-in (``controlplane sim-node``, :mod:`controlplane.standin`) runs
as the cluster admin: it plays the node and the built-in controllers, which are not part of the
operator's permissions. For ``demo`` and ``dev`` it also plays the router-proxy pods, each as the
router's ServiceAccount, and logs each router's local address, which ``dev`` prints.

Every process started here dies with its parent (``PR_SET_PDEATHSIG``) and is stopped with
SIGTERM, then SIGKILL after a grace period.

**Traces.** When the Jaeger all-in-one is built (``hack/build-jaeger.sh``, which ``make demo`` and
``make dev`` run), :func:`trace_backend` starts it on loopback and every process gets the
``OTEL_*`` variables that export to it: the demo then prints its swap's trace as a waterfall, and
``dev`` leaves it running and prints where to query it. Without the binary both run as before,
untraced, and say how to get it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
import httpx
import yaml

from controlplane.controllers.rbac import OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT
from controlplane.envtest import BinaryNotFoundError, ControlPlane, EnvtestError
from controlplane.envtest.jaeger import JaegerBackend, compact, render_waterfall, waterfall
from controlplane.envtest.ports import free_port
from controlplane.local.hub import STAND_IN_BYTES, sample_hub
from controlplane.runtime.client import KubeClient
from controlplane.standin.process import die_with_parent
from controlplane.standin.tokens import TOKEN_SECONDS, service_account_token

__all__ = ["TOKEN_SECONDS", "service_account_token"]  # and everything public below

STOP_GRACE_SECONDS: Final = 30.0
#: ``--shutdown-delay`` of a proxy started here: it is reached at its own loopback port, with no
#: kube-proxy or load balancer to take it out of their endpoints, so a stop that waited the
#: cluster's 5 s would only slow every test's end; ``extra_args`` may name another.
LOCAL_SHUTDOWN_DELAY_SECONDS: Final = 0.5


def kubeconfig_for_token(admin_kubeconfig: Path, token: str, path: Path) -> Path:
    """The admin kubeconfig's current cluster, authenticating with ``token`` instead."""
    config = yaml.safe_load(admin_kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    context["context"]["user"] = "token-user"
    config["users"] = [{"name": "token-user", "user": {"token": token}}]
    config["contexts"] = [context]
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


async def operator_kubeconfig(admin: KubeClient, admin_kubeconfig: Path, path: Path) -> Path:
    """A kubeconfig that is the operator's ServiceAccount (the RBAC manifests must be applied)."""
    token = await service_account_token(admin, OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT)
    return kubeconfig_for_token(admin_kubeconfig, token, path)


class LocalProcess:
    """``python -m controlplane.cli ARGS`` with its output in ``log``; dies with its parent."""

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        *,
        cwd: Path | None = None,
        name: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name or args[0]
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "controlplane.cli", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                preexec_fn=die_with_parent,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> int:
        """SIGKILL at once (a crash, for chaos tests) and reap; returns the exit code."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        return self.popen.returncode

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int:
        """SIGTERM, wait up to ``grace``, then SIGKILL; returns the exit code. Idempotent."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        return self.popen.returncode


class OperatorProcess(LocalProcess):
    """``controlplane operator`` as ``kubeconfig`` says, probes and metrics on free ports."""

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        lease: str,
        identity: str,
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.probe_port = free_port()
        self.metrics_port = free_port()
        args = [
            "operator", "--kubeconfig", str(kubeconfig), "--namespace", OPERATOR_NAMESPACE,
            "--identity", identity, "--leader-election-id", lease,
            "--health-probe-bind-address", f"127.0.0.1:{self.probe_port}",
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
            "--preflight-cache-dir", str(workdir / "preflight"),
            *extra_args,
        ]  # fmt: skip
        super().__init__(
            args,
            workdir / f"{identity}.log",
            cwd=cwd,
            name=identity,
            env=env,
        )

    @property
    def probe_url(self) -> str:
        return f"http://127.0.0.1:{self.probe_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


class NodeStandInProcess(LocalProcess):
    """``controlplane sim-node`` (as the admin): the node for member Deployments, and for
    router-proxy Deployments too with ``router_proxies``; with ``llama_server``, members whose
    model is a GGUF file here run that real server instead of a simulator."""

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        *,
        namespace: str | None = None,
        load_seconds: float = 0.5,
        token_seconds: float | None = None,
        router_proxies: bool = False,
        llama_server: Path | None = None,
        starting_poll_seconds: float | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        args = [
            "sim-node",
            "--kubeconfig", str(kubeconfig),
            "--load-seconds", str(load_seconds),
            "--log-dir", str(workdir / "simulators"),
        ]  # fmt: skip
        if token_seconds is not None:
            args += ["--token-seconds", str(token_seconds)]
        if namespace is not None:
            args += ["--namespace", namespace]
        if router_proxies:
            args.append("--router-proxies")
        if llama_server is not None:
            args += ["--llama-server", str(llama_server)]
        if starting_poll_seconds is not None:
            args += ["--starting-poll-seconds", str(starting_poll_seconds)]
        super().__init__(args, workdir / "sim-node.log", cwd=cwd, name="sim-node", env=env)

    def router_addresses(self) -> dict[str, str]:
        """``{"NS/ROUTER": "http://127.0.0.1:PORT"}``: each router Service's local address, as
        the stand-in logged it."""
        return {m[1]: m[2] for m in ROUTER_ADDRESS.finditer(self.output())}


class RouterProxyProcess(LocalProcess):
    """``controlplane router-proxy`` for ModelRouter ``router``, on a free loopback port;
    ``extra_args`` are passed as they are (tests shorten the pool Lease with them), after
    ``--shutdown-delay`` :data:`LOCAL_SHUTDOWN_DELAY_SECONDS` (so one of them wins)."""

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        namespace: str,
        identity: str,
        *,
        router: str = "router",
        cwd: Path | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.identity = identity
        args = [
            "router-proxy", "--router", router, "--namespace", namespace,
            "--kubeconfig", str(kubeconfig), "--identity", identity,
            "--bind-address", f"127.0.0.1:{self.port}",
            "--preflight-cache-dir", str(workdir / f"preflight-{identity}"),
            "--shutdown-delay", str(LOCAL_SHUTDOWN_DELAY_SECONDS),
            *extra_args,
        ]  # fmt: skip
        super().__init__(args, workdir / f"{identity}.log", cwd=cwd, name=identity, env=env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# -- the demo ------------------------------------------------------------------------------------

#: The repository's manifests (the package is installed editable from the repository).
MANIFESTS: Final = Path(__file__).resolve().parents[2] / "manifests"
DEMO_NAMESPACE: Final = "default"
DEMO_READY_TIMEOUT: Final = 120.0
#: The served-and-running sample and the one kept at zero replicas.
DEMO_ACTIVE: Final = "inferenceservice_llama.yaml"
DEMO_PARKED: Final = "inferenceservice_qwen.yaml"
#: The context the samples give their servers (``--ctx-size 8192``): the tiny models the real
#: llama-server members serve are generated with it, since a slot never gets more than the
#: model's trained context.
DEMO_REAL_CONTEXT: Final = 8192
#: The demo's answers are short: a tiny model of random weights rarely ends a reply by itself,
#: and would otherwise write until its context is full.
DEMO_MAX_TOKENS: Final = 24
#: The sample pool of those two members, and the sample router in front of it.
DEMO_POOL: Final = "modelpool.yaml"
DEMO_ROUTER: Final = "modelrouter.yaml"
#: What the node stand-in logs once it is running (``controlplane.standin.controller.run_node``).
NODE_STARTED: Final = "playing the node for"
#: What it logs when a router Service gets its local address
#: (``controlplane.standin.controller.ROUTER_ADDRESS_LOG``).
ROUTER_ADDRESS: Final = re.compile(r"router (\S+/\S+) answers at (http://\S+)")


class Kubectl(Protocol):
    """Runs ``kubectl ARGS`` as the admin, printing the command line (``check=True``)."""

    def __call__(self, *args: str, stdin: str | None = None) -> None: ...


@contextlib.contextmanager
def trace_backend(workdir: Path) -> Iterator[JaegerBackend | None]:
    """Jaeger on loopback while the block runs, or None (with a note) when it is not built."""
    try:
        backend = JaegerBackend(workdir / "jaeger")
    except BinaryNotFoundError as err:
        print(f"tracing off: {err}", flush=True)
        yield None
        return
    try:
        backend.start()
    except EnvtestError as err:
        print(f"tracing off: Jaeger did not start: {err}", flush=True)
        yield None
        return
    print(
        f"Jaeger (traces): query API and UI at {backend.query_url}, OTLP at "
        f"{backend.otlp_endpoint}",
        flush=True,
    )
    try:
        yield backend
    finally:
        backend.stop()


@contextlib.contextmanager
def local_system(
    admin_kubeconfig: Path,
    kubectl: Kubectl,
    workdir: Path,
    jaeger: JaegerBackend | None = None,
    llama_server: Path | None = None,
) -> Iterator[NodeStandInProcess]:
    """Install ``manifests/default``, run the operator under its ServiceAccount and the node
    stand-in (members and router-proxies) until the block ends; on failure show the end of
    their logs. Every log goes to ``workdir``. With ``jaeger`` every process exports spans
    to it (the stand-in passes its environment on to the proxies it plays). With
    ``llama_server`` the stand-in runs that real server for members whose model is a GGUF file
    here."""
    env = jaeger.otlp_env() if jaeger is not None else None
    from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter

    kubectl("apply", "-k", str(MANIFESTS / "default"))
    crds = [
        f"crd/{k.PLURAL}.inference.modelpool.dev"
        for k in (InferenceService, ModelPool, ModelRouter)
    ]
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds)
    kubeconfig = anyio.run(_operator_kubeconfig, admin_kubeconfig, workdir)
    account = f"{OPERATOR_NAMESPACE}/{OPERATOR_SERVICE_ACCOUNT}"
    hubs = contextlib.ExitStack()
    hub = hubs.enter_context(sample_hub(MANIFESTS / "samples", workdir))
    print(
        f"a local Hub at {hub.url} serves a {STAND_IN_BYTES // (1024 * 1024)} MiB stand-in for "
        "each hf:// file the samples name; every fetcher is pointed at it "
        f"(--fetch-env HF_ENDPOINT={hub.url})",
        flush=True,
    )
    print(f"starting the operator as ServiceAccount {account}, and the node stand-in", flush=True)
    operator = OperatorProcess(
        kubeconfig,
        workdir,
        "modelpool-operator",
        "operator-local",
        env=env,
        extra_args=("--fetch-env", f"HF_ENDPOINT={hub.url}"),
    )
    node = NodeStandInProcess(
        admin_kubeconfig,
        workdir,
        load_seconds=2.0,
        router_proxies=True,
        llama_server=llama_server,
        env=env,
    )
    try:
        _wait_for_log(node, NODE_STARTED, "the node stand-in to start")
        _wait_ready(operator)
        yield node
    except BaseException:
        for process in (node, operator):
            print(f"--- {process.name} log (last lines)\n{process.output()[-4000:]}", flush=True)
        raise
    finally:
        for process in (node, operator):
            code = process.stop()
            print(f"{process.name} stopped (exit code {code})", flush=True)
        hubs.close()


def real_member_models() -> tuple[Path, Path]:
    """The two tiny GGUF models the demo's members serve on the real llama-server (generated
    once, seeds 1 and 2, with the samples' 8,192-token context)."""
    from controlplane.envtest.tinymodel import TinyModelSpec, tiny_model

    return (
        tiny_model(TinyModelSpec(seed=1, context_length=DEMO_REAL_CONTEXT)),
        tiny_model(TinyModelSpec(seed=2, context_length=DEMO_REAL_CONTEXT)),
    )


def demo_inference_services(
    admin_kubeconfig: Path, kubectl: Kubectl, workdir: Path, llama_server: Path | None = None
) -> None:
    """Run the system, serve one sample, ask it something, then show one swap (below) and,
    when Jaeger is built, its trace. With ``llama_server`` the members are that real server,
    each serving a tiny generated model in place of the samples' model files."""
    with (
        trace_backend(workdir) as jaeger,
        local_system(admin_kubeconfig, kubectl, workdir, jaeger, llama_server) as node,
    ):
        active = yaml.safe_load((MANIFESTS / "samples" / DEMO_ACTIVE).read_text())
        parked = yaml.safe_load((MANIFESTS / "samples" / DEMO_PARKED).read_text())
        parked["spec"]["replicas"] = 0
        if llama_server is None:
            kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(MANIFESTS / "samples" / DEMO_ACTIVE))
        else:
            for sample, path in zip((active, parked), real_member_models(), strict=True):
                sample["spec"]["model"]["source"] = str(path)
            print(
                f"members on the real llama-server ({llama_server}): the samples' model files "
                f"replaced by tiny generated ones ({active['spec']['model']['source']}, "
                f"{parked['spec']['model']['source']})",
                flush=True,
            )
            print(f"  ({DEMO_ACTIVE} with that model)", flush=True)
            kubectl("apply", "-n", DEMO_NAMESPACE, "-f", "-", stdin=yaml.safe_dump(active))
        print(f"  ({DEMO_PARKED} with spec.replicas: 0)", flush=True)
        kubectl("apply", "-n", DEMO_NAMESPACE, "-f", "-", stdin=yaml.safe_dump(parked))
        name, parked_name = active["metadata"]["name"], parked["metadata"]["name"]
        wait = ("wait", "-n", DEMO_NAMESPACE, f"--timeout={DEMO_READY_TIMEOUT:.0f}s")
        kubectl(*wait, "--for=jsonpath={.status.phase}=Ready", f"isvc/{name}")
        kubectl(*wait, "--for=jsonpath={.status.phase}=Stopped", f"isvc/{parked_name}")
        kubectl("get", "-n", DEMO_NAMESPACE, "isvc,deploy,pods,endpointslices", "-o", "wide")
        model = str(active["spec"]["model"]["name"])
        url, answer = anyio.run(_ask, admin_kubeconfig, name, model)
        print(f"POST {url}/v1/chat/completions (model {model}):\n  {answer}", flush=True)
        demo_model_pool(admin_kubeconfig, kubectl, node, jaeger)


def demo_model_pool(
    admin_kubeconfig: Path,
    kubectl: Kubectl,
    node: NodeStandInProcess,
    jaeger: JaegerBackend | None = None,
) -> None:
    """Apply the sample pool and router; the stand-in runs the router's proxy replicas as the
    router's own ServiceAccount. Ask the router's local address for the parked model: a proxy
    holds the request, takes the pool's Lease, the pool controller drains the resident and
    brings the target up, and the held request is answered."""
    pool = yaml.safe_load((MANIFESTS / "samples" / DEMO_POOL).read_text())
    router = yaml.safe_load((MANIFESTS / "samples" / DEMO_ROUTER).read_text())
    name, router_name = str(pool["metadata"]["name"]), str(router["metadata"]["name"])
    kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(MANIFESTS / "samples" / DEMO_POOL))
    wait = ("wait", "-n", DEMO_NAMESPACE, f"--timeout={DEMO_READY_TIMEOUT:.0f}s")
    kubectl(*wait, "--for=jsonpath={.status.phase}=Ready", f"mpool/{name}")
    kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(MANIFESTS / "samples" / DEMO_ROUTER))
    kubectl(*wait, "--for=jsonpath={.status.phase}=Ready", f"mr/{router_name}")
    kubectl("get", "-n", DEMO_NAMESPACE, "mpool,isvc,mr,pods,serviceaccount,role,rolebinding")
    url = wait_router_address(node, f"{DEMO_NAMESPACE}/{router_name}")
    print(f"router {DEMO_NAMESPACE}/{router_name} answers at {url}", flush=True)
    trace_id = secrets.token_hex(16)
    anyio.run(_swap_through_the_router, admin_kubeconfig, kubectl, url, pool, trace_id)
    kubectl("get", "-n", DEMO_NAMESPACE, "mpool,isvc")
    if jaeger is not None:
        show_trace(jaeger, trace_id)


#: The services a demo swap's trace is complete with.
TRACED_SERVICES: Final = frozenset({"modelpool-router-proxy", "modelpool-operator"})


def show_trace(jaeger: JaegerBackend, trace_id: str, timeout: float = 30.0) -> None:
    """Print the swap's trace as a waterfall once both services' spans have arrived (they are
    exported in batches a moment after they end)."""
    deadline = time.monotonic() + timeout
    trace = None
    while time.monotonic() < deadline:
        trace = jaeger.trace(trace_id)
        names = {s["operationName"] for s in (trace or {}).get("spans") or []}
        services = {p["serviceName"] for p in ((trace or {}).get("processes") or {}).values()}
        if services >= TRACED_SERVICES and {"owner up", "forward"} <= names:
            break
        time.sleep(0.5)
    if trace is None:
        print(f"no trace {trace_id} in Jaeger at {jaeger.query_url}", flush=True)
        return
    rows, folded = compact(waterfall(trace))
    print(
        f"-- the swap's trace {trace_id} ({jaeger.query_url}/api/traces/{trace_id}):\n"
        f"{render_waterfall(rows)}\n"
        f"  ({folded} reconciles that only found the swap still under way are not shown; "
        "the kube API calls neither)",
        flush=True,
    )


def wait_router_address(node: NodeStandInProcess, router: str, timeout: float = 60.0) -> str:
    """The local address the stand-in logged for ``router`` (``NS/NAME``)."""
    deadline = time.monotonic() + timeout
    while (url := node.router_addresses().get(router)) is None:
        if not node.running() or time.monotonic() > deadline:
            raise RuntimeError(f"no address for router {router}:\n{node.output()[-3000:]}")
        time.sleep(0.1)
    return url


async def _swap_through_the_router(
    admin_kubeconfig: Path, kubectl: Kubectl, url: str, pool: dict[str, Any], trace_id: str
) -> None:
    from controlplane.api.v1alpha1 import InferenceService, ModelPool
    from controlplane.runtime.config import ClientConfig
    from controlplane.runtime.resources import PODS

    name = str(pool["metadata"]["name"])
    members = [m["inferenceServiceRef"]["name"] for m in pool["spec"]["members"]]
    async with KubeClient(ClientConfig.from_kubeconfig(admin_kubeconfig)) as admin:
        status = (await admin.get(ModelPool.resource(), name, DEMO_NAMESPACE))["status"]
        resident = status["residentMember"]
        target = next(m for m in members if m != resident)
        isvc = await admin.get(InferenceService.resource(), target, DEMO_NAMESPACE)
        model = str(isvc["spec"]["model"]["name"])

        async def pool_status() -> dict[str, Any]:
            found = await admin.get(ModelPool.resource(), name, DEMO_NAMESPACE)
            return dict(found.get("status") or {})

        async def resident_pods() -> int:
            label = f"inference.modelpool.dev/inferenceservice={resident}"
            return len((await admin.list(PODS, DEMO_NAMESPACE, label_selector=label)).items)

        milestones: tuple[tuple[str, Callable[[dict[str, Any], int], bool]], ...] = (
            ("the proxy holds the request; the pool is swapping",
             lambda s, pods: s.get("pendingMember") == target),
            (f"{resident} is drained: its pod is gone", lambda s, pods: pods == 0),
            (f"{target} is resident", lambda s, pods: s.get("residentMember") == target),
        )  # fmt: skip

        async def show_progress() -> None:
            for what, reached in milestones:
                while True:  # polled: a demo shows states, a watch would only add lines
                    if reached(await pool_status(), await resident_pods()):
                        break
                    await anyio.sleep(0.1)
                print(f"-- {what}", flush=True)
                await anyio.to_thread.run_sync(
                    lambda: kubectl("get", "-n", DEMO_NAMESPACE, "mpool,isvc,pods")
                )

        body = {
            "model": model,
            "messages": [{"role": "user", "content": "hello via the proxy"}],
            "max_tokens": DEMO_MAX_TOKENS,
        }
        traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
        print(
            f"POST {url}/v1/chat/completions (model {model}, traceparent {traceparent}) ...",
            flush=True,
        )
        with anyio.fail_after(DEMO_READY_TIMEOUT):
            async with (
                anyio.create_task_group() as group,
                httpx.AsyncClient(timeout=DEMO_READY_TIMEOUT) as http,
            ):
                group.start_soon(show_progress)
                response = await http.post(
                    f"{url}/v1/chat/completions", json=body, headers={"traceparent": traceparent}
                )
        response.raise_for_status()
        answer = response.json()["choices"][0]["message"]["content"]
        print(f"  answered by {response.json().get('model')}: {answer}", flush=True)


async def _wait_http_ok(process: LocalProcess, url: str, timeout: float = 60.0) -> None:
    """Poll ``url`` (served by ``process``) until it answers 200; fail fast if it exits."""
    with anyio.fail_after(timeout):
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                if not process.running():
                    raise RuntimeError(f"{process.name} exited:\n{process.output()[-3000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get(url)).status_code == 200:
                        return
                await anyio.sleep(0.2)


async def _operator_kubeconfig(admin_kubeconfig: Path, workdir: Path) -> Path:
    from controlplane.runtime.config import ClientConfig

    async with KubeClient(ClientConfig.from_kubeconfig(admin_kubeconfig)) as admin:
        return await operator_kubeconfig(admin, admin_kubeconfig, workdir / "operator.kubeconfig")


def _wait_for_log(process: LocalProcess, text: str, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.output():
        if not process.running() or time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}:\n{process.output()[-3000:]}")
        time.sleep(0.1)


def _wait_ready(operator: OperatorProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not operator.running():
            raise RuntimeError(f"the operator exited:\n{operator.output()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{operator.probe_url}/readyz", timeout=2).status_code == 200:
                print("operator ready (RBAC preflight passed, caches synced)", flush=True)
                return
        time.sleep(0.2)
    raise RuntimeError(
        f"the operator was not ready in {timeout:.0f} s:\n{operator.output()[-3000:]}"
    )


async def _ask(admin_kubeconfig: Path, service: str, model: str) -> tuple[str, str]:
    """One chat completion to the ready address of ``service``'s EndpointSlice."""
    from controlplane.runtime.config import ClientConfig
    from controlplane.runtime.endpoints import ready_urls
    from controlplane.runtime.resources import ENDPOINT_SLICES

    async with KubeClient(ClientConfig.from_kubeconfig(admin_kubeconfig)) as admin:
        slices = await admin.list(
            ENDPOINT_SLICES, DEMO_NAMESPACE, label_selector=f"kubernetes.io/service-name={service}"
        )
    urls = ready_urls(slices.items)
    if not urls:
        raise RuntimeError(f"no ready endpoint for Service {service}")
    url = urls[0]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello from the demo"}],
        "max_tokens": DEMO_MAX_TOKENS,
    }
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{url}/v1/chat/completions", json=body)
    response.raise_for_status()
    return url, str(response.json()["choices"][0]["message"]["content"])


# -- make dev --------------------------------------------------------------------------------------

#: Where ``make dev`` leaves the admin kubeconfig (in the current folder), for a second shell.
DEV_KUBECONFIG: Final = ".dev-kubeconfig"
#: How often ``make dev`` looks at the stand-in's log for new router addresses.
DEV_POLL_SECONDS: Final = 0.5


def run_dev(plane: ControlPlane, kubectl: Kubectl, llama_server: Path | None = None) -> int:
    """``make dev``: the operator and the node stand-in (members and router-proxies) on the
    started ``plane`` until Ctrl-C or SIGTERM, printing each router's local address as it comes.
    Every log (the control plane's included) is kept in a folder that outlives the run. With
    ``llama_server``, members whose model is a GGUF file here run that real server."""
    logs = Path(tempfile.mkdtemp(prefix="modelpool-dev-"))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    link = Path.cwd() / DEV_KUBECONFIG  # a stable path, so a second shell can use it
    try:
        with (
            trace_backend(logs) as jaeger,
            local_system(plane.admin_kubeconfig, kubectl, logs, jaeger, llama_server) as node,
        ):
            shutil.copyfile(plane.admin_kubeconfig, link)
            link.chmod(0o600)
            print(
                f"kubeconfig: {link}\n  export KUBECONFIG={link}\n"
                "  kubectl apply -f manifests/samples/   # InferenceServices, a pool, a router\n"
                "  (the stand-in runs each router's proxy pods and prints where the router "
                "answers)\n"
                f"logs: {logs}\n"
                + (
                    f"traces: Jaeger at {jaeger.query_url} (GET /api/traces/<trace id>; "
                    f"/api/services), OTLP at {jaeger.otlp_endpoint}\n"
                    if jaeger is not None
                    else "traces: off (hack/build-jaeger.sh builds Jaeger)\n"
                )
                + "Ctrl-C stops it.",
                flush=True,
            )
            shown: set[str] = set()
            while not stop.wait(DEV_POLL_SECONDS):
                if not node.running():
                    raise RuntimeError(f"the node stand-in exited:\n{node.output()[-3000:]}")
                for router, url in node.router_addresses().items():
                    if router not in shown:
                        shown.add(router)
                        print(f"router {router} answers at {url}", flush=True)
    finally:
        with contextlib.suppress(OSError):
            shutil.copytree(plane.workdir / "logs", logs / "controlplane", dirs_exist_ok=True)
        plane.stop()
        link.unlink(missing_ok=True)
        print(f"stopped; logs kept in {logs}", flush=True)
    return 0
