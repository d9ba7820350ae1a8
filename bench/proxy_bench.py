"""The data path, measured: our router-proxy against the member direct and against nginx.

One run, one machine, one member. The harness starts a real control plane (etcd and
kube-apiserver on loopback), installs ``manifests/default``, runs the operator under its
ServiceAccount, the node stand-in (which runs each member pod as a ``controlplane sim`` process
with a token time of 0 and publishes its EndpointSlice), and ``controlplane router-proxy`` as a
ServiceAccount bound to a Role of ``ROUTER_PROXY_RULES`` only: the proxy that users run, its caches
fed by its own watches. Phases (``--phases``, in this order):

* ``fast``: small non-streamed completions, ``wrk`` (a Lua script for the POST body) from its own
  process: one connection for latency (p50/p99 with no queueing), 32 connections for requests/s;
  direct to the member, through our proxy (once per variant in ``--variants``) and through
  nginx ``proxy_pass`` (Debian's nginx, one worker, a generated config in a temp dir);
* ``stream``: streamed completions, direct and through the proxy: time to the first event and
  the first-to-last event time (the per-chunk delay is the difference over the event count);
* ``clients``: the proxy's candidate upstream clients (httpx, aiohttp) against the member;
* ``held``: ``--held`` (10,000) requests for a parked member whose load takes
  ``--held-load-seconds``, opened in steps: the proxy's RSS at 0, 1,000, 5,000 and all held
  (each read once its ``modelpool_held_requests`` says so), the slope per request from 1,000 on,
  its CPU while holding, and every answer once the member is up;
* ``slow``: ``--slow`` slow or idle connections and ``--slow-held`` held requests on one replica
  at once, with wrk's normal requests for the resident of a second pool: their p50/p99 with and
  without the slow load, when the proxy closed each slow socket, its RSS, and the renewals of the
  pool Lease it holds meanwhile (issue 20);
* ``swap``: ``--swaps`` cold requests alternating between two members, each split into phases
  from watch timestamps (the pool's Lease, members, pods, EndpointSlices, pool status, Events).

Every load generator runs as its own process and every address is 127.0.0.1. Needs ``nginx`` and
``wrk`` on ``PATH`` (Debian: ``apt-get install -y nginx wrk``) and fails naming what is missing.
Results: a table on stdout and the full record in ``bench/results/proxy_bench-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import anyio
import httpx

from bench.clientprocess import client_process, next_line
from bench.dataplane_clients import chat_body
from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.api.v1alpha1.activation import TARGET_ANNOTATION, pool_lease_name
from controlplane.controllers.rbac import ROUTER_PROXY_RULES
from controlplane.envtest import ControlPlane
from controlplane.envtest.binaries import find_binaries
from controlplane.envtest.ports import free_port
from controlplane.local.system import (
    MANIFESTS,
    NodeStandInProcess,
    OperatorProcess,
    RouterProxyProcess,
    kubeconfig_for_token,
    operator_kubeconfig,
    service_account_token,
)
from controlplane.runtime.cache import Store
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.endpoints import member_urls
from controlplane.runtime.requestlimits import (
    DEFAULT_BODY_READ_TIMEOUT_SECONDS,
    DEFAULT_HEAD_TIMEOUT_SECONDS,
)
from controlplane.runtime.resources import (
    ENDPOINT_SLICES,
    EVENTS,
    LEASES,
    NAMESPACES,
    PODS,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    Resource,
)

REPO: Final = Path(__file__).resolve().parents[1]
NAMESPACE: Final = "bench"
POOL: Final = "gpu-0"
#: The slow phase's second pool: its one member d is resident, the normal requests' target
#: while pool gpu-0 swaps to c for the held ones (a swap closes admission to gpu-0's resident).
NORMAL_POOL: Final = "gpu-1"
ISVC: Final = InferenceService.resource()
POOL_RESOURCE: Final = ModelPool.resource()
ROUTER: Final = ModelRouter.resource()
PROXY_ACCOUNT: Final = "bench-router-proxy"
ISVC_LABEL: Final = "inference.modelpool.dev/inferenceservice"
PHASES: Final = ("fast", "stream", "clients", "held", "slow", "swap")
#: Proxy variants, ``SERVER-CLIENT``: the server side is ``h11`` (uvicorn's h11 parser on asyncio's
#: loop: uvloop and httptools are hidden from the process, an import of either fails) or
#: ``httptools`` (httptools on uvloop: both must be importable); the client is the proxy's
#: ``--upstream-client``.
VARIANTS: Final = ("h11-httpx", "h11-aiohttp", "httptools-httpx", "httptools-aiohttp")
Object = dict[str, Any]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def require_tools() -> dict[str, str]:
    """nginx and wrk, or exit naming what is missing and how to get it."""
    found: dict[str, str] = {}
    missing = []
    for tool in ("nginx", "wrk"):
        path = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/usr/local/sbin")
        if path is None:
            missing.append(tool)
        else:
            found[tool] = path
    if missing:
        raise SystemExit(
            f"error: {' and '.join(missing)} not found on PATH; the data-path benchmark compares "
            "against nginx and loads with wrk. On Debian: apt-get install -y nginx wrk "
            "(see bench/README.md)."
        )
    return found


def require_fast_stack(args: argparse.Namespace) -> None:
    """The ``httptools`` variants need uvloop and httptools importable (pinned in pyproject.toml;
    ``--fast-stack-path`` adds a directory holding them): never measure a silent fallback."""
    if not any(v.startswith("httptools") for v in [*args.variants, args.proxy_variant]):
        return
    path = os.pathsep.join(p for p in (str(REPO), args.fast_stack_path) if p)
    done = subprocess.run(
        [sys.executable, "-c", "import uvloop, httptools"],
        env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(
            "error: the httptools proxy variants need uvloop and httptools (pyproject.toml pins "
            f"them; reinstall the venv or pass --fast-stack-path): {done.stderr.strip()[-200:]}"
        )


def raise_nofile() -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it
    return hard


# -- /proc ---------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- nginx and wrk -------------------------------------------------------------------------------

NGINX_CONF: Final = """\
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream member {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://member;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(binary: str, upstream: str, workdir: Path) -> Iterator[str]:
    """Debian's nginx in front of ``upstream`` (``host:port``), one worker, on loopback."""
    directory = workdir / "nginx"
    directory.mkdir(exist_ok=True)
    port = free_port()
    conf = directory / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=directory, upstream=upstream, port=port))
    process = subprocess.Popen(
        [binary, "-p", str(directory), "-c", str(conf), "-g", "daemon off; user root;"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(directory / "stderr.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"nginx did not start: {(directory / 'stderr.log').read_text()}"
                    ) from None
                time.sleep(0.05)
        yield url
    finally:
        process.send_signal(signal.SIGQUIT)
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


WRK_SCRIPT: Final = """\
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {{"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, '
    .. '"mean_us": %.1f, "socket_errors": %d, "non_2xx": %d}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def wrk(binary: str, url: str, script: Path, connections: int, seconds: float) -> dict[str, Any]:
    done = subprocess.run(
        [binary, "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s",
         str(script), url + "/v1/chat/completions"],
        capture_output=True, text=True, timeout=seconds + 60, check=False,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            result["requests_per_s"] = result["requests"] / (result["duration_us"] / 1e6)
            return result
    raise RuntimeError(f"wrk printed no result:\n{done.stdout}\n{done.stderr}")


# -- the system ----------------------------------------------------------------------------------


def isvc_body(name: str, replicas: int, load_seconds: float) -> Object:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": f"model-{name}", "source": f"/models/{name}.gguf"},
            "args": ["--parallel", "4", "--sim-load-seconds", str(load_seconds)],
            "replicas": replicas,
        },
    }


async def eventually(check: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await anyio.sleep(interval)


def kubectl(binary: Path, kubeconfig: Path, *args: str) -> None:
    done = subprocess.run(
        [str(binary), *args], env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


@dataclass
class System:
    plane: ControlPlane
    admin: KubeClient
    workdir: Path
    proxy_kubeconfig: Path
    processes: list[Any] = field(default_factory=list)

    async def member_url(self, member: str) -> str:
        store = Store()
        for item in (await self.admin.list(ENDPOINT_SLICES, NAMESPACE)).items:
            store.upsert(item)
        urls = member_urls(store, NAMESPACE, member)
        if not urls:
            raise RuntimeError(f"{member} has no ready endpoint")
        return urls[0]

    async def pool_status(self, pool: str = POOL) -> Object:
        return (await self.admin.get(POOL_RESOURCE, pool, NAMESPACE)).get("status") or {}

    async def wait_resident(self, member: str, timeout: float = 120.0, pool: str = POOL) -> None:
        async def resident() -> bool:
            status = await self.pool_status(pool)
            return status.get("residentMember") == member and status.get("phase") == "Ready"

        await eventually(resident, timeout, f"{member} resident and Ready")

    def start_proxy(
        self, variant: str, extra_path: str, extra_args: Sequence[str] = ()
    ) -> RouterProxyProcess:
        server, client = variant.split("-")
        env_path = [str(REPO)]
        if server == "h11":
            env_path.insert(0, str(hide_fast_stack(self.workdir)))
        elif extra_path:
            env_path.append(extra_path)
        previous = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(env_path)
        try:
            proxy = RouterProxyProcess(
                self.proxy_kubeconfig,
                self.workdir,
                NAMESPACE,
                f"proxy-{variant}-{len(self.processes)}",
                cwd=REPO,
                extra_args=["--upstream-client", client, *extra_args],
            )
        finally:
            if previous is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = previous
        self.processes.append(proxy)
        return proxy


def hide_fast_stack(workdir: Path) -> Path:
    """A directory whose ``uvloop`` and ``httptools`` fail to import: uvicorn then runs h11 on
    asyncio's loop, and the proxy's entry point stays on asyncio."""
    directory = workdir / "hide-fast-stack"
    for name in ("uvloop", "httptools"):
        (directory / name).mkdir(parents=True, exist_ok=True)
        (directory / name / "__init__.py").write_text(
            f"raise ImportError('{name} hidden by the benchmark')\n"
        )
    return directory


async def wait_proxy_ready(proxy: RouterProxyProcess, timeout: float = 60.0) -> None:
    async with httpx.AsyncClient(timeout=5, trust_env=False) as http:

        async def ready() -> bool:
            if not proxy.running():
                raise RuntimeError(f"{proxy.name} exited:\n{proxy.output()[-3000:]}")
            try:
                return (await http.get(proxy.url + "/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(ready, timeout, f"{proxy.name} ready", 0.2)


@contextlib.asynccontextmanager
async def running_system(args: argparse.Namespace, workdir: Path) -> AsyncIterator[System]:
    log("starting a control plane (etcd + kube-apiserver)")
    with ControlPlane() as plane:
        binaries = find_binaries()
        if binaries.kubectl is None:
            raise SystemExit("error: kubectl not found (hack/build-controlplane.sh builds it)")
        kubectl(binaries.kubectl, plane.admin_kubeconfig, "apply", "-k", str(MANIFESTS / "default"))
        crds = [f"crd/{k.PLURAL}.inference.modelpool.dev" for k in (InferenceService, ModelPool,
                                                                       ModelRouter)]  # fmt: skip
        kubectl(binaries.kubectl, plane.admin_kubeconfig, "wait", "--for=condition=Established",
                "--timeout=60s", *crds)  # fmt: skip
        config = ClientConfig.from_kubeconfig(plane.admin_kubeconfig)
        async with KubeClient(config) as admin:
            op_kubeconfig = await operator_kubeconfig(
                admin, plane.admin_kubeconfig, workdir / "operator.kubeconfig"
            )
            system = System(plane, admin, workdir, workdir / "proxy.kubeconfig")
            try:
                operator = OperatorProcess(op_kubeconfig, workdir, "modelpool-operator", "operator",
                                           cwd=REPO)  # fmt: skip
                system.processes.append(operator)
                await admin.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
                node = NodeStandInProcess(
                    plane.admin_kubeconfig, workdir, namespace=NAMESPACE,
                    load_seconds=args.load_seconds, token_seconds=0.0, cwd=REPO,
                )  # fmt: skip
                system.processes.append(node)
                await setup_pool(admin, args)
                await setup_proxy_account(system)
                await system.wait_resident("a")
                yield system
            except BaseException:
                for process in system.processes:
                    log(f"--- {process.name} log (last lines)\n{process.output()[-3000:]}")
                raise
            finally:
                for process in reversed(system.processes):
                    process.stop(grace=10)


async def setup_pool(admin: KubeClient, args: argparse.Namespace) -> None:
    await admin.create(ISVC, isvc_body("a", 1, args.load_seconds), NAMESPACE)
    await admin.create(ISVC, isvc_body("b", 0, args.load_seconds), NAMESPACE)
    await admin.create(ISVC, isvc_body("c", 0, args.held_load_seconds), NAMESPACE)
    await admin.create(POOL_RESOURCE, pool_manifest(POOL, ("a", "b", "c"), "a"), NAMESPACE)
    backends = [{"name": "gpu", "poolRef": {"name": POOL}}]
    if "slow" in args.phases:
        await admin.create(ISVC, isvc_body("d", 1, args.load_seconds), NAMESPACE)
        await admin.create(POOL_RESOURCE, pool_manifest(NORMAL_POOL, ("d",), "d"), NAMESPACE)
        backends.append({"name": "gpu1", "poolRef": {"name": NORMAL_POOL}})
    await admin.create(
        ROUTER,
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelRouter",
            "metadata": {"name": "router"},
            "spec": {"backends": backends},
        },
        NAMESPACE,
    )


def pool_manifest(name: str, members: Sequence[str], default: str) -> Object:
    return {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelPool",
        "metadata": {"name": name},
        "spec": {
            "members": [{"inferenceServiceRef": {"name": m}} for m in members],
            "default": default,
            "swapBudget": "300s",
        },
    }


async def setup_proxy_account(system: System) -> None:
    """The proxy's ServiceAccount, bound to a Role of ``ROUTER_PROXY_RULES`` only."""
    admin = system.admin
    await admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": PROXY_ACCOUNT}}, NAMESPACE)
    rules = [rule.to_manifest() for rule in ROUTER_PROXY_RULES]
    await admin.create(ROLES, {"metadata": {"name": PROXY_ACCOUNT}, "rules": rules}, NAMESPACE)
    binding = {
        "metadata": {"name": PROXY_ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": PROXY_ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": PROXY_ACCOUNT, "namespace": NAMESPACE}],
    }
    await admin.create(ROLE_BINDINGS, binding, NAMESPACE)
    token = await service_account_token(admin, NAMESPACE, PROXY_ACCOUNT)
    kubeconfig_for_token(system.plane.admin_kubeconfig, token, system.proxy_kubeconfig)


# -- phases --------------------------------------------------------------------------------------


def summarize(runs: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    values = [float(r[key]) for r in runs]
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


async def fast_phase(
    system: System, args: argparse.Namespace, tools: dict[str, str]
) -> dict[str, Any]:
    """Direct, nginx and one proxy per variant, interleaved round by round."""
    direct = await system.member_url("a")
    script = system.workdir / "chat.lua"
    script.write_text(WRK_SCRIPT.format(body=chat_body("model-a").decode()))
    proxies = {}
    for variant in args.variants:
        proxies[variant] = system.start_proxy(variant, args.fast_stack_path)
    for proxy in proxies.values():
        await wait_proxy_ready(proxy)
    runs: dict[str, list[dict[str, Any]]] = {}
    with nginx(tools["nginx"], direct.removeprefix("http://"), system.workdir) as nginx_url:
        targets = {"direct": direct, "nginx": nginx_url}
        targets |= {f"proxy ({stack})": p.url for stack, p in proxies.items()}
        pids = {f"proxy ({stack})": p.popen.pid for stack, p in proxies.items()}
        for url in targets.values():  # warm-up: connections, caches, first requests
            wrk(tools["wrk"], url, script, 4, 1)
        for round_ in range(args.repeat):
            for name, url in targets.items():
                pid = pids.get(name)
                latency = wrk(tools["wrk"], url, script, 1, args.duration)
                cpu = cpu_seconds(pid) if pid else 0.0
                throughput = wrk(tools["wrk"], url, script, 32, args.duration)
                record = {
                    "round": round_,
                    "p50_us": latency["p50_us"],
                    "p99_us": latency["p99_us"],
                    "c1_requests_per_s": latency["requests_per_s"],
                    "requests_per_s": throughput["requests_per_s"],
                    "c32_p50_us": throughput["p50_us"],
                    "c32_p99_us": throughput["p99_us"],
                    "errors": latency["socket_errors"] + latency["non_2xx"]
                    + throughput["socket_errors"] + throughput["non_2xx"],
                }  # fmt: skip
                if pid:
                    record["cpu_us_per_request"] = (
                        (cpu_seconds(pid) - cpu) / throughput["requests"] * 1e6
                    )
                    record["rss_bytes"] = rss_bytes(pid)
                runs.setdefault(name, []).append(record)
                log(
                    f"fast {name} round {round_}: p50 {latency['p50_us']} us p99 "
                    f"{latency['p99_us']} us, {throughput['requests_per_s']:.0f} req/s"
                )
        if args.profile:
            profile_proxy(system, args, tools, script, proxies)
    for proxy in proxies.values():
        proxy.stop(grace=10)
        system.processes.remove(proxy)
    result: dict[str, Any] = {"runs": runs, "summary": {}}
    for name, records in runs.items():
        result["summary"][name] = {
            key: summarize(records, key)
            for key in ("p50_us", "p99_us", "requests_per_s", "c32_p99_us")
        }
    return result


def profile_proxy(
    system: System,
    args: argparse.Namespace,
    tools: dict[str, str],
    script: Path,
    proxies: dict[str, RouterProxyProcess],
) -> None:
    """py-spy on each proxy under 32 connections: collapsed stacks (and a flame graph) on disk."""
    py_spy = shutil.which("py-spy") or shutil.which(
        "py-spy", path=os.path.join(args.fast_stack_path or "/nonexistent", "bin")
    )
    if py_spy is None:
        log("profile: py-spy not found (pip install py-spy); skipped")
        return
    for stack, proxy in proxies.items():
        out = args.output / f"proxy_bench-{args.stamp}-profile-{stack}.txt"
        spy = subprocess.Popen(
            [py_spy, "record", "--pid", str(proxy.popen.pid), "--duration", f"{args.duration:g}",
             "--rate", "250", "--format", "raw", "--output", str(out), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)
        wrk(tools["wrk"], proxy.url, script, 32, args.duration)
        spy.wait(60)
        log(f"profile of proxy ({stack}): {out}")


async def stream_phase(system: System, args: argparse.Namespace) -> dict[str, Any]:
    direct = await system.member_url("a")
    proxy = system.start_proxy(args.proxy_variant, args.fast_stack_path)
    await wait_proxy_ready(proxy)
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for name, url in (("direct", direct), ("proxy", proxy.url)):
            record = run_client("stream", url, args.stream_requests, "--tokens",
                                str(args.stream_tokens))  # fmt: skip
            runs.setdefault(name, []).append(record)
    proxy.stop(grace=10)
    system.processes.remove(proxy)
    added = []
    for d, p in zip(runs["direct"], runs["proxy"], strict=True):
        added.append(
            {
                "ttfb_added_us": (p["ttfb_p50"] - d["ttfb_p50"]) * 1e6,
                "per_chunk_added_us": (p["first_to_last_p50"] - d["first_to_last_p50"])
                / max(1.0, d["events_p50"] - 1)
                * 1e6,
                "direct_ttfb_us": d["ttfb_p50"] * 1e6,
                "proxy_ttfb_us": p["ttfb_p50"] * 1e6,
                "direct_first_to_last_us": d["first_to_last_p50"] * 1e6,
                "proxy_first_to_last_us": p["first_to_last_p50"] * 1e6,
                "events": d["events_p50"],
            }
        )
    return {
        "runs": runs,
        "added": added,
        "summary": {k: summarize(added, k) for k in ("ttfb_added_us", "per_chunk_added_us")},
    }


def run_client(mode: str, url: str, count: int, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.dataplane_clients", mode, url, str(count), *extra],
        capture_output=True, text=True, cwd=REPO, timeout=600, check=False,
    )  # fmt: skip
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"client {mode} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    return dict(lines[-1])


async def clients_phase(system: System, args: argparse.Namespace) -> dict[str, Any]:
    direct = await system.member_url("a")
    runs = [run_client("clients", direct, args.client_requests) for _ in range(args.repeat)]
    keys = [k for k in runs[0] if k not in ("event", "loop")]
    return {
        "runs": runs,
        "summary": {k: summarize([r[k] for r in runs], "requests_per_s") for k in keys},
        "cpu": {k: summarize([r[k] for r in runs], "client_cpu_us_per_request") for k in keys},
    }


#: The held counts at which the held phase reads the proxy's RSS (issue 20: 0, 1,000, 5,000 and
#: 10,000 on one replica; the slope is taken between the second and the last).
HELD_STAGES: Final = (1000, 5000)


async def held_phase(system: System, args: argparse.Namespace) -> dict[str, Any]:
    """N requests for member c (parked, slow to load), held in steps; RSS at each step (once the
    proxy's ``modelpool_held_requests`` says they are all held), CPU, and every answer."""
    await system.wait_resident("a")
    proxy = system.start_proxy(args.proxy_variant, args.fast_stack_path)
    await wait_proxy_ready(proxy)
    pid = proxy.popen.pid
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        for _ in range(50):  # warm the fast path: the proxy's steady state before holding
            await http.post(proxy.url + "/v1/chat/completions", content=chat_body("model-a"))
    await anyio.sleep(1)
    rss_before = rss_bytes(pid)
    stages = [n for n in HELD_STAGES if n < args.held]
    client = subprocess.Popen(  # noqa: ASYNC220 (its lines are awaited on purpose)
        [sys.executable, "-m", "bench.dataplane_clients", "hold", proxy.url, str(args.held),
         "--model", "model-c", "--timeout", str(args.held_load_seconds + 120),
         "--stages", ",".join(map(str, stages))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=REPO,
    )  # fmt: skip
    assert client.stdin is not None
    assert client.stdout is not None
    started = time.monotonic()
    steps: list[dict[str, Any]] = [{"held": 0, "rss_bytes": rss_before, "held_metric": 0.0}]
    for target in [*stages, args.held]:
        written = json.loads(client.stdout.readline())
        steps.append(await held_step(proxy.url, pid, target, written["seconds"]))
        log(f"held {target}: RSS {steps[-1]['rss_bytes'] / 2**20:.1f} MiB")
        if target != args.held:
            client.stdin.write("\n")
            client.stdin.flush()
    written_at = time.monotonic()
    rss_held = steps[-1]["rss_bytes"]
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    await anyio.sleep(5)
    cpu_holding = (cpu_seconds(pid) - cpu0) / (time.monotonic() - wall0)
    covered = (await held_requests_metric(proxy.url) or 0.0) >= args.held
    rss_peak = max(rss_held, rss_bytes(pid))
    out, err = client.communicate(timeout=args.held_load_seconds + 180)
    done = json.loads(out.strip().splitlines()[-1])
    rss_after = rss_bytes(pid)
    proxy.stop(grace=10)
    system.processes.remove(proxy)
    if client.returncode != 0:
        raise RuntimeError(f"hold client failed:\n{err[-3000:]}")
    return {
        "requests": args.held,
        "steps": steps,
        "write_seconds": steps[-1]["write_seconds"],
        "held_metric": steps[-1]["held_metric"],
        "hold_covered_measurement": covered,
        "rss_before_bytes": rss_before,
        "rss_held_bytes": rss_peak,
        "rss_after_bytes": rss_after,
        "rss_per_held_request_bytes": (rss_peak - rss_before) / args.held,
        "rss_slope_bytes": held_slope(steps),
        "cpu_cores_while_holding": cpu_holding,
        "statuses": done["statuses"],
        "unanswered": done["unanswered"],
        "all_answered_200": done["statuses"] == {"200": args.held},
        "answer_spread_seconds": done["spread_seconds"],
        "seconds_from_written_to_last_answer": (done["last_answer"] or 0) - written_at
        if done["last_answer"] and done["last_answer"] > written_at
        else None,
        "held_load_seconds": args.held_load_seconds,
        "elapsed_seconds": time.monotonic() - started,
    }


async def held_step(url: str, pid: int, target: int, write_seconds: float) -> dict[str, Any]:
    """The proxy's RSS once its ``modelpool_held_requests`` reads ``target`` (and 1 s after, so
    the last reads and the first wake-up are done)."""

    async def all_held() -> bool:
        return (await held_requests_metric(url) or 0.0) >= target

    await eventually(all_held, 60, f"{target} requests held", 0.25)
    await anyio.sleep(1)
    return {
        "held": target,
        "rss_bytes": rss_bytes(pid),
        "held_metric": await held_requests_metric(url),
        "write_seconds": write_seconds,
    }


def held_slope(steps: Sequence[dict[str, Any]]) -> float | None:
    """RSS added per held request between the first step with requests and the last."""
    held = [s for s in steps if s["held"] > 0]
    if len(held) < 2:
        return None
    first, last = held[0], held[-1]
    added: int = last["rss_bytes"] - first["rss_bytes"]
    count: int = last["held"] - first["held"]
    return added / count


async def held_requests_metric(url: str) -> float | None:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        text = (await http.get(url + "/metrics")).text
    total = None
    for line in text.splitlines():
        if line.startswith("modelpool_held_requests"):
            total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


# -- slow clients --------------------------------------------------------------------------------


async def slow_phase(
    system: System, args: argparse.Namespace, tools: dict[str, str]
) -> dict[str, Any]:
    """Issue 20's slow clients at scale, on one replica with its default limits: ``--slow-held``
    requests held for c (whose load, ``--slow-load-seconds``, outlasts the measurement) while
    ``--slow`` slow or idle connections are open and wrk sends normal requests for d, the
    resident of a second pool (a swap closes admission to its own pool's resident). Measured:
    the normal requests' p50/p99 with and without the slow load, when the proxy closed each
    slow socket, its RSS, and the renewals of the pool Lease it holds while driving the swap."""
    proxy = system.start_proxy(args.proxy_variant, args.fast_stack_path)
    await wait_proxy_ready(proxy)
    await make_resident(system, proxy.url, "a")
    await system.wait_resident("d", pool=NORMAL_POOL)
    await set_load(system.admin, "c", args.slow_load_seconds)
    pid = proxy.popen.pid
    script = system.workdir / "chat-d.lua"
    script.write_text(WRK_SCRIPT.format(body=chat_body("model-d").decode()))
    wrk(tools["wrk"], proxy.url, script, 4, 1)  # warm-up
    quiet = await anyio.to_thread.run_sync(
        wrk, tools["wrk"], proxy.url, script, 1, args.slow_wrk_seconds
    )
    log(f"slow: without slow load p50 {quiet['p50_us']} us p99 {quiet['p99_us']} us")
    recorder = Recorder(system.admin)
    samples: list[int] = []
    rss_idle = rss_bytes(pid)
    async with anyio.create_task_group() as group:
        group.start_soon(recorder.run, "lease", LEASES)
        group.start_soon(sample_rss, pid, samples)
        await anyio.sleep(1)  # the watch is open before the claim
        started = time.monotonic()
        loaded = await slow_load(proxy.url, pid, args, tools, script)
        group.cancel_scope.cancel()
    proxy.stop(grace=10)
    system.processes.remove(proxy)
    return {
        "normal_without_slow_load": quiet,
        **loaded,
        "rss_idle_bytes": rss_idle,
        "rss_max_bytes": max(samples, default=rss_idle),
        "lease": lease_renewals(recorder.seen, proxy.identity, started),
        "limits": {
            "head_timeout_seconds": DEFAULT_HEAD_TIMEOUT_SECONDS,
            "body_read_timeout_seconds": DEFAULT_BODY_READ_TIMEOUT_SECONDS,
        },
        "slow_connections": args.slow,
        "held_requests": args.slow_held,
        "held_load_seconds": args.slow_load_seconds,
        "head_interval_seconds": args.slow_head_interval,
    }


async def slow_load(
    url: str, pid: int, args: argparse.Namespace, tools: dict[str, str], script: Path
) -> dict[str, Any]:
    """Hold, open the slow sockets, run wrk through them; every answer and every close."""
    hold = client_process("hold", url, args.slow_held, "--model", "model-c",
                          "--timeout", str(args.slow_load_seconds + 180))  # fmt: skip
    await next_line(hold)  # every held request written

    wanted: int = args.slow_held

    async def all_held() -> bool:
        return (await held_requests_metric(url) or 0.0) >= wanted

    await eventually(all_held, 60, f"{args.slow_held} requests held", 0.25)
    rss_held = rss_bytes(pid)
    limit = DEFAULT_BODY_READ_TIMEOUT_SECONDS + 30  # the client closes what is open by then
    slow = client_process("slow", url, args.slow, "--head-interval",
                          str(args.slow_head_interval), "--timeout", str(limit))  # fmt: skip
    opened = await next_line(slow)
    rss_slow = rss_bytes(pid)
    log(f"slow: {args.slow_held} held, {args.slow} slow sockets open; wrk")
    during = await anyio.to_thread.run_sync(
        wrk, tools["wrk"], url, script, 1, args.slow_wrk_seconds
    )
    log(f"slow: with slow load p50 {during['p50_us']} us p99 {during['p99_us']} us")
    closed = await finish(slow)
    covered = (await held_requests_metric(url) or 0.0) >= args.slow_held
    answered = await finish(hold)
    return {
        "normal_with_slow_load": during,
        "slow_open_seconds": opened["seconds"],
        "slow_sockets": closed["kinds"],
        "hold_covered_measurement": covered,
        "held_statuses": answered["statuses"],
        "held_unanswered": answered["unanswered"],
        "held_all_answered_200": answered["statuses"] == {"200": args.slow_held},
        "rss_held_bytes": rss_held,
        "rss_held_and_slow_bytes": rss_slow,
    }


async def finish(process: subprocess.Popen[str]) -> Object:
    out, err = await anyio.to_thread.run_sync(process.communicate)
    if process.returncode != 0:
        raise RuntimeError(f"client failed:\n{err[-3000:]}")
    record: Object = json.loads(out.strip().splitlines()[-1])
    return record


async def sample_rss(pid: int, samples: list[int]) -> None:
    while True:
        with contextlib.suppress(OSError, RuntimeError):
            samples.append(rss_bytes(pid))
        await anyio.sleep(0.5)


async def make_resident(system: System, url: str, member: str) -> None:
    """``member`` resident in pool gpu-0 (after the held phase c is): one request for it."""
    if (await system.pool_status()).get("residentMember") != member:
        async with httpx.AsyncClient(timeout=300, trust_env=False) as http:
            answer = await http.post(
                url + "/v1/chat/completions", content=chat_body(f"model-{member}")
            )
            if answer.status_code != 200:
                raise RuntimeError(f"{member}: {answer.status_code} {answer.text}")
    await system.wait_resident(member)


async def set_load(admin: KubeClient, member: str, seconds: float) -> None:
    """The (parked) member's simulated load, for its next pod."""
    args = ["--parallel", "4", "--sim-load-seconds", str(seconds)]
    await admin.patch(ISVC, member, {"spec": {"args": args}}, NAMESPACE)


def lease_renewals(seen: Sequence[Seen], identity: str, since: float) -> Object:
    """The pool Lease while ``identity`` held it: its renewals (``renewTime`` steps, the holder's
    own stamps, and their arrival on our watch) against the period (duration / 3), and whether
    its holder or ``leaseTransitions`` ever moved."""
    name = pool_lease_name(POOL)
    specs = [
        (s.at, s.obj.get("spec") or {})
        for s in seen
        if s.kind == "lease" and s.at >= since and s.obj["metadata"]["name"] == name
    ]
    ours = [(at, spec) for at, spec in specs if spec.get("holderIdentity") == identity]
    if not ours:
        return {"claimed": False}
    first = ours[0][0]
    holders = {str(spec["holderIdentity"]) for at, spec in specs if at >= first
               and at <= ours[-1][0] and spec.get("holderIdentity")}  # fmt: skip
    stamps: dict[str, float] = {}
    for at, spec in ours:
        stamps.setdefault(str(spec.get("renewTime")), at)
    renew = [datetime.fromisoformat(t).timestamp() for t in stamps]
    arrivals = list(stamps.values())
    period = float(ours[0][1].get("leaseDurationSeconds") or 0) / 3
    intervals = [b - a for a, b in itertools.pairwise(renew)]
    seen_intervals = [b - a for a, b in itertools.pairwise(arrivals)]
    transitions = sorted({int(spec.get("leaseTransitions") or 0) for _, spec in ours})
    return {
        "claimed": True,
        "holders_while_held": sorted(holders),
        "holder_changed": holders != {identity},
        "lease_transitions": transitions,
        "transitions_changed": len(transitions) > 1,
        "renewals": len(intervals),
        "period_seconds": period,
        "renew_intervals_seconds": intervals,
        "renew_intervals_seen_seconds": seen_intervals,
        "max_lateness_seconds": max(intervals) - period if intervals else None,
        "max_lateness_seen_seconds": max(seen_intervals) - period if seen_intervals else None,
        "held_seconds": ours[-1][0] - first,
    }


# -- swaps ---------------------------------------------------------------------------------------


@dataclass
class Seen:
    at: float
    kind: str
    type: str
    obj: Object


class Recorder:
    """Watches of the namespace, each event stamped on arrival (monotonic)."""

    RESOURCES: Final = {
        "lease": LEASES,
        "isvc": ISVC,
        "pool": POOL_RESOURCE,
        "pod": PODS,
        "slice": ENDPOINT_SLICES,
        "event": EVENTS,
    }

    def __init__(self, admin: KubeClient) -> None:
        self.admin = admin
        self.seen: list[Seen] = []

    async def run(self, kind: str, resource: Resource) -> None:
        listed = await self.admin.list(resource, NAMESPACE)
        async with self.admin.watch(
            resource, NAMESPACE, resource_version=listed.resource_version
        ) as events:
            async for event in events:
                if event.type != "BOOKMARK":
                    self.seen.append(Seen(time.monotonic(), kind, event.type, event.object))


def _first(seen: list[Seen], since: float, kind: str, test: Any) -> float | None:
    for s in seen:
        if s.at >= since and s.kind == kind and test(s):
            return s.at
    return None


def swap_phases(seen: list[Seen], t0: float, answered: float, old: str, new: str) -> Object:
    """One swap's phase boundaries, in seconds after the request was sent."""

    def lease_claimed(s: Seen) -> bool:
        meta = s.obj["metadata"]
        return (
            meta["name"] == pool_lease_name(POOL)
            and bool((s.obj.get("spec") or {}).get("holderIdentity"))
            and (meta.get("annotations") or {}).get(TARGET_ANNOTATION) == new
        )

    def slot(name: str, value: str) -> Any:
        """The pool's decision about ``name`` (its ``status.members[].slot``) reads ``value``."""

        def test(s: Seen) -> bool:
            members = (s.obj.get("status") or {}).get("members") or ()
            return any(m.get("name") == name and m.get("slot") == value for m in members)

        return test

    def pod_of(name: str, type_: str) -> Any:
        def test(s: Seen) -> bool:
            labels = s.obj["metadata"].get("labels") or {}
            return labels.get(ISVC_LABEL) == name and s.type == type_

        return test

    def slice_ready(s: Seen) -> bool:
        labels = s.obj["metadata"].get("labels") or {}
        return labels.get("kubernetes.io/service-name") == new and any(
            (e.get("conditions") or {}).get("ready") for e in s.obj.get("endpoints") or ()
        )

    def resident(s: Seen) -> bool:
        status = s.obj.get("status") or {}
        return status.get("residentMember") == new and status.get("phase") == "Ready"

    def event(reason: str) -> Any:
        return lambda s: s.obj.get("reason") == reason

    def isvc_ready(s: Seen) -> bool:
        return (
            s.obj["metadata"]["name"] == new and (s.obj.get("status") or {}).get("phase") == "Ready"
        )

    marks = {
        "claim": _first(seen, t0, "lease", lease_claimed),
        "swap_started_event": _first(seen, t0, "event", event("SwapStarted")),
        "old_released": _first(seen, t0, "pool", slot(old, "Released")),
        "old_pod_gone": _first(seen, t0, "pod", pod_of(old, "DELETED")),
        "owner_granted": _first(seen, t0, "pool", slot(new, "Granted")),
        "new_pod_created": _first(seen, t0, "pod", pod_of(new, "ADDED")),
        "new_endpoint_ready": _first(seen, t0, "slice", slice_ready),
        "new_isvc_ready": _first(seen, t0, "isvc", isvc_ready),
        "pool_resident_ready": _first(seen, t0, "pool", resident),
        "swap_completed_event": _first(seen, t0, "event", event("SwapCompleted")),
        "answered": answered,
    }
    return {k: (v - t0 if v is not None else None) for k, v in marks.items()}


def split(marks: Object) -> dict[str, float | None]:
    """Durations of the phases the issue names, from the marks (None where a mark is missing)."""

    def between(a: str, b: str) -> float | None:
        x, y = marks.get(a), marks.get(b)
        return y - x if x is not None and y is not None else None

    ready_seen = max(
        (marks[k] for k in ("new_endpoint_ready", "new_isvc_ready", "pool_resident_ready")
         if marks.get(k) is not None), default=None,
    )  # fmt: skip
    hold = marks["answered"]
    load = between("new_pod_created", "new_endpoint_ready")
    out: dict[str, float | None] = {
        "hold": hold,
        "claim": marks["claim"],
        "drain_wait": between("claim", "old_released"),
        "old_pods_gone": between("old_released", "old_pod_gone"),
        "owner_scaled": between("old_pod_gone", "owner_granted"),
        "pod_created": between("owner_granted", "new_pod_created"),
        "member_load": load,
        "ready_seen": ready_seen - marks["new_endpoint_ready"]
        if ready_seen is not None and marks.get("new_endpoint_ready") is not None
        else None,
        "forward": hold - ready_seen if ready_seen is not None else None,
        # No request was in flight on the incumbent: its in-flight wait is 0 here.
        "control_plane_share": hold - load if load is not None else None,
    }
    # What is neither ours nor the member's load: the Deployment controller's and kubelet's work
    # (the node stand-in's here) and the old member's own exit (SIGTERM to process gone).
    node = [out["old_pods_gone"], out["pod_created"]]
    out["node_and_old_member_exit"] = sum(node) if None not in node else None  # type: ignore[arg-type]
    ours = [out[k] for k in ("claim", "drain_wait", "owner_scaled", "ready_seen", "forward")]
    out["ours_only"] = sum(ours) if None not in ours else None  # type: ignore[arg-type]
    return out


async def swap_phase(system: System, args: argparse.Namespace) -> dict[str, Any]:
    proxy = system.start_proxy(args.proxy_variant, args.fast_stack_path)
    await wait_proxy_ready(proxy)
    recorder = Recorder(system.admin)
    swaps: list[Object] = []
    resident = str((await system.pool_status()).get("residentMember"))
    async with anyio.create_task_group() as group:
        for kind, resource_ in Recorder.RESOURCES.items():
            group.start_soon(recorder.run, kind, resource_)
        await anyio.sleep(1)
        async with httpx.AsyncClient(timeout=120, trust_env=False) as http:
            for index in range(args.swaps):
                target = "b" if resident != "b" else "a"
                await system.wait_resident(resident)
                await anyio.sleep(args.swap_pause)
                t0 = time.monotonic()
                answer = await http.post(
                    proxy.url + "/v1/chat/completions", content=chat_body(f"model-{target}")
                )
                answered = time.monotonic()
                if answer.status_code != 200:
                    raise RuntimeError(f"swap {index}: {answer.status_code} {answer.text}")
                await anyio.sleep(0.5)  # the last watch events (SwapCompleted, Lease release)
                marks = swap_phases(recorder.seen, t0, answered, resident, target)
                swaps.append({"from": resident, "to": target, "marks": marks,
                              "phases": split(marks)})  # fmt: skip
                log(
                    f"swap {index} {resident}->{target}: hold {marks['answered']:.3f} s, "
                    f"control-plane share {swaps[-1]['phases']['control_plane_share'] or 0:.3f} s"
                )
                resident = target
        group.cancel_scope.cancel()
    proxy.stop(grace=10)
    system.processes.remove(proxy)
    return {
        "swaps": swaps,
        "summary": swap_summary(swaps),
        "member_load_seconds": args.load_seconds,
    }


def swap_summary(swaps: list[Object]) -> dict[str, dict[str, float]]:
    keys = list(swaps[0]["phases"]) if swaps else []
    summary = {}
    for key in keys:
        values = sorted(s["phases"][key] for s in swaps if s["phases"][key] is not None)
        if values:
            summary[key] = {
                "median": statistics.median(values),
                "p90": values[int(0.9 * (len(values) - 1))],
                "min": values[0],
                "max": values[-1],
                "n": len(values),
            }
    return summary


# -- report --------------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    lines: list[str] = []
    fast = results.get("fast")
    if fast:
        s = fast["summary"]
        lines += [
            "fast path (wrk: 1 connection for latency, 32 for requests/s; min / median of "
            f"{results['config']['repeat']} rounds)",
            "| target | p50 µs | p99 µs | added p50 µs | added p99 µs | requests/s | x nginx |",
            "|---|---|---|---|---|---|---|",
        ]
        d = s["direct"]
        ng = s["nginx"]["requests_per_s"]["median"]
        for name, row in s.items():
            added50 = row["p50_us"]["median"] - d["p50_us"]["median"]
            added99 = row["p99_us"]["median"] - d["p99_us"]["median"]
            lines.append(
                f"| {name} | {row['p50_us']['min']:.0f} / {row['p50_us']['median']:.0f} | "
                f"{row['p99_us']['min']:.0f} / {row['p99_us']['median']:.0f} | "
                f"{added50:.0f} | {added99:.0f} | "
                f"{row['requests_per_s']['min']:.0f} / {row['requests_per_s']['median']:.0f} | "
                f"{row['requests_per_s']['median'] / ng:.2f} |"
            )
    stream = results.get("stream")
    if stream:
        s = stream["summary"]
        lines += [
            "",
            "streaming (added by the proxy, p50 per run; min / median of runs): TTFB "
            f"{s['ttfb_added_us']['min']:.0f} / {s['ttfb_added_us']['median']:.0f} µs, per chunk "
            f"{s['per_chunk_added_us']['min']:.1f} / {s['per_chunk_added_us']['median']:.1f} µs",
        ]
    clients = results.get("clients")
    if clients:
        lines += ["", "| upstream client | requests/s (min / median) | client CPU µs/request |",
                  "|---|---|---|"]  # fmt: skip
        for name, row in clients["summary"].items():
            cpu = clients["cpu"][name]
            lines.append(
                f"| {name} | {row['min']:.0f} / {row['median']:.0f} | {cpu['median']:.0f} |"
            )
    held = results.get("held")
    if held:
        lines += [
            "",
            f"held: {held['requests']} requests, RSS {held['rss_before_bytes'] / 2**20:.1f} -> "
            f"{held['rss_held_bytes'] / 2**20:.1f} MiB "
            f"({held['rss_per_held_request_bytes']:.0f} B per held request), CPU while holding "
            f"{held['cpu_cores_while_holding'] * 100:.1f} % of a core, answers "
            f"{held['statuses']}, unanswered {held['unanswered']}",
        ]
        if held.get("steps"):
            steps = ", ".join(
                f"{s['held']}: {s['rss_bytes'] / 2**20:.1f} MiB" for s in held["steps"]
            )
            slope = held.get("rss_slope_bytes") or 0.0
            lines.append(
                f"held RSS by count: {steps}; slope {slope:.0f} B ({slope / 1024:.1f} KiB) per "
                f"request; hold covered the measurement: {held.get('hold_covered_measurement')}"
            )
    slow = results.get("slow")
    if slow:
        lines += ["", *slow_report(slow)]
    swap = results.get("swap")
    if swap:
        title = f"swaps ({len(swap['swaps'])}; member load {swap['member_load_seconds']} s)"
        lines += [
            "",
            title,
            "| phase | median s | p90 s | min s | max s |",
            "|---|---|---|---|---|",
        ]
        for key, row in swap["summary"].items():
            lines.append(
                f"| {key} | {row['median']:.3f} | {row['p90']:.3f} | {row['min']:.3f} | "
                f"{row['max']:.3f} |"
            )
    return "\n".join(lines)


def slow_report(slow: Object) -> list[str]:
    quiet, loaded = slow["normal_without_slow_load"], slow["normal_with_slow_load"]
    lease = slow["lease"]
    lines = [
        f"slow clients: {slow['slow_connections']} slow sockets + {slow['held_requests']} held "
        f"on one replica; normal requests (wrk -c1, model-d) p50 / p99 µs: without "
        f"{quiet['p50_us']} / {quiet['p99_us']}, with {loaded['p50_us']} / {loaded['p99_us']} "
        f"(errors {loaded['socket_errors'] + loaded['non_2xx']})",
        "| kind | opened | closed by proxy | answer | open→close min / p50 / p99 / max s |",
        "|---|---|---|---|---|",
    ]
    for kind, row in slow["slow_sockets"].items():
        c = row["close_seconds"] or {}
        times = " / ".join(f"{c[k]:.2f}" for k in ("min", "p50", "p99", "max")) if c else "-"
        lines.append(f"| {kind} | {row['opened']} | {row['closed_by_server']} | "
                     f"{row['statuses']} | {times} |")  # fmt: skip
    lines.append(
        f"RSS idle {slow['rss_idle_bytes'] / 2**20:.1f}, held {slow['rss_held_bytes'] / 2**20:.1f}"
        f", held + slow {slow['rss_held_and_slow_bytes'] / 2**20:.1f}, max "
        f"{slow['rss_max_bytes'] / 2**20:.1f} MiB; held answered {slow['held_statuses']}; hold "
        f"covered the measurement: {slow['hold_covered_measurement']}"
    )
    if lease.get("claimed") and lease["renewals"]:
        lines.append(
            f"pool Lease: {lease['renewals']} renewals, period {lease['period_seconds']:.1f} s, "
            f"max lateness {lease['max_lateness_seconds']:.3f} s (renewTime) / "
            f"{lease['max_lateness_seen_seconds']:.3f} s (seen); holder changed "
            f"{lease['holder_changed']}, leaseTransitions {lease['lease_transitions']}"
        )
    return lines


async def bench(args: argparse.Namespace, tools: dict[str, str]) -> dict[str, Any]:
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "nofile": raise_nofile(),
        "cpus": os.cpu_count(),
    }
    workdir = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    try:
        async with running_system(args, workdir) as system:
            for phase in PHASES:
                if phase not in args.phases:
                    continue
                log(f"phase {phase}")
                started = time.monotonic()
                if phase == "fast":
                    results[phase] = await fast_phase(system, args, tools)
                elif phase == "stream":
                    results[phase] = await stream_phase(system, args)
                elif phase == "clients":
                    results[phase] = await clients_phase(system, args)
                elif phase == "held":
                    results[phase] = await held_phase(system, args)
                elif phase == "slow":
                    results[phase] = await slow_phase(system, args, tools)
                else:
                    results[phase] = await swap_phase(system, args)
                results[phase]["seconds"] = time.monotonic() - started
    finally:
        if args.keep:
            log(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--variants", default=",".join(VARIANTS), help="proxies in the fast phase")
    parser.add_argument(
        "--proxy-variant",
        default="httptools-aiohttp",
        help="the proxy of the stream, held and swap phases (the shipped configuration)",
    )
    parser.add_argument(
        "--fast-stack-path",
        default=os.environ.get("BENCH_FAST_STACK_PATH", ""),
        help="a directory holding uvloop and httptools when they are not installed",
    )
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per wrk run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="py-spy each proxy (fast phase)")
    parser.add_argument("--stream-requests", type=int, default=50)
    parser.add_argument("--stream-tokens", type=int, default=64)
    parser.add_argument("--client-requests", type=int, default=2000)
    parser.add_argument("--held", type=int, default=10000)
    parser.add_argument(
        "--held-load-seconds",
        type=float,
        default=40.0,
        help="member c's load: long enough that the hold covers every step's measurement",
    )
    parser.add_argument("--slow", type=int, default=2000, help="slow phase: slow connections")
    parser.add_argument("--slow-held", type=int, default=5000, help="slow phase: held requests")
    parser.add_argument(
        "--slow-load-seconds",
        type=float,
        default=75.0,
        help="slow phase: member c's load, long enough that the hold covers the measurement",
    )
    parser.add_argument("--slow-head-interval", type=float, default=3.0)
    parser.add_argument(
        "--slow-wrk-seconds", type=float, default=25.0, help="slow phase: each wrk run"
    )
    parser.add_argument("--swaps", type=int, default=20)
    parser.add_argument("--swap-pause", type=float, default=0.5)
    parser.add_argument("--load-seconds", type=float, default=1.0, help="members a and b")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    args.phases = [p for p in args.phases.split(",") if p]
    args.variants = [v for v in args.variants.split(",") if v]
    for phase in args.phases:
        if phase not in PHASES:
            parser.error(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    for variant in [*args.variants, args.proxy_variant]:
        if variant not in VARIANTS:
            parser.error(f"unknown proxy variant {variant!r}; known: {', '.join(VARIANTS)}")
    args.stamp = time.strftime("%Y%m%d-%H%M%S")
    return args


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--report"]:  # re-derive the swap phases of a saved record and print it
        results = json.loads(Path(argv[1]).read_text())
        if "swap" in results:
            for swap in results["swap"]["swaps"]:
                swap["phases"] = split(swap["marks"])
            results["swap"]["summary"] = swap_summary(results["swap"]["swaps"])
        print(report(results))
        return 0
    args = parse_args(argv)
    tools = require_tools()
    require_fast_stack(args)
    if not os.environ.get("KUBEBUILDER_ASSETS"):
        done = subprocess.run(
            [str(REPO / "hack" / "build-controlplane.sh")], capture_output=True, text=True,
            check=True,
        )  # fmt: skip
        os.environ["KUBEBUILDER_ASSETS"] = done.stdout.strip().splitlines()[-1]
    args.output.mkdir(parents=True, exist_ok=True)
    results = anyio.run(bench, args, tools)
    path = args.output / f"proxy_bench-{args.stamp}.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    print(report(results))
    print(f"\nfull record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
