"""The swap storm in a kind cluster: the local storm's load, chaos and judges, on the real thing.

What differs from :mod:`tests.e2e.test_storm` (which runs the same clients against proxies the
test starts itself) is where everything runs: the operator from the image under its
ServiceAccount, in two replicas (one leads through its Lease, the other waits for it; the
Deployment restarts a container that exits and replaces a pod that is deleted); the router's
proxy Deployment with :data:`REPLICAS` replicas made by the operator, under the ServiceAccount
and activation Role it wrote, with their default Lease duration; the members as pods of the
simulator image behind a real kubelet, Services and kube-proxy. The clients send through a
NodePort Service the test puts in front of the proxy pods (as a user exposes a router), so
kube-proxy picks the replica.

The chaos, in order, under load:

* a resident's ``/slots`` answers 500 for a while (the simulator's timed switch, reached through
  the API server's pod proxy): its drain is deferred, never forced;
* the proxy pod holding a pool's Lease mid-swap is deleted with ``--grace-period=0 --force``
  (after its ``/metrics`` is scraped); its Deployment replaces it;
* the operator's leader pod (the holder of its Lease) is deleted mid-swap with
  ``--grace-period=0 --force``; the step waits until another running pod holds the Lease (the
  old leader, told to stop by kubelet, may release it first) and both replicas are Available
  again, and prints the old and new leader and the seconds between;
* the operator's leader is paused: mid-swap, its container's main process is SIGSTOPped inside
  the node (its PID from ``crictl inspect``) until the other replica holds the Lease, which it
  can take only once the Lease expires, then for :data:`PAUSED_PAST_TAKEOVER` more; SIGCONT
  always follows. Woken, the old leader is fenced: it sends no write (each refused one is a
  "refused:" line in its log) and exits 1. The step waits until kubelet has restarted its
  container and both replicas are Available, asserts that the container ended with exit code 1
  and that its previous log says "lost lease", and prints the old and new leader, the seconds to
  the takeover, the exit code and how many writes it refused;
* kube-apiserver is SIGSTOPped in the node for :data:`FREEZE_SECONDS` mid-swap, then resumed
  (an operator leader that cannot renew in time exits, and its container is restarted);
* every pool-y client asks for the slow member until it is resident.

The judges are the local storm's: every 200 from the model asked, every other answer one the
design allows (the time with no operator leader, or a paused one, is a failure window of every
pool, as the freeze is), a request cut only by its own client or by the deleted replica (within
:data:`~tests.e2e.test_storm.KILL_AFTERMATH` of its deletion); the invariant monitor reading the
member pods never saw two members of a pool at once; swaps counted at most once per residency
change, with only the deleted driver's own swap allowed to go uncounted; at the end the pools
settle with no Lease held.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

import anyio
import httpx
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool, ModelRouter
from controlplane.controllers.inferenceservice import ISVC_LABEL
from controlplane.controllers.modelrouter import ROUTER_LABEL
from controlplane.controllers.rbac import OPERATOR_NAMESPACE
from controlplane.router.app import DEFAULT_MAX_BODY_BYTES
from controlplane.router.lease import DEFAULT_LEASE_DURATION_SECONDS
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import KubeError
from controlplane.runtime.resources import LEASES, PODS, SERVICES
from tests.e2e.bodies import pool_body
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.incluster import (
    OPERATOR_LABEL,
    OPERATOR_LEASE,
    ROLLOUT_TIMEOUT,
    leader_pod,
    operator_container,
    operator_lease_holder,
    operator_pods,
    previous_operator_log,
    wait_available,
    wait_operator_available,
)
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kubectl import KIND_OPERATOR_REPLICAS, kubectl
from tests.e2e.test_storm import (
    CLIENTS,
    FREEZE_SECONDS,
    LOAD_SECONDS,
    POOLS,
    ROUTER_NAME,
    SLOTS_FAILURE_SECONDS,
    SLOW_MEMBER,
    SLOW_POOL,
    SWAP_BUDGET,
    Kill,
    Storm,
    Window,
    busy_tenants,
    client,
    held_lease,
    isvc_body,
    judge_the_storm,
    mid_swap,
    swaps_in,
)
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.kind

REPLICAS: Final = 3
#: The simulator's port in a member pod (InferenceService ``spec.port`` default).
MEMBER_PORT: Final = 8080
PROXY_PORT: Final = 8000
ENTRANCE: Final = "storm-entrance"
#: How long the paused operator leader stays stopped after another replica holds its Lease.
PAUSED_PAST_TAKEOVER: Final = 2.0
#: Until another replica holds the paused leader's Lease: its 15 s duration, the standby's
#: 2 s retry with jitter, and room for this loaded machine.
TAKEOVER_TIMEOUT: Final = 60.0


@dataclass(frozen=True)
class ThroughTheService:
    """Every client request goes to the NodePort; kube-proxy picks the replica."""

    url: str
    name: str = field(default="service")

    async def pick(self, rng: random.Random) -> ThroughTheService:
        return self


async def create_pools_and_router(
    admin: KubeClient, cluster: TestCluster, namespace: str
) -> ThroughTheService:
    """The local storm's members on the simulator image, its pools, a router with
    :data:`REPLICAS` proxies on the operator's own image, and a NodePort Service in front of
    them; returns it once the pools are warm and every replica is available."""
    assert cluster.sim_image is not None
    for members in POOLS.values():
        for member in members:
            body = isvc_body(member)
            body["spec"]["image"] = cluster.sim_image
            if "--sim-load-seconds" not in body["spec"]["args"]:
                body["spec"]["args"] += ["--sim-load-seconds", str(LOAD_SECONDS)]
            await admin.create(InferenceService.resource(), body, namespace)
    for pool, members in POOLS.items():
        body = pool_body(pool, members, members[0], SWAP_BUDGET)
        await admin.create(ModelPool.resource(), body, namespace)
    router = {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "ModelRouter",
        "metadata": {"name": ROUTER_NAME},
        "spec": {
            "backends": [{"name": pool, "poolRef": {"name": pool}} for pool in POOLS],
            "proxy": {"replicas": REPLICAS},
        },
    }
    await admin.create(ModelRouter.resource(), router, namespace)
    entrance = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ENTRANCE},
        "spec": {
            "type": "NodePort",
            "selector": {ROUTER_LABEL: ROUTER_NAME},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    created = await admin.create(SERVICES, entrance, namespace)
    (port,) = [p["nodePort"] for p in created["spec"]["ports"]]
    for pool, members in POOLS.items():

        async def warm(pool: str = pool, default: str = members[0]) -> bool:
            status = (await admin.get(ModelPool.resource(), pool, namespace)).get("status") or {}
            return status.get("residentMember") == default and status.get("phase") == "Ready"

        await eventually(warm, timeout=ROLLOUT_TIMEOUT, what=f"{pool} warm with {members[0]}")
    await wait_available(admin, namespace, f"{ROUTER_NAME}", REPLICAS)
    entrance_url = f"http://{await node_address(cluster)}:{port}"
    await answering(entrance_url)
    return ThroughTheService(entrance_url)


#: Consecutive answers through the NodePort before the storm starts.
ENTRANCE_ANSWERS: Final = 10


async def answering(url: str) -> None:
    """Until the NodePort answers :data:`ENTRANCE_ANSWERS` times in a row: replicas Available is
    not enough, kube-proxy programs the Service's rules on its own sync, and connections made
    before it are refused (the storm's first requests failed to connect so, once in a while)."""
    streak = 0

    async def answered() -> bool:
        nonlocal streak
        try:
            async with http_client(timeout=2, trust_env=False) as http:
                response = await http.get(f"{url}/readyz")
            streak = streak + 1 if response.status_code == 200 else 0
        except httpx.TransportError:
            streak = 0
        return streak >= ENTRANCE_ANSWERS

    await eventually(answered, timeout=ROLLOUT_TIMEOUT, interval=0.05, what=f"{url} answering")


async def node_address(cluster: TestCluster) -> str:
    """The kind node's InternalIP: where a NodePort answers, reachable from this host."""
    jsonpath = '{.items[0].status.addresses[?(@.type=="InternalIP")].address}'
    _, address, _ = await kubectl(cluster, "get", "nodes", "-o", f"jsonpath={jsonpath}")
    return address.strip()


async def proxy_pods(admin: KubeClient, namespace: str) -> list[str]:
    """The running proxy pods not being deleted."""
    pods = await admin.list(PODS, namespace, label_selector=f"{ROUTER_LABEL}={ROUTER_NAME}")
    return [
        p["metadata"]["name"]
        for p in pods.items
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") == "Running"
    ]


async def pod_swaps(
    cluster: TestCluster, namespace: str, pod: str
) -> Counter[tuple[str, str, str]]:
    """One proxy pod's ``modelpool_swaps_total``, read through the API server's pod proxy."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}:{PROXY_PORT}/proxy/metrics"
    _, text, _ = await kubectl(cluster, "get", "--raw", path)
    return swaps_in(text)


def node_container(cluster: TestCluster) -> str:
    assert cluster.kind is not None
    return f"{cluster.kind.name}-control-plane"


async def signal_apiserver(cluster: TestCluster, signal: str) -> None:
    """Send ``signal`` to kube-apiserver inside the kind node (its static pod's process)."""
    script = (
        "for p in /proc/[0-9]*; do "
        '[ "$(cat $p/comm 2>/dev/null)" = kube-apiserver ] && kill -' + signal + " ${p#/proc/}; "
        "done; true"
    )
    await anyio.run_process(["docker", "exec", node_container(cluster), "sh", "-c", script])


async def container_pid(cluster: TestCluster, container_id: str) -> int:
    """The node's PID of a container's main process (``crictl inspect``'s ``info.pid``), from the
    ``containerID`` a pod's status gives (``containerd://ID``)."""
    runtime_id = container_id.partition("://")[2] or container_id
    done = await anyio.run_process(
        ["docker", "exec", node_container(cluster), "crictl", "inspect", runtime_id]
    )
    return int(json.loads(done.stdout)["info"]["pid"])


#: What the operator's main process runs (the image's entrypoint with ``operator``).
OPERATOR_COMMAND: Final = "controlplane operator"


async def signal_operator(cluster: TestCluster, pid: int, signal: str) -> bool:
    """Send ``signal`` to the node's process ``pid`` if its command line is still the operator's
    (a PID the kernel gave to something else is left alone); whether it was sent."""
    script = 'tr "\\0" " " </proc/$1/cmdline 2>/dev/null | grep -q "$3" || exit 3; kill -$2 $1'
    command = ["sh", "-c", script, "sh", str(pid), signal, OPERATOR_COMMAND]
    done = await anyio.run_process(
        ["docker", "exec", node_container(cluster), *command], check=False
    )
    if done.returncode not in (0, 3):
        raise RuntimeError(f"kill -{signal} {pid} in the node failed: {done.stderr.decode()}")
    return done.returncode == 0


def logged_at(line: str) -> float | None:
    """The time (``time.time()``) of a ``kubectl logs --timestamps`` line; None without one."""
    stamp = line.partition(" ")[0]
    whole, _, fraction = stamp.removesuffix("Z").partition(".")
    try:
        at = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
        return at + (float(f"0.{fraction}") if fraction.isdigit() else 0.0)
    except ValueError:
        return None


async def chaos(cluster: TestCluster, admin: KubeClient, namespace: str, storm: Storm) -> None:
    await anyio.sleep(4)

    # 1. A resident's /slots answers 500 for a while, switched through the pod proxy.
    async def break_slots() -> tuple[str, str] | None:
        for pool in POOLS:
            status = (await admin.get(ModelPool.resource(), pool, namespace)).get("status") or {}
            resident = str(status.get("residentMember") or "")
            pods = await admin.list(PODS, namespace, label_selector=f"{ISVC_LABEL}={resident}")
            for pod in pods.items:
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                path = (
                    f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}:"
                    f"{MEMBER_PORT}/proxy/sim/slots-mode"
                )
                body = {"mode": "error500", "seconds": SLOTS_FAILURE_SECONDS}
                try:
                    await admin.request("POST", path, body=body)
                except KubeError:
                    continue  # stopping just then (swapped away): pick again
                return pool, resident
        return None

    pool, resident = await eventually(
        break_slots, timeout=60, interval=0.1, what="a resident that takes the /slots switch"
    )
    now = time.monotonic()
    storm.windows.append(
        Window(f"/slots 500 on {resident}", pool, now, now + SLOTS_FAILURE_SECONDS)
    )
    storm.note(f"/slots of {resident} ({pool}) answers 500 for {SLOTS_FAILURE_SECONDS:.0f} s")

    # 2. The proxy pod holding a pool's Lease mid-swap is deleted at once; its Deployment
    # replaces it.
    await anyio.sleep(2)
    pool, holder, target = await mid_swap(
        admin, namespace, live=lambda: proxy_pods(admin, namespace), timeout=90
    )
    swaps = await pod_swaps(cluster, namespace, holder)
    at = time.monotonic()
    await kubectl(
        cluster, "-n", namespace, "delete", "pod", holder,
        "--grace-period=0", "--force", "--wait=false",
    )  # fmt: skip
    storm.kills.append(Kill("service", pool, target, at, swaps))
    for other in POOLS:
        with contextlib.suppress(KubeError, OSError):
            held = await held_lease(admin, namespace, other)
            if other != pool and held is not None and held[0] == holder:
                storm.kills.append(Kill("service", other, held[1], at, Counter()))
    storm.windows.append(Window(f"deleted {holder}", pool, at, at + DEFAULT_LEASE_DURATION_SECONDS))
    storm.note(f"deleted {holder}, holding {pool} for {target}; counted {dict(swaps)}")

    async def replaced() -> bool:
        live = await proxy_pods(admin, namespace)
        return holder not in live and len(live) == REPLICAS

    await eventually(replaced, timeout=ROLLOUT_TIMEOUT, what=f"{holder} replaced")
    await wait_available(admin, namespace, ROUTER_NAME, REPLICAS)
    storm.note(f"{REPLICAS} replicas available again")

    # 3. The operator's leader pod is deleted at once mid-swap; the standby takes over.
    await anyio.sleep(1)
    await delete_the_operator_leader(cluster, admin, namespace, storm)

    # 4. The operator's leader is SIGSTOPped mid-swap until the other replica holds its Lease;
    # continued, it finds the Lease taken and exits 1, and kubelet restarts its container.
    await anyio.sleep(1)
    await pause_the_operator_leader(cluster, admin, namespace, storm)

    # 5. Freeze kube-apiserver mid-swap.
    await anyio.sleep(1)
    pool, holder, target = await mid_swap(
        admin, namespace, live=lambda: proxy_pods(admin, namespace), timeout=90
    )
    stopped = time.monotonic()
    storm.note(f"SIGSTOP kube-apiserver ({holder} holds {pool} for {target})")
    try:
        await signal_apiserver(cluster, "STOP")
        await anyio.sleep(FREEZE_SECONDS)
    finally:
        with anyio.CancelScope(shield=True):
            await signal_apiserver(cluster, "CONT")
    storm.windows.append(Window("kube-apiserver frozen", None, stopped, time.monotonic()))
    storm.note("SIGCONT kube-apiserver")

    # 6. Every pool-y client asks for the slow member until it is resident.
    await anyio.sleep(2)
    storm.focus[SLOW_POOL] = SLOW_MEMBER
    storm.note(f"clients of {SLOW_POOL} now ask for {SLOW_MEMBER}")

    async def slow_resident() -> bool:
        status = (await admin.get(ModelPool.resource(), SLOW_POOL, namespace)).get("status")
        return (status or {}).get("residentMember") == SLOW_MEMBER

    try:
        await eventually(slow_resident, timeout=120, interval=0.5, what=f"{SLOW_MEMBER} resident")
        storm.note(f"{SLOW_MEMBER} is resident")
    finally:
        storm.focus.clear()


async def delete_the_operator_leader(
    cluster: TestCluster, admin: KubeClient, namespace: str, storm: Storm
) -> None:
    """Mid-swap, delete the operator pod holding the operator's Lease with ``--grace-period=0
    --force``: its API object goes at once while its container may still run for a moment. Waits
    until another running pod holds the Lease (from the deletion until then is a :class:`Window`
    of every pool: no operator reconciles) and the Deployment has its replicas Available again."""
    old = await leader_pod(admin)
    standby = [name for name in await operator_pods(admin) if name != old]
    lease = await admin.get(LEASES, OPERATOR_LEASE, OPERATOR_NAMESPACE)
    duration = (lease.get("spec") or {}).get("leaseDurationSeconds")
    pool, holder, target = await mid_swap(
        admin, namespace, live=lambda: proxy_pods(admin, namespace), timeout=90
    )
    at = time.monotonic()
    await kubectl(
        cluster, "-n", OPERATOR_NAMESPACE, "delete", "pod", old,
        "--grace-period=0", "--force", "--wait=false",
    )  # fmt: skip
    storm.note(f"deleted the operator's leader {old} ({holder} holds {pool} for {target})")
    released: float | None = None
    took = at

    async def taken() -> str | None:
        nonlocal released, took
        now, found = time.monotonic(), await operator_lease_holder(admin)
        if not found and released is None:
            released = now  # the old leader's graceful stop released it
        if found and found != old and found in await operator_pods(admin):
            took = now
            return found
        return None

    new = await eventually(
        taken, timeout=ROLLOUT_TIMEOUT, interval=0.1, what=f"a new operator leader after {old}"
    )
    storm.windows.append(Window(f"operator leader {old} deleted", None, at, took))
    how = (
        f"released by {old} after {released - at:.1f} s"
        if released is not None
        else f"not released: taken once it expired (a {duration} s Lease)"
    )
    who = "the standby" if new in standby else f"the replacement pod; the standby was {standby}"
    storm.note(
        f"operator failover: {new} ({who}) took the Lease {took - at:.1f} s after {old} was "
        f"deleted; {how}"
    )
    await wait_operator_available(admin)
    storm.note(f"{KIND_OPERATOR_REPLICAS} operator replicas available again")


async def pause_the_operator_leader(
    cluster: TestCluster, admin: KubeClient, namespace: str, storm: Storm
) -> None:
    """Mid-swap, SIGSTOP the main process of the leader's operator container (inside the kind
    node, found by ``crictl inspect``) until another replica holds the Lease by expiry, plus
    :data:`PAUSED_PAST_TAKEOVER`; SIGCONT always follows. Then waits until kubelet has restarted
    the old leader's container and both replicas are Available, and asserts that it exited 1 and
    that its previous log, after the pause, says it lost the Lease (past its renew deadline it
    stops without asking the API server; a renewal that finds the new holder would say "held
    by"); the fence's refusals in that log are counted. From SIGSTOP to the restart is a
    :class:`Window` of every pool; what the woken leader must not have done (a write that raised
    a second member) the storm's judges check."""
    old = await leader_pod(admin)
    container = await operator_container(admin, old)
    restarts = int(container.get("restartCount") or 0)
    pid = await container_pid(cluster, str(container.get("containerID") or ""))
    pool, holder, target = await mid_swap(
        admin, namespace, live=lambda: proxy_pods(admin, namespace), timeout=90
    )
    assert await operator_lease_holder(admin) == old, f"{old} stopped leading before the pause"
    paused_at, paused_wall = time.monotonic(), time.time()
    took, new = paused_at, ""
    try:
        stopped = await signal_operator(cluster, pid, "STOP")
        assert stopped, f"{old}'s operator process (pid {pid} in the node) is gone"
        storm.note(
            f"SIGSTOP the operator's leader {old} (pid {pid} in the node; {holder} holds {pool} "
            f"for {target})"
        )

        async def taken() -> str | None:
            found = await operator_lease_holder(admin)
            return found if found and found != old and found in await operator_pods(admin) else None

        new = await eventually(
            taken, timeout=TAKEOVER_TIMEOUT, interval=0.1, what=f"the Lease of paused {old} taken"
        )
        took = time.monotonic()
        storm.note(f"{new} holds the operator's Lease, {took - paused_at:.1f} s after SIGSTOP")
        await anyio.sleep(PAUSED_PAST_TAKEOVER)
    finally:
        with anyio.CancelScope(shield=True):
            await signal_operator(cluster, pid, "CONT")
    continued = time.monotonic()
    storm.note(f"SIGCONT {old}")

    async def restarted() -> dict[str, object] | None:
        status = await operator_container(admin, old)
        return status if int(status.get("restartCount") or 0) > restarts else None

    status = await eventually(
        restarted, timeout=ROLLOUT_TIMEOUT, interval=0.2, what=f"{old}'s container restarted"
    )
    restarted_at = time.monotonic()
    storm.windows.append(Window(f"operator leader {old} paused", None, paused_at, restarted_at))
    last = status.get("lastState")
    terminated = (last.get("terminated") if isinstance(last, dict) else None) or {}
    exit_code = terminated.get("exitCode")

    woken = [
        line
        for line in await previous_operator_log(cluster, old)
        if (at := logged_at(line)) is not None and at >= paused_wall
    ]
    lease = f"{OPERATOR_NAMESPACE}/{OPERATOR_LEASE}"
    # The process's last words (stderr): "error: <identity> lost lease <lease>: <why>".
    lost = [line for line in woken if f"lost lease {lease}" in line]
    # The fence's warning, one per write it refused: "<identity>: PUT <path> refused: <why>".
    refused = [line for line in woken if " refused: " in line and lease in line]
    storm.note(
        f"paused operator leader: {old} -> {new}, Lease taken {took - paused_at:.1f} s after "
        f"SIGSTOP, SIGCONT at {continued - paused_at:.1f} s; {old}'s container restarted "
        f"{restarted_at - continued:.1f} s after SIGCONT, exit code {exit_code} "
        f"({'exited 1' if exit_code == 1 else 'NOT exit 1'}); woken, it refused {len(refused)} "
        f"write(s) (nothing sent)"
    )
    for line in (lost + refused)[:4]:
        storm.note(f"  {old}: {line.partition(' ')[2][:200]}")
    tail = "\n".join(woken[-20:])
    assert lost, f"{old}, woken, did not log that it lost {lease}; its log after the pause:\n{tail}"
    assert exit_code == 1, f"{old}'s container ended {terminated}, not with exit code 1"
    await wait_operator_available(admin)
    storm.note(f"{KIND_OPERATOR_REPLICAS} operator replicas available again")


async def operator_restarts(admin: KubeClient) -> dict[str, int]:
    """Container restarts per operator pod."""
    pods = await admin.list(PODS, OPERATOR_NAMESPACE, label_selector=OPERATOR_LABEL)
    return {
        pod["metadata"]["name"]: sum(
            int(status.get("restartCount") or 0)
            for status in (pod.get("status") or {}).get("containerStatuses") or ()
        )
        for pod in pods.items
    }


def restarts_since(before: dict[str, int], now: dict[str, int]) -> int:
    """Restarts since ``before``, over the pods there are now (a new pod's count from 0)."""
    return sum(count - before.get(name, 0) for name, count in now.items())


async def test_swap_storm_in_the_cluster(
    admin: KubeClient, cluster: TestCluster, namespace: str, operator_pod: str
) -> None:
    seed = int(os.environ.get("STORM_SEED", "0")) or random.randrange(1, 10_000)
    storm = Storm(seed, max_body_bytes=DEFAULT_MAX_BODY_BYTES)  # the operator sets no limit
    monitor = PoolInvariantMonitor(cluster.admin_config(), namespace, sample_processes=False)
    monitor.start()
    restarts_before = await operator_restarts(admin)
    try:
        entrance = await create_pools_and_router(admin, cluster, namespace)
        storm.started_at = time.monotonic()
        storm.note(f"{REPLICAS} replicas behind {entrance.url}; {CLIENTS} clients (seed {seed})")
        async with busy_tenants(storm, entrance), anyio.create_task_group() as clients:
            for index in range(CLIENTS):
                clients.start_soon(client, index, storm, entrance)
            try:
                await chaos(cluster, admin, namespace, storm)
            finally:
                storm.chaos_over = True
        storm.note(f"the clients are done ({len(storm.outcomes)} requests)")
        settle_problems = monitor.settle(timeout=120, leases_released=True)
    finally:
        monitor.stop()

    live: Counter[tuple[str, str, str]] = Counter()
    for pod in await proxy_pods(admin, namespace):
        live += await pod_swaps(cluster, namespace, pod)
    restarts_after = await operator_restarts(admin)
    storm.operator_restarts = restarts_since(restarts_before, restarts_after)
    by_pod = {
        name: count - restarts_before.get(name, 0) for name, count in sorted(restarts_after.items())
    }
    storm.note(f"operator container restarts by pod: {by_pod}")
    changes = await judge_the_storm(admin, namespace, storm, monitor, live, settle_problems)
    assert sum(changes.values()) >= 4, f"too few swaps to call it a storm: {dict(changes)}"
