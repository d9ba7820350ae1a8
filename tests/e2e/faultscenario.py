"""The fault harness's scripted swap: one run, one fault, judged by the invariants and the end.

*Why one module of this size:* one run's processes (operators, proxies and their fault proxies),
its client and its supervisor share the run's state and its clock; the judging lives apart
(:mod:`tests.e2e.faultoracle`), the plan too (:mod:`tests.e2e.faultplan`).

One run (docs/faults.md), in the namespace the node stand-in and the pool invariant monitor watch:

1. Members ``a`` and ``b`` (simulators), a pool of them warm on ``a``, a ModelRouter for it; the
   operator (one, or two for the paused leader) and one router-proxy replica, each through its own
   :class:`~tests.e2e.faultproxy.FaultProxy`, with short Leases (:data:`OPERATOR_FLAGS`,
   :data:`POOL_LEASE_SECONDS`) so a crashed holder is replaced within the run.
2. The proxies are armed and a client asks the router for ``b``'s model, retrying as a client
   told ``Retry-After`` would, and through a new replica when its replica was killed, until it is
   answered 200 or :data:`CLIENT_DEADLINE_SECONDS` pass.
3. The fault happens where the :class:`~tests.e2e.faultplan.Injection` says. A killed process is
   replaced as its Deployment would (a new process, a new identity); a paused leader is continued
   once the other operator holds the Lease.
4. **The oracle**: the monitor saw no two members of the pool at once (pods, in watch order, and
   processes); the pool settles on ``b`` (the member the last request asked for) with ``a``'s
   Deployment at 0 and no pod, and no Lease held; every answer was a 200 from ``b``'s model or a
   503 with ``Retry-After``, each within the pool's budget (a connection cut only by a killed
   replica); a paused leader wrote nothing after it was continued.

**The slot-server variant** (``Harness.slot_server``): the same swap in a pool with
``spec.slotServer``, where the pool loads and unloads models in one long-lived router-mode server
(``<pool>-slot``, played by the node stand-in) instead of scaling member Deployments. The members
read their weights from node files (``file://``, written into the stand-in's host root before
the pool is created); the server's pod is noted once the pool is warm, so the oracle can tell a
restarted server from the one that was there.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import msgspec

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL, slot_server_name
from controlplane.controllers.modelrouter import activation_name, proxy_name
from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.local.system import (
    OperatorProcess,
    RouterProxyProcess,
    kubeconfig_for_token,
    service_account_token,
)
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.endpoints import MEMBER_PORT_NAME, SERVICE_NAME_LABEL, ready_urls
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import ENDPOINT_SLICES, LEASES, PODS, ROLE_BINDINGS
from tests.e2e.bodies import pool_body
from tests.e2e.faultoracle import judge
from tests.e2e.faultplan import (
    CLIENT_DEADLINE_SECONDS,
    NO_FAULT,
    OPERATOR,
    PAUSED_LEADER,
    ROUTER,
    SWAP_BUDGET_SECONDS,
    InjectedFault,
    Injection,
    RunResult,
    WritePoint,
    write_points,
)
from tests.e2e.faultproxy import FaultProxy, Write
from tests.e2e.httpclients import http_client
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kubectl import REPO
from tests.e2e.operator_process import LocalProcess, wait_until_ready
from tests.e2e.proxies import isvc_body
from tests.e2e.test_slot_server import MODELS, member_body
from tests.e2e.test_standin_pods import node_folder
from tests.e2e.waiting import eventually

#: The operator's leader election, short so that a crashed leader is replaced within a run.
LEASE_DURATION: Final = 3.0
OPERATOR_FLAGS: Final = (
    "--leader-elect-lease-duration", str(LEASE_DURATION),
    "--leader-elect-renew-deadline", "2",
    "--leader-elect-retry-period", "0.5",
)  # fmt: skip
#: The router-proxy's pool Lease.
POOL_LEASE_SECONDS: Final = 3
#: How long a paused leader stays stopped beyond the moment its successor holds the Lease.
PAUSE_AFTER_TAKEOVER_SECONDS: Final = 1.0
#: The slot server's own arguments in the slot-server variant (as tests/e2e/test_slot_server.py).
SLOT_SERVER_ARGS: Final = ("--parallel", "2")


@dataclass
class Attempt:
    started: float
    ended: float = 0.0
    status: int | None = None
    retry_after: str | None = None
    model: str | None = None
    code: str = ""
    error: str = ""
    replica: str = ""


@dataclass
class Side:
    """One process kind of a run: its proxies and processes, the live one last."""

    proxies: list[FaultProxy] = field(default_factory=list)
    processes: list[LocalProcess] = field(default_factory=list)

    def writes(self) -> list[Write]:
        return sorted((w for p in self.proxies for w in p.writes), key=lambda w: w.at)


@dataclass
class Harness:
    """What every run shares: the cluster, the namespace the stand-in and monitor watch."""

    admin: KubeClient
    admin_config: ClientConfig
    admin_kubeconfig: Path
    namespace: str
    workdir: Path
    started: list[LocalProcess]
    monitor: PoolInvariantMonitor
    operator_token_kubeconfig: Path
    #: The slot-server variant: the pool has ``spec.slotServer``, members ``file://`` weights.
    slot_server: bool = False
    runs: int = 0

    async def reference(self) -> tuple[RunResult, list[WritePoint]]:
        """A fault-free run, and the write points of its swap."""
        result, run = await self.run(None)
        assert not result.failures, f"the fault-free run failed: {result.failures}"
        points = write_points(OPERATOR, run.operator.writes(), run.roles, run.lease)
        points += write_points(ROUTER, run.router.writes(), run.roles, run.lease)
        return result, points

    async def run(self, injection: Injection | None) -> tuple[RunResult, Run]:
        self.runs += 1
        run = Run(self, self.runs, injection)
        started = time.monotonic()
        try:
            failures = await run.execute()
        finally:
            await run.cleanup()
            run.write_record(self.workdir / f"run-{run.pool}.txt")
        seen = run.seen(failures)
        return (
            RunResult(
                injection or Injection(NO_FAULT, "-", "fault-free"),
                run.fault.fired,
                failures,
                seen,
                time.monotonic() - started,
            ),
            run,
        )


class Run:
    """One scripted swap under one fault."""

    def __init__(self, harness: Harness, number: int, injection: Injection | None) -> None:
        self.h, self.injection = harness, injection
        self.number = number
        prefix = f"f{number}"
        self.pool, self.a, self.b, self.router_name = (
            prefix, f"{prefix}-a", f"{prefix}-b", f"{prefix}-r",
        )  # fmt: skip
        self.roles = {self.a: "a", self.b: "b", self.pool: "pool", self.router_name: "router"}
        self.lease = f"faults-{harness.namespace}-{prefix}"
        self.fault = InjectedFault(injection, self.roles, self.lease)
        self.operator, self.router = Side(), Side()
        self.attempts: list[Attempt] = []
        #: Router-proxy replicas that answered ready, the newest last (where a client goes).
        self.serving: list[RouterProxyProcess] = []
        self.resumed_at: float | None = None
        self.paused: OperatorProcess | None = None
        self._continued = anyio.Event()
        self.router_kubeconfig: Path | None = None
        #: The slot-server variant: the server's pod (uid) once the pool is warm, and its address.
        self.slot_pod_at_start: list[str] = []
        self.slot_url = ""
        self.notes: list[str] = []
        self.timeline: list[tuple[float, str]] = []
        self._identities = 0

    # -- processes ----------------------------------------------------------------------------

    def _proxy(self, side: Side, name: str) -> FaultProxy:
        proxy = FaultProxy(self.h.admin_config, name, fault=self.fault).start()
        side.proxies.append(proxy)
        return proxy

    def _identity(self, kind: str) -> str:
        self._identities += 1
        return f"{kind}{self.number}-{self._identities}"

    async def start_operator(self) -> OperatorProcess:
        identity = self._identity("op")
        proxy = self._proxy(self.operator, identity)
        proxy.armed = self.fault.armed_at > 0  # a replacement's writes count too
        kubeconfig = proxy.kubeconfig(
            self.h.operator_token_kubeconfig, self.h.workdir / f"{identity}.kubeconfig"
        )
        process = OperatorProcess(
            kubeconfig, self.h.workdir, self.lease, identity, cwd=REPO, extra_args=OPERATOR_FLAGS
        )
        proxy.pid = process.popen.pid
        self.operator.processes.append(process)
        self.h.started.append(process)
        await wait_until_ready(process, f"{process.probe_url}/readyz", interval=0.1)
        return process

    async def start_router(self, token_kubeconfig: Path) -> RouterProxyProcess:
        identity = self._identity("proxy")
        proxy = self._proxy(self.router, identity)
        proxy.armed = self.fault.armed_at > 0
        kubeconfig = proxy.kubeconfig(token_kubeconfig, self.h.workdir / f"{identity}.kubeconfig")
        process = RouterProxyProcess(
            kubeconfig, self.h.workdir, self.h.namespace, identity, router=self.router_name,
            cwd=REPO, extra_args=("--lease-duration-seconds", str(POOL_LEASE_SECONDS)),
        )  # fmt: skip
        proxy.pid = process.popen.pid
        self.router.processes.append(process)
        self.h.started.append(process)
        await wait_until_ready(process, f"{process.url}/readyz", interval=0.1)
        self.serving.append(process)
        return process

    # -- the run ------------------------------------------------------------------------------

    async def execute(self) -> list[str]:
        operators = 2 if self.injection and self.injection.pattern == PAUSED_LEADER else 1
        for _ in range(operators):
            await self.start_operator()
        # Supervised from the start to the end of the judging: an operator that loses its Lease
        # to a starved CPU (a 2 s renew deadline) exits, during the warm-up or after the client's
        # answer as well, and its Deployment would replace it then too. Under the kind tier's load
        # a standby that took over from a paused leader lost its Lease this way just after the
        # answer came (direct readiness answers before the pool's status names b), and with no
        # supervisor left, nothing wrote b resident: the settle timed out.
        async with anyio.create_task_group() as group:
            group.start_soon(self._supervise)
            await self._set_up()
            for proxy in (*self.operator.proxies, *self.router.proxies):
                proxy.armed = True
            self.fault.armed_at = time.monotonic()
            await self._ask_for_b()
            if self.fault.fired and self.injection and self.injection.pattern == PAUSED_LEADER:
                await self._paused_leader_gone()
            failures = await judge(self)
            group.cancel_scope.cancel()
        return failures

    async def _set_up(self) -> None:
        """Members, the pool warm on ``a``, the router and its proxy replica."""
        admin, ns = self.h.admin, self.h.namespace
        for member in (self.a, self.b):
            await admin.create(InferenceService.resource(), self.member_body(member), ns)
        body = pool_body(self.pool, [self.a, self.b], self.a, f"{SWAP_BUDGET_SECONDS}s")
        if self.h.slot_server:
            body["spec"]["slotServer"] = {"args": list(SLOT_SERVER_ARGS)}
        await admin.create(ModelPool.resource(), body, ns)
        router = {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelRouter",
            "metadata": {"name": self.router_name},
            "spec": {"backends": [{"name": "gpu", "poolRef": {"name": self.pool}}]},
        }
        await admin.create(ModelRouter.resource(), router, ns)
        await eventually(self.resident_is(self.a), timeout=60, what=f"{self.pool} warm")
        if self.h.slot_server:
            self.slot_pod_at_start = await self.slot_pods()
            self.slot_url = await self.slot_server_url()

        async def rbac() -> bool:
            await admin.get(ROLE_BINDINGS, activation_name(self.router_name), ns)
            return True

        await eventually(rbac, timeout=60, what="the router's activation RoleBinding")
        token = await service_account_token(admin, ns, proxy_name(self.router_name))
        self.router_kubeconfig = kubeconfig_for_token(
            self.h.admin_kubeconfig, token, self.h.workdir / f"{self.router_name}.kubeconfig"
        )
        await self.start_router(self.router_kubeconfig)
        await anyio.sleep(0.5)  # the warm-up's writes and events are done with

    async def _paused_leader_gone(self) -> None:
        """Continue the paused leader if the swap ended first, then wait for it to exit: it
        finds its Lease taken on its first renewal."""
        if self.resumed_at is None:
            await self._continue_paused_leader()
        paused = self.paused
        assert paused is not None
        with contextlib.suppress(AssertionError):
            await eventually(lambda: _exited(paused), timeout=15, what="the paused leader to exit")
        code = paused.popen.poll()
        self.note(f"the paused leader exited {code}")

    async def _ask_for_b(self) -> None:
        deadline = time.monotonic() + CLIENT_DEADLINE_SECONDS
        body = {"model": f"model-{self.b}", "messages": [{"role": "user", "content": "hi"}]}
        async with http_client(timeout=SWAP_BUDGET_SECONDS + 20, trust_env=False) as http:
            while time.monotonic() < deadline:
                replica = next((p for p in reversed(self.serving) if p.running()), None)
                if replica is None:
                    await anyio.sleep(0.1)
                    continue
                attempt = Attempt(time.monotonic(), replica=replica.identity)
                self.attempts.append(attempt)
                try:
                    response = await http.post(f"{replica.url}/v1/chat/completions", json=body)
                    attempt.status = response.status_code
                    attempt.retry_after = response.headers.get("retry-after")
                    with contextlib.suppress(msgspec.DecodeError):
                        answer = msgspec.json.decode(response.content)
                        if isinstance(answer, dict):
                            attempt.model = answer.get("model")
                            attempt.code = str((answer.get("error") or {}).get("code") or "")
                except httpx.HTTPError as err:
                    attempt.error = f"{type(err).__name__}: {err}"
                attempt.ended = time.monotonic()
                if attempt.status == 200:
                    return
                pause = 0.2
                with contextlib.suppress(TypeError, ValueError):
                    pause = min(1.0, float(attempt.retry_after or 0.2))
                await anyio.sleep(pause)

    async def _supervise(self) -> None:
        """Replace what the fault killed, as a Deployment would; continue a paused leader once
        the other operator leads."""
        replaced: set[int] = set()
        while True:
            await anyio.sleep(0.1)
            for process in list(self.operator.processes):
                if id(process) in replaced or process.running() or process is self.paused:
                    continue
                replaced.add(id(process))
                self.note(f"{process.name} exited ({process.popen.returncode}): replaced")
                await self.start_operator()
            for process in list(self.router.processes):
                if id(process) in replaced or process.running():
                    continue
                replaced.add(id(process))
                self.note(f"{process.name} exited: replaced")
                assert self.router_kubeconfig is not None  # set before the first replica
                await self.start_router(self.router_kubeconfig)
            if self._paused_not_continued():
                await self._continue_paused_leader()

    def _paused_not_continued(self) -> bool:
        pausing = self.injection is not None and self.injection.pattern == PAUSED_LEADER
        return pausing and self.fault.fired and self.paused is None

    async def _continue_paused_leader(self) -> None:
        stopped = next(
            (p for p, x in zip(self.operator.processes, self.operator.proxies, strict=True)
             if x.injected), None,
        )  # fmt: skip
        assert isinstance(stopped, OperatorProcess)
        if self.paused is not None:
            await self._continued.wait()  # the supervisor is continuing it
            return
        self.paused = stopped

        async def taken_over() -> bool:
            lease = await self.h.admin.get(LEASES, self.lease, OPERATOR_NAMESPACE)
            holder = (lease.get("spec") or {}).get("holderIdentity")
            return bool(holder) and holder != stopped.name

        try:
            await eventually(taken_over, timeout=30, interval=0.1, what="the standby to lead")
            await anyio.sleep(PAUSE_AFTER_TAKEOVER_SECONDS)
        finally:
            stopped.popen.send_signal(signal.SIGCONT)
            self.resumed_at = time.monotonic()
            self._continued.set()
            self.note(f"SIGCONT {stopped.name}")
        self.note(f"{stopped.name} continued after {self.resumed_at - self.fault.fired_at:.1f} s")

    # -- the slot-server variant --------------------------------------------------------------

    def member_body(self, member: str) -> Any:
        """A member of the run: a simulator of its own (replicas 0, the pool raises it), or in the
        slot-server variant a model whose weights are a node file (a slot server mounts node
        paths only), written here into the stand-in's host root."""
        if not self.h.slot_server:
            return isvc_body(member, 0)
        weights = node_folder(self.h.workdir, f"{MODELS}/{member}.gguf")
        weights.parent.mkdir(parents=True, exist_ok=True)
        weights.write_bytes(b"weights the simulator's router plays")
        return member_body(member)

    async def slot_pods(self) -> list[str]:
        """The uids of the pool's slot server pods (one, unless it was replaced)."""
        selector = f"{SLOT_SERVER_LABEL}={self.pool}"
        found = await self.h.admin.list(PODS, self.h.namespace, label_selector=selector)
        return sorted(p["metadata"]["uid"] for p in found.items)

    async def slot_server_url(self) -> str:
        """The slot server's address, from its Service's EndpointSlice (as the operator finds
        it)."""
        selector = f"{SERVICE_NAME_LABEL}={slot_server_name(self.pool)}"
        slices = await self.h.admin.list(ENDPOINT_SLICES, self.h.namespace, label_selector=selector)
        (url,) = ready_urls(slices.items, MEMBER_PORT_NAME)
        return url

    # -- the oracle ---------------------------------------------------------------------------

    def resident_is(self, member: str) -> Any:
        async def probe() -> bool:
            pool = await self.h.admin.get(ModelPool.resource(), self.pool, self.h.namespace)
            status = pool.get("status") or {}
            return status.get("residentMember") == member and status.get("phase") == "Ready"

        return probe

    def note(self, what: str) -> None:
        self.notes.append(what)
        self.timeline.append((time.monotonic(), what))

    def write_record(self, path: Path) -> None:
        """The run's timeline: notes, faults and every recorded write, for a failure's reader."""
        entries = list(self.timeline)
        for side in (self.operator, self.router):
            for proxy in side.proxies:
                entries += [(at, f"{proxy.name}: {what}") for at, what in proxy.injected]
                entries += [
                    (w.at, f"{proxy.name}: {w.status} {w.describe()}") for w in proxy.writes
                ]
        start = min((at for at, _ in entries), default=0.0)
        lines = [f"{self.injection.label if self.injection else 'fault-free'}"]
        lines += [f"+{at - start:7.3f}s  {what}" for at, what in sorted(entries)]
        lines += [f"attempt: {a}" for a in self.attempts]
        path.write_text("\n".join(lines) + "\n")

    def seen(self, failures: list[str]) -> str:
        if failures:
            return failures[0][:160]
        statuses = [str(a.status or "cut") for a in self.attempts]
        extra = f"; {'; '.join(self.notes)}" if self.notes else ""
        return f"answers {' '.join(statuses)}{extra}"

    async def cleanup(self) -> None:
        self.timeline.append((time.monotonic(), "cleanup"))
        for side in (self.router, self.operator):
            for process in side.processes:
                if process is self.paused:
                    with contextlib.suppress(ProcessLookupError):
                        process.popen.send_signal(signal.SIGCONT)
                await anyio.to_thread.run_sync(partial(process.stop, grace=10))
            for proxy in side.proxies:
                await anyio.to_thread.run_sync(proxy.stop)
        admin, ns = self.h.admin, self.h.namespace
        for resource, name in (
            (ModelRouter.resource(), self.router_name),
            (ModelPool.resource(), self.pool),
            (InferenceService.resource(), self.a),
            (InferenceService.resource(), self.b),
        ):
            with contextlib.suppress(NotFound):
                await admin.delete(resource, name, ns)

        async def pods_gone() -> bool:
            # A slot server's pod is not waited for: it goes with its pool (garbage collection)
            # but takes its termination grace to, and the next run's pool, models and server are
            # its own, so the one left stopping cannot be taken for them.
            for member in (self.a, self.b):
                found = await admin.list(PODS, ns, label_selector=f"{ISVC_LABEL}={member}")
                if found.items:
                    return False
            return True

        with contextlib.suppress(AssertionError):
            await eventually(pods_gone, timeout=60, what="the run's pods gone")


async def _exited(process: LocalProcess) -> bool:
    return not process.running()
