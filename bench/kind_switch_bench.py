"""Switching models on the kind tier: our pool against llama.cpp's router mode in one pod of the
same node, every phase of a switch measured (issue 22).

* **ours**: the operator in the cluster (``manifests/default``, the project image), pool ``gpu``
  of two real ``llama-server`` members ``tiny-1`` and ``tiny-2`` (the member image of
  ``hack/build-image.sh --llama-server``, its two tiny models in ``/models``), behind router
  ``chat`` (``--proxies`` replicas). A request for the parked model reaches the router's Service;
  a proxy holds it and drives the swap through the pool's Lease; the pool controller drains the
  resident once its ``/slots`` are idle, scales it to 0, waits until its pods are gone and grants
  the target, whose Deployment goes to 1: a pod is created, scheduled, started, loads its model
  and is seen ready, and the proxy forwards the request.
* **router mode**: the same image and models in one pod, ``llama-server --models-dir /models
  --models-max 1`` with the members' flags, behind a Service of its own. It starts a child
  ``llama-server`` per model and, at the maximum of one, stops the idle one before it starts the
  other. After each switch the client checks that ``/models`` lists only the asked model loaded.

Both take the same flags for the server (``--parallel 1 --ctx-size 2048 --threads 1 --metrics``;
2048 is the image's models' trained context), the same request sequence as ``make
bench-router-mode`` (``tiny-1``, then ``--switches`` requests alternating ``tiny-2`` and
``tiny-1``, each followed by one more for the same model; the same prompt of about 420 tokens, 8
tokens out, streamed) and the same client: a pod of the cluster (the project image's Python and
httpx) sending through the mode's Service, one new connection per request, so both paths are a
pod's, through kube-proxy, on the same node.

Each phase is read from what has sub-second time, all on one clock (the host, the kind node and
the pods share the kernel's): the client's own stamps; a pod and EndpointSlice watch the
benchmark holds open (stamped on receipt); and the CRI timestamps of ``kubectl logs
--timestamps`` for the servers (llama-server logs ``llama_server: model loaded`` when it turns
``/health`` 200, and stamps each line with its time since start) and the proxies (the direct
probe's ``healthy by direct probe`` line, where the proxy has it). Kubernetes conditions (1 s
resolution) are not used.

    make bench-kind-switch [BENCH_ARGS="--switches 20 --keep"]

The last line, for scripts: ``kind switch: ours A ms (overhead B ms above the load of C ms),
router mode D ms (overhead E ms above the load of F ms), ratio Gx; readiness seen H ms after
/health 200 (SOURCE)``, medians; SOURCE says what "readiness seen" read.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from bench.kind_cluster import (
    OPERATOR_DEPLOYMENT,
    OPERATOR_NAMESPACE,
    Cluster,
    KindError,
    kind_cluster,
)
from bench.kind_switch_phases import (
    Run,
    ours_switch,
    report,
    router_mode_switch,
    running,
    slot_server_switch,
    timestamped,
)
from bench.real_pool import MAX_TOKENS, PROMPT
from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.modelpool.slotserver import SLOT_SERVER_LABEL

GROUP: Final = "inference.modelpool.dev/v1alpha1"
POOL: Final = "gpu"
ROUTER: Final = "chat"
MODELS: Final = ("tiny-1", "tiny-2")
#: The models' trained context in the member image (hack/build-image.sh's TINY_CONTEXT).
CONTEXT: Final = 2048
#: The members' and router mode's server flags (the operator adds --metrics to a member's).
SERVER_FLAGS: Final = ("--parallel", "1", "--ctx-size", str(CONTEXT), "--threads", "1")
SERVER_PORT: Final = 8080
ROUTER_MODE: Final = "router-mode"
PROXY_LABEL: Final = "inference.modelpool.dev/modelrouter"
READY_TIMEOUT: Final = 300.0
#: Where the slot server's weights are put on the node (a slot server mounts ``file://`` sources
#: as hostPath files; a path inside the image is refused, as it cannot be mounted into its pod).
NODE_MODELS: Final = "/var/lib/modelpool-bench/models"
COPY_WEIGHTS: Final = "copy-weights"

#: The client, run in a pod: argv URL SWITCHES MODEL_A MODEL_B CHECK_LOADED, the prompt in
#: $PROMPT; one JSON line per request (wall-clock stamps: sent, first token, answer complete).
CLIENT: Final = r"""
import json, os, sys, time, httpx
url, switches, models, check = sys.argv[1], int(sys.argv[2]), sys.argv[3:5], sys.argv[5] == "1"
prompt, max_tokens = os.environ["PROMPT"], int(os.environ["MAX_TOKENS"])
def ask(model, kind, index):
    body = {"model": model, "max_tokens": max_tokens, "stream": True,
            "messages": [{"role": "user", "content": prompt}]}
    sent = time.time(); first = None; named = None; timings = {}; status = 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as answer:
        status = answer.status_code
        for line in answer.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            named = chunk.get("model") or named
            timings = chunk.get("timings") or timings
            for choice in chunk.get("choices") or ():
                if first is None and (choice.get("delta") or {}).get("content"):
                    first = time.time()
        if status != 200:
            print(json.dumps({"error": f"{model}: HTTP {status}: {answer.read()[:300]!r}"}))
            sys.exit(1)
    done = time.time()
    record = {"index": index, "kind": kind, "model": model, "named": named, "sent": sent,
              "first_token": first or done, "done": done, "prompt_n": timings.get("prompt_n")}
    if check and kind == "switch":
        listed = httpx.get(url + "/models", timeout=30).json()["data"]
        record["loaded"] = [m["id"] for m in listed
                            if (m.get("status") or {}).get("value") == "loaded"]
    print(json.dumps(record), flush=True)
ask(models[0], "first", 0)
for i in range(switches):
    model = models[(i + 1) % 2]
    ask(model, "switch", i + 1)
    ask(model, "next", i + 1)
"""


# --- what the cluster runs --------------------------------------------------------------------


def pool_objects(
    namespace: str, llama_image: str, proxies: int, min_residency: str
) -> list[dict[str, Any]]:
    """The two members, the pool (``tiny-1`` its default, ``spec.scheduling.minResidency`` as
    given) and the router in front of it."""
    members = [
        {
            "apiVersion": GROUP,
            "kind": "InferenceService",
            "metadata": {"name": model, "namespace": namespace},
            "spec": {
                "model": {"name": model, "source": f"/models/{model}.gguf"},
                "image": llama_image,
                "args": list(SERVER_FLAGS),
            },
        }
        for model in MODELS
    ]
    return [
        *members,
        {
            "apiVersion": GROUP,
            "kind": "ModelPool",
            "metadata": {"name": POOL, "namespace": namespace},
            "spec": {
                "members": [{"inferenceServiceRef": {"name": m}} for m in MODELS],
                "default": MODELS[0],
                "swapBudget": "180s",
                "scheduling": {"minResidency": min_residency},
            },
        },
        {
            "apiVersion": GROUP,
            "kind": "ModelRouter",
            "metadata": {"name": ROUTER, "namespace": namespace},
            "spec": {
                "backends": [{"name": "gpu", "poolRef": {"name": POOL}}],
                "proxy": {"replicas": proxies},
            },
        },
    ]


def router_mode_objects(namespace: str, llama_image: str) -> list[dict[str, Any]]:
    """llama.cpp's router mode in one pod over the image's two models, and its Service."""
    labels = {"app.kubernetes.io/name": ROUTER_MODE}
    args = ["--models-dir", "/models", "--models-max", "1", "--host", "0.0.0.0",
            "--port", str(SERVER_PORT), "--metrics", *SERVER_FLAGS]  # fmt: skip
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": ROUTER_MODE, "namespace": namespace, "labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "server",
                        "image": llama_image,
                        "imagePullPolicy": "Never",
                        "args": args,
                        "ports": [{"name": "http", "containerPort": SERVER_PORT}],
                        "readinessProbe": {
                            "httpGet": {"path": "/health", "port": "http"},
                            "periodSeconds": 1,
                        },
                    }
                ],
                "automountServiceAccountToken": False,
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ROUTER_MODE, "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": "http"}]},
        },
    ]


def node_weights_pod(namespace: str, llama_image: str) -> dict[str, Any]:
    """A one-shot pod copying the member image's two models to :data:`NODE_MODELS` on the node,
    as root (the kubelet makes the hostPath folder as root; the image's user is not)."""
    copy = (f"cp /models/{MODELS[0]}.gguf /models/{MODELS[1]}.gguf /node/ "
            f"&& chmod 0644 /node/*.gguf")  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": COPY_WEIGHTS, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "containers": [
                {
                    "name": "copy",
                    "image": llama_image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", copy],
                    "volumeMounts": [{"name": "node", "mountPath": "/node"}],
                }
            ],
            "volumes": [
                {"name": "node", "hostPath": {"path": NODE_MODELS, "type": "DirectoryOrCreate"}}
            ],
        },
    }


def slot_pool_objects(
    namespace: str, llama_image: str, proxies: int, min_residency: str
) -> list[dict[str, Any]]:
    """:func:`pool_objects` with a slot server: the same members, their weights the node files
    :func:`node_weights_pod` made (``file://``), the pool running one llama-server of the same
    image in router mode with the members' flags (and ``--metrics``, which the operator gives a
    member) as ``spec.slotServer.args``."""
    objects = pool_objects(namespace, llama_image, proxies, min_residency)
    for obj in objects:
        if obj["kind"] == "InferenceService":
            model = obj["spec"]["model"]
            model["source"] = f"file://{NODE_MODELS}/{model['name']}.gguf"
            del obj["spec"]["args"]  # a member's own args do not apply in a slot server
        elif obj["kind"] == "ModelPool":
            obj["spec"]["slotServer"] = {
                "image": llama_image,
                "args": ["--metrics", *SERVER_FLAGS],
            }
    return objects


def client_pod(
    namespace: str, name: str, image: str, url: str, switches: int, check: bool
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench-client"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "client",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", CLIENT],
                    "args": [url, str(switches), *MODELS, "1" if check else "0"],
                    "env": [
                        {"name": "PROMPT", "value": PROMPT},
                        {"name": "MAX_TOKENS", "value": str(MAX_TOKENS)},
                    ],
                }
            ],
        },
    }


# --- what the benchmark watches ---------------------------------------------------------------


class Stream:
    """A ``kubectl`` that keeps printing (a watch, a followed log), read by a thread that stamps
    what arrives with the wall clock; :meth:`stop` ends it."""

    def __init__(self, argv: list[str], on_text: Callable[[float, str], None]) -> None:
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._on_text = on_text
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._on_text(time.time(), line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)
        self.thread.join(timeout=30)


class Watch:
    """``kubectl get KIND --watch --output-watch-events -o json``: every event with the time it
    arrived, parsed as the JSON objects come in."""

    def __init__(self, cluster: Cluster, namespace: str, kind: str) -> None:
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self._buffer = ""
        self._decoder = json.JSONDecoder()
        self._lock = threading.Lock()
        argv = cluster.argv("get", kind, "-n", namespace, "--watch", "--output-watch-events",
                            "-o", "json")  # fmt: skip
        self._stream = Stream(argv, self._text)

    def _text(self, at: float, text: str) -> None:
        self._buffer += text
        while True:
            stripped = self._buffer.lstrip()
            if not stripped:
                self._buffer = ""
                return
            try:
                event, end = self._decoder.raw_decode(stripped)
            except json.JSONDecodeError:
                self._buffer = stripped
                return
            self._buffer = stripped[end:]
            with self._lock:
                self.events.append((at, str(event.get("type")), dict(event.get("object") or {})))

    def snapshot(self) -> list[tuple[float, str, dict[str, Any]]]:
        with self._lock:
            return list(self.events)

    def stop(self) -> None:
        self._stream.stop()


class MemberLogs:
    """Every member pod's log, followed (``kubectl logs -f --timestamps``) from the moment its
    container runs, so a pod deleted by the next switch keeps its log here."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.lines: dict[str, list[tuple[float, str]]] = {}
        self._streams: list[Stream] = []
        self._lock = threading.Lock()

    def follow(self, pod: str) -> None:
        with self._lock:
            if pod in self.lines:
                return
            self.lines[pod] = []
        threading.Thread(target=self._follow, args=(pod,), daemon=True).start()

    def _follow(self, pod: str) -> None:
        def keep(_at: float, line: str) -> None:
            self.lines[pod].extend(timestamped(line))

        argv = self.cluster.argv("logs", "-n", self.namespace, pod, "-c", "server", "-f",
                                 "--timestamps")  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the container has started
            stream = Stream(argv, keep)
            with self._lock:
                self._streams.append(stream)
            stream.process.wait()
            stream.thread.join(timeout=30)
            if self.lines[pod] or stream.process.returncode == 0:
                return
            time.sleep(0.05)

    def stop(self) -> None:
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.stop()


# --- running the modes ----------------------------------------------------------------------------


def run_client(
    cluster: Cluster, namespace: str, name: str, url: str, switches: int, *, check: bool
) -> list[dict[str, Any]]:
    """The client pod's sequence against ``url``; its records, checked."""
    cluster.apply([client_pod(namespace, name, cluster.builds.image, url, switches, check)])
    deadline = time.monotonic() + READY_TIMEOUT + switches * 120
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl("get", "-n", namespace, "pod", name, "-o",
                                "jsonpath={.status.phase}")  # fmt: skip
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    out = cluster.kubectl("logs", "-n", namespace, name)
    if phase != "Succeeded":
        raise SystemExit(f"the client {name} ended {phase or 'never'}:\n{out[-3000:]}")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for record in records:
        if record.get("named") != record.get("model"):
            raise SystemExit(f"asked {record['model']}, answered by {record.get('named')}")
        if "loaded" in record and record["loaded"] != [record["model"]]:
            raise SystemExit(f"router mode: {record['loaded']} loaded after a switch to "
                             f"{record['model']}")  # fmt: skip
    return records


def wait_for(what: str, test: Callable[[], bool], timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not in {timeout:.0f} s")
        time.sleep(0.5)


def run_ours(
    cluster: Cluster, namespace: str, switches: int, proxies: int, min_residency: str
) -> Run:
    cluster.apply(pool_objects(namespace, cluster.builds.llama_image, proxies, min_residency))

    def settled() -> bool:
        pool = cluster.get(namespace, "modelpool", POOL).get("status") or {}
        proxy = cluster.get(namespace, "deployment", f"{ROUTER}-proxy").get("status") or {}
        return (
            pool.get("residentMember") == MODELS[0]
            and pool.get("phase") == "Ready"
            and proxy.get("availableReplicas") == proxies
        )

    wait_for("the pool with tiny-1 resident and the proxies available", _quiet(settled))
    pods = Watch(cluster, namespace, "pods")
    slices = Watch(cluster, namespace, "endpointslices")
    leases = Watch(cluster, namespace, "leases")
    logs = MemberLogs(cluster, namespace)
    following = threading.Event()

    def follow_members() -> None:  # every member pod's log, once its container runs
        while not following.is_set():
            for _at, _kind, obj in pods.snapshot():
                labels = obj.get("metadata", {}).get("labels") or {}
                if ISVC_LABEL in labels and running("", obj):
                    logs.follow(obj["metadata"]["name"])
            time.sleep(0.02)

    follower = threading.Thread(target=follow_members, daemon=True)
    follower.start()
    try:
        records = run_client(cluster, namespace, "client-ours", f"http://{ROUTER}.{namespace}.svc",
                             switches, check=False)  # fmt: skip
        time.sleep(1)  # the last events and lines arrive
    finally:
        following.set()
        follower.join(timeout=10)
        pods.stop()
        slices.stop()
        leases.stop()
        logs.stop()
    probe_lines = proxy_probe_lines(cluster, namespace)
    pod_events, slice_events = pods.snapshot(), slices.snapshot()
    found = [
        ours_switch(r, POOL, pod_events, slice_events, logs.lines, probe_lines, leases.snapshot())
        for r in records
        if r["kind"] == "switch"
    ]
    return Run(records[0], found, [r for r in records if r["kind"] == "next"])


#: The line the proxy logs when its direct probe finds the new member healthy.
PROBED: Final = re.compile(r"pool \S+: member (\S+) healthy by direct probe")


def proxy_probe_lines(cluster: Cluster, namespace: str) -> list[tuple[float, str]]:
    """(time, member) of every ``healthy by direct probe`` line of the router's proxies."""
    names = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"{PROXY_LABEL}={ROUTER}",
                            "-o", "jsonpath={.items[*].metadata.name}").split()  # fmt: skip
    found: list[tuple[float, str]] = []
    for name in names:
        text = cluster.kubectl("logs", "-n", namespace, name, "--timestamps", "--tail=-1")
        for at, line in timestamped(text):
            if (match := PROBED.search(line)) is not None:
                found.append((at, match.group(1)))
    return sorted(found)


def run_router_mode(cluster: Cluster, namespace: str, switches: int) -> Run:
    cluster.apply(router_mode_objects(namespace, cluster.builds.llama_image))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", f"pod/{ROUTER_MODE}",
                    f"--timeout={READY_TIMEOUT:.0f}s")  # fmt: skip
    records = run_client(cluster, namespace, "client-router-mode",
                         f"http://{ROUTER_MODE}.{namespace}.svc", switches, check=True)  # fmt: skip
    time.sleep(0.5)
    text = cluster.kubectl("logs", "-n", namespace, ROUTER_MODE, "--timestamps", "--tail=-1")
    lines = timestamped(text)
    found = [router_mode_switch(r, lines) for r in records if r["kind"] == "switch"]
    return Run(records[0], found, [r for r in records if r["kind"] == "next"])


def slot_pods(cluster: Cluster, namespace: str) -> list[str]:
    """The slot server's pods, as ``name/uid``."""
    found = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"{SLOT_SERVER_LABEL}={POOL}",
                            "-o", "jsonpath={range .items[*]}{.metadata.name}/{.metadata.uid} "
                            "{end}")  # fmt: skip
    return sorted(found.split())


def run_slot_server(
    cluster: Cluster, namespace: str, switches: int, proxies: int, min_residency: str
) -> Run:
    """Ours with a slot server: the same client and sequence; every switch an unload and a load
    in one pod, which must be the same pod at the end, with no member pod ever seen."""
    cluster.apply([node_weights_pod(namespace, cluster.builds.llama_image)])
    cluster.kubectl("wait", "-n", namespace, "--for=jsonpath={.status.phase}=Succeeded",
                    f"pod/{COPY_WEIGHTS}", f"--timeout={READY_TIMEOUT:.0f}s")  # fmt: skip
    cluster.apply(slot_pool_objects(namespace, cluster.builds.llama_image, proxies, min_residency))

    def settled() -> bool:
        pool = cluster.get(namespace, "modelpool", POOL).get("status") or {}
        proxy = cluster.get(namespace, "deployment", f"{ROUTER}-proxy").get("status") or {}
        return (
            pool.get("residentMember") == MODELS[0]
            and pool.get("phase") == "Ready"
            and proxy.get("availableReplicas") == proxies
        )

    wait_for("the slot server with tiny-1 loaded and the proxies available", _quiet(settled))
    (server,) = slot_pods(cluster, namespace)
    pods = Watch(cluster, namespace, "pods")
    leases = Watch(cluster, namespace, "leases")
    try:
        records = run_client(cluster, namespace, "client-slot", f"http://{ROUTER}.{namespace}.svc",
                             switches, check=False)  # fmt: skip
        time.sleep(1)  # the last events and lines arrive
    finally:
        pods.stop()
        leases.stop()
    if slot_pods(cluster, namespace) != [server]:
        raise SystemExit(f"the slot server's pod {server} was replaced: "
                         f"{slot_pods(cluster, namespace)}")  # fmt: skip
    members = {
        obj["metadata"]["name"]
        for _at, _kind, obj in pods.snapshot()
        if ISVC_LABEL in (obj.get("metadata", {}).get("labels") or {})
    }
    if members:
        raise SystemExit(f"a pool with a slot server ran member pods: {sorted(members)}")
    name = server.split("/", 1)[0]
    server_text = cluster.kubectl("logs", "-n", namespace, name, "--timestamps", "--tail=-1")
    operator_text = cluster.kubectl("logs", "-n", OPERATOR_NAMESPACE,
                                    f"deployment/{OPERATOR_DEPLOYMENT}", "--timestamps",
                                    "--tail=-1")  # fmt: skip
    server_lines, operator_lines = timestamped(server_text), timestamped(operator_text)
    key, lease_events = f"{namespace}/{POOL}", leases.snapshot()
    found = [
        slot_server_switch(r, key, lease_events, operator_lines, server_lines)
        for r in records
        if r["kind"] == "switch"
    ]
    return Run(records[0], found, [r for r in records if r["kind"] == "next"])


def _quiet(test: Callable[[], bool]) -> Callable[[], bool]:
    """``test``, False while the objects it reads do not exist yet."""

    def guarded() -> bool:
        try:
            return test()
        except KindError:
            return False

    return guarded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=10, help="switches per mode (>= 1)")
    parser.add_argument("--proxies", type=int, default=2, help="the router's proxy replicas")
    parser.add_argument(
        "--min-residency",
        default="0s",
        help="the pool's spec.scheduling.minResidency (default 0s: the scheduler's anti-thrash "
        "floor off, as router mode has none; the API's default is 10s)",
    )
    parser.add_argument("--cluster", help="an existing kind cluster to use (else one is made)")
    parser.add_argument("--cluster-name", default="modelpool-bench",
                        help="the name of the cluster made (default modelpool-bench)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the cluster made")
    parser.add_argument("--no-slot-server", action="store_true",
                        help="leave out ours with a slot server (spec.slotServer)")  # fmt: skip
    args = parser.parse_args()
    if args.switches < 1:
        parser.error("--switches must be at least 1")
    started = time.monotonic()
    create = args.cluster is None
    with kind_cluster(args.cluster or args.cluster_name, create=create, keep=args.keep) as cluster:
        ready = time.monotonic()
        suffix = secrets.token_hex(3)
        namespace = f"bench-switch-{suffix}"
        # Ours with a slot server has a namespace of its own: the same names (pool, router,
        # members), so the client and the sequence are the same.
        slot_namespace = f"bench-slot-{suffix}"
        cluster.kubectl("create", "namespace", namespace)
        cluster.kubectl("create", "namespace", slot_namespace)
        slot: Run | None = None
        try:
            ours = run_ours(cluster, namespace, args.switches, args.proxies, args.min_residency)
            # Router mode's pod is made only now; ours stays idle (its resident member and
            # proxies wait) while router mode is measured, and both while the slot server is.
            router_mode = run_router_mode(cluster, namespace, args.switches)
            if not args.no_slot_server:
                slot = run_slot_server(cluster, slot_namespace, args.switches, args.proxies,
                                       args.min_residency)  # fmt: skip
        finally:
            if not create or args.keep:
                cluster.kubectl("delete", "namespace", namespace, slot_namespace, "--wait=false")
        measured = time.monotonic()
    print(f"\ncluster ready in {ready - started:.0f} s, the modes measured in "
          f"{measured - ready:.0f} s, {time.monotonic() - started:.0f} s in all")  # fmt: skip
    report(ours, router_mode, slot)


if __name__ == "__main__":
    main()
