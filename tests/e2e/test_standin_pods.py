"""The node stand-in plays Job pods, init containers, volumes and logs, against a real API server.

No operator runs here: the tests create the Jobs and Deployments the operator would, labelled as
its own, and check what the stand-in (as scheduler and kubelet) and kube-controller-manager's
job-controller make of them. The containers run the real ``controlplane fetch-model`` against a
file served over HTTP on loopback (``http://`` with ``--sha256``): a file that is there is
fetched (exit 0), a missing one answers 404 (``NotFound``, exit 3, permanent). Logs are read
through the API server (``pods/NAME/log``), which proxies them to the stand-in's kubelet endpoint
as it would to a node's kubelet.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from controlplane.envtest.llamaserver import find_llama_server
from controlplane.envtest.tinymodel import TinyModelSpec, tiny_model
from controlplane.runtime.client import KubeClient
from controlplane.runtime.resources import DEPLOYMENTS, JOBS, PODS, SECRETS
from tests.e2e.clusters import TestCluster
from tests.e2e.httpclients import http_client
from tests.e2e.operator_process import LocalProcess, NodeStandInProcess, start_node, stopped_at_exit
from tests.e2e.waiting import eventually

Object = dict[str, Any]
TIMEOUT = 60.0
MANAGED = {"app.kubernetes.io/managed-by": "modelpool-operator"}
MODEL_OF = "inference.modelpool.dev/model-of"
MEMBER = "inference.modelpool.dev/inferenceservice"
#: Where the fetcher writes (its ``--dest``) and the server reads, as the containers see it.
MOUNT = "/var/lib/modelpool/model"
#: The node cache folder (a hostPath), as the node sees it.
CACHE = "/var/lib/modelpool/models/x"
WEIGHTS = b"GGUF" + bytes(range(256)) * 64


@dataclass(frozen=True)
class Origin:
    """A loopback HTTP server of ``folder``, which holds one file, ``w.gguf`` (:data:`WEIGHTS`,
    whose digest is ``sha256``); a test may add others."""

    url: str
    sha256: str
    folder: Path


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[Origin]:
    folder = tmp_path / "origin"
    folder.mkdir()
    (folder / "w.gguf").write_bytes(WEIGHTS)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield Origin(f"http://127.0.0.1:{port}", hashlib.sha256(WEIGHTS).hexdigest(), folder)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def node(cluster: TestCluster, namespace: str, tmp_path: Path) -> Iterator[NodeStandInProcess]:
    """The stand-in for this namespace, without the pool monitor (no pools here, no CRDs)."""
    started: list[LocalProcess]
    with stopped_at_exit() as started:
        yield start_node(cluster, tmp_path, started, namespace=namespace, monitor=False)


def node_folder(tmp_path: Path, path: str) -> Path:
    """The node's disk (``NodeSettings.host_root``) as ``start_node`` lays it out."""
    return tmp_path / "simulators" / "hostpath" / path.lstrip("/")


def fetch_container(origin: Origin, file: str, **extra: Any) -> Object:
    return {
        "name": "fetch-model",
        "image": "modelpool-operator:dev",
        "args": [
            "fetch-model",
            "--source",
            f"{origin.url}/{file}",
            "--sha256",
            origin.sha256,
            "--dest",
            MOUNT,
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "model", "mountPath": MOUNT}],
        **extra,
    }


def cache_volume() -> Object:
    return {"name": "model", "hostPath": {"path": CACHE, "type": "DirectoryOrCreate"}}


def job_body(name: str, container: Object, **pod_spec: Any) -> Object:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {**MANAGED, MODEL_OF: "x"}},
        "spec": {
            "backoffLimit": 6,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": "fetch-model",
                            "operator": "In",
                            "values": [3],
                        },
                    }
                ]
            },
            "template": {
                "metadata": {"labels": {**MANAGED, MODEL_OF: "x"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [cache_volume()],
                    **pod_spec,
                },
            },
        },
    }


async def job_condition(admin: KubeClient, namespace: str, name: str) -> Object:
    """The Job's Complete or Failed condition, once it has one."""

    async def finished() -> Object | None:
        job = await admin.get(JOBS, name, namespace)
        for condition in (job.get("status") or {}).get("conditions") or ():
            if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
                return condition  # type: ignore[no-any-return]
        return None

    return await eventually(finished, timeout=TIMEOUT, what=f"job {name} to finish")


async def pods_of_job(admin: KubeClient, namespace: str, name: str) -> list[Object]:
    found = await admin.list(PODS, namespace, label_selector=f"batch.kubernetes.io/job-name={name}")
    return found.items


def terminated(status: Object) -> Object:
    state: Object = status["state"].get("terminated") or {}
    return state


async def log_of(admin: KubeClient, namespace: str, pod: str, container: str, lines: int) -> str:
    """The container's log through the API server (proxied to the node's kubelet endpoint)."""
    path = PODS.path(namespace, pod, "log")
    raw = await admin.get_bytes(path, params={"container": container, "tailLines": lines})
    return raw.decode()


async def test_a_job_runs_to_completion_and_a_permanent_failure_fails_it(
    admin: KubeClient, namespace: str, node: NodeStandInProcess, origin: Origin, tmp_path: Path
) -> None:
    await admin.create(JOBS, job_body("ok", fetch_container(origin, "w.gguf")), namespace)
    await admin.create(JOBS, job_body("missing", fetch_container(origin, "gone.gguf")), namespace)

    complete = await job_condition(admin, namespace, "ok")
    assert complete["type"] == "Complete", complete
    (pod,) = await pods_of_job(admin, namespace, "ok")
    assert pod["spec"]["nodeName"] == "modelpool-sim-node", "bound through pods/binding"
    assert pod["status"]["phase"] == "Succeeded"
    (status,) = pod["status"]["containerStatuses"]
    assert (terminated(status)["exitCode"], terminated(status)["reason"]) == (0, "Completed")
    assert {"startedAt", "finishedAt"} <= terminated(status).keys()
    # --dest /var/lib/modelpool/model was rewritten to the hostPath's folder on the node's disk.
    assert (node_folder(tmp_path, CACHE) / "w.gguf").read_bytes() == WEIGHTS

    # The last line of the container's log, through the API server: the fetcher's done record.
    last = await log_of(admin, namespace, pod["metadata"]["name"], "fetch-model", 1)
    record = json.loads(last)
    assert (record["event"], record["sha256"], record["downloaded"]) == (
        "done", origin.sha256, True
    )  # fmt: skip

    failed = await job_condition(admin, namespace, "missing")
    assert (failed["type"], failed["reason"]) == ("Failed", "PodFailurePolicy"), failed
    (pod,) = await pods_of_job(admin, namespace, "missing")  # FailJob: no retry
    assert pod["status"]["phase"] == "Failed"
    (status,) = pod["status"]["containerStatuses"]
    end = terminated(status)
    assert (end["exitCode"], end["reason"]) == (3, "Error")
    # The termination message the fetcher wrote to the file its --termination-log was given.
    assert end["message"].startswith("NotFound: "), end
    assert "404" in end["message"]


async def test_a_pod_no_node_fits_stays_pending_unschedulable(
    admin: KubeClient, namespace: str, node: NodeStandInProcess, origin: Origin
) -> None:
    body = job_body("elsewhere", fetch_container(origin, "w.gguf"),
                    nodeSelector={"kubernetes.io/hostname": "another-node"})  # fmt: skip
    await admin.create(JOBS, body, namespace)

    async def unschedulable() -> Object | None:
        for pod in await pods_of_job(admin, namespace, "elsewhere"):
            for condition in (pod.get("status") or {}).get("conditions") or ():
                if condition["type"] == "PodScheduled" and condition["reason"] == "Unschedulable":
                    return pod
        return None

    pod = await eventually(unschedulable, timeout=TIMEOUT, what="the pod to be unschedulable")
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


@asynccontextmanager
async def pod_history(admin: KubeClient, namespace: str) -> AsyncIterator[list[Object]]:
    """Every version of every pod in ``namespace`` while the block runs, in the watch's order."""
    seen: list[Object] = []

    async def record(version: str) -> None:
        async with admin.watch(PODS, namespace, resource_version=version) as stream:
            async for event in stream:
                if event.type in ("ADDED", "MODIFIED"):
                    seen.append(event.object)

    async with anyio.create_task_group() as group:
        group.start_soon(record, (await admin.list(PODS, namespace)).resource_version)
        yield seen
        await anyio.sleep(0.5)  # let the last events in
        group.cancel_scope.cancel()


def member_deployment(name: str, pod_spec: Object) -> Object:
    labels = {**MANAGED, MEMBER: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {MEMBER: name}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def server_container(model: str, mount: Object, **extra: Any) -> Object:
    return {
        "name": "server",
        "image": "llama-server",
        "args": ["--model", model, "--alias", "m", "--host", "0.0.0.0", "--port", "8080"],
        "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": [mount],
        **extra,
    }


async def member_pod(admin: KubeClient, namespace: str, name: str, ready: bool) -> Object:
    async def found() -> Object | None:
        pods = (await admin.list(PODS, namespace, label_selector=f"{MEMBER}={name}")).items
        for pod in pods:
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or ()}
            if not ready or conditions.get("Ready") == "True":
                return pod
        return None

    return await eventually(found, timeout=TIMEOUT, what=f"member {name}'s pod")


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().partition("=")[::2] for item in raw.split(b"\0") if item)


async def test_a_member_pod_runs_its_init_container_first_with_its_volumes_and_env(
    admin: KubeClient, namespace: str, node: NodeStandInProcess, origin: Origin, tmp_path: Path
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "token"},
        "stringData": {"token": "s3cret"},
    }
    await admin.create(SECRETS, secret, namespace)
    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "token"}}}
    pod_spec = {
        "initContainers": [fetch_container(origin, "w.gguf", env=[token])],
        "containers": [
            server_container(
                f"{MOUNT}/w.gguf",
                {"name": "model", "mountPath": MOUNT, "readOnly": True},
                env=[token, {"name": "GREETING", "value": "hello $(HF_TOKEN)"}],
            )
        ],
        "volumes": [cache_volume()],
    }
    async with pod_history(admin, namespace) as history:
        await admin.create(DEPLOYMENTS, member_deployment("m", pod_spec), namespace)
        pod = await member_pod(admin, namespace, "m", ready=True)

    (init,) = pod["status"]["initContainerStatuses"]
    assert (terminated(init)["exitCode"], terminated(init)["reason"]) == (0, "Completed")
    assert (node_folder(tmp_path, CACHE) / "w.gguf").read_bytes() == WEIGHTS
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["Initialized"] == "True"

    # In the watch's order: while the init container had not succeeded, the server had not
    # started and the pod was neither initialized nor ready; the server ran only after it.
    mine = [p for p in history if p["metadata"]["uid"] == pod["metadata"]["uid"]]
    before = [p for p in mine if (p.get("status") or {}).get("initContainerStatuses")
              and not terminated(p["status"]["initContainerStatuses"][0])]  # fmt: skip
    assert before, "the init container was never seen before its end"
    for version in before:
        status = version["status"]
        assert status["phase"] == "Pending"
        (server,) = status["containerStatuses"]
        assert server["state"]["waiting"]["reason"] == "PodInitializing"
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["Initialized"]["reason"] == "ContainersNotInitialized"
        assert conditions["Ready"]["status"] == "False"
    for version in mine:
        statuses = (version.get("status") or {}).get("containerStatuses") or ()
        if statuses and "running" in statuses[0]["state"]:
            (init,) = version["status"]["initContainerStatuses"]
            assert terminated(init)["exitCode"] == 0, "the server started before its init"

    # The server's environment: the Secret's value, and $(VAR) expanded from it.
    (server,) = pod["status"]["containerStatuses"]
    pid = int(server["containerID"].removeprefix("sim://"))
    env = environ(pid)
    assert (env["HF_TOKEN"], env["GREETING"]) == ("s3cret", "hello s3cret")
    assert env["MODELPOOL_MEMBER"] == f"{namespace}/m"


async def test_a_server_whose_model_is_missing_crashes_until_it_is_there(
    admin: KubeClient, namespace: str, node: NodeStandInProcess, tmp_path: Path
) -> None:
    pod_spec = {
        "containers": [
            server_container("/models/w.gguf", {"name": "weights", "mountPath": "/models"})
        ],
        "volumes": [{"name": "weights", "persistentVolumeClaim": {"claimName": "weights"}}],
    }
    await admin.create(DEPLOYMENTS, member_deployment("n", pod_spec), namespace)

    async def crash_looping() -> Object | None:
        pod = await member_pod(admin, namespace, "n", ready=False)
        statuses = pod["status"].get("containerStatuses") or [{}]
        waiting = (statuses[0].get("state") or {}).get("waiting") or {}
        looping = statuses[0].get("restartCount", 0) >= 2 and waiting.get("reason") == (
            "CrashLoopBackOff"
        )
        return pod if looping else None

    pod = await eventually(crash_looping, timeout=TIMEOUT, what="the server to crash-loop")
    (server,) = pod["status"]["containerStatuses"]
    assert server["lastState"]["terminated"]["exitCode"] == 1
    assert pod["status"]["phase"] == "Running"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    last = await log_of(admin, namespace, pod["metadata"]["name"], "server", 1)
    assert last.strip() == "main: exiting due to model loading error"
    full = await log_of(admin, namespace, pod["metadata"]["name"], "server", 3)
    assert "'/models/w.gguf'" in full, "the server names the path it was given"

    # The claim's folder on this machine (log_dir/pvc/NAMESPACE/CLAIM): once the file is there,
    # the next restart finds it at the rewritten --model and the server comes up.
    claim = tmp_path / "simulators" / "pvc" / namespace / "weights"
    claim.mkdir(parents=True, exist_ok=True)
    (claim / "w.gguf").write_bytes(WEIGHTS)
    ready = await member_pod(admin, namespace, "n", ready=True)
    assert ready["metadata"]["uid"] == pod["metadata"]["uid"], "restarted, not replaced"
    (server,) = ready["status"]["containerStatuses"]
    assert server["restartCount"] >= 2
    assert "running" in server["state"]


async def test_a_failing_init_container_is_restarted_with_back_off_and_holds_the_server(
    admin: KubeClient, namespace: str, node: NodeStandInProcess, origin: Origin
) -> None:
    pod_spec = {
        "initContainers": [fetch_container(origin, "later.gguf")],
        "containers": [
            server_container(f"{MOUNT}/later.gguf", {"name": "model", "mountPath": MOUNT})
        ],
        "volumes": [cache_volume()],
    }
    await admin.create(DEPLOYMENTS, member_deployment("f", pod_spec), namespace)

    async def init_crash_looping() -> Object | None:
        pod = await member_pod(admin, namespace, "f", ready=False)
        statuses = pod["status"].get("initContainerStatuses") or [{}]
        waiting = (statuses[0].get("state") or {}).get("waiting") or {}
        if statuses[0].get("restartCount", 0) >= 2 and waiting.get("reason") == "CrashLoopBackOff":
            return pod
        return None

    pod = await eventually(init_crash_looping, timeout=TIMEOUT, what="the init container to loop")
    (init,) = pod["status"]["initContainerStatuses"]
    last = init["lastState"]["terminated"]
    assert (last["exitCode"], last["message"].split(":")[0]) == (3, "NotFound")
    (server,) = pod["status"]["containerStatuses"]
    assert server["state"]["waiting"]["reason"] == "PodInitializing"
    assert server["restartCount"] == 0, "the server never started"
    assert pod["status"]["phase"] == "Pending"

    (origin.folder / "later.gguf").write_bytes(WEIGHTS)  # the source appears: the next try works
    ready = await member_pod(admin, namespace, "f", ready=True)
    assert ready["metadata"]["uid"] == pod["metadata"]["uid"]
    (init,) = ready["status"]["initContainerStatuses"]
    assert terminated(init)["exitCode"] == 0
    assert init["restartCount"] >= 2


@pytest.fixture
def silent_origin() -> Iterator[str]:
    """An address that takes connections and never answers (the kernel's backlog accepts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_deleted_jobs_running_pod_is_stopped_reported_failed_and_removed(
    admin: KubeClient, namespace: str, node: NodeStandInProcess, silent_origin: str
) -> None:
    stuck = Origin(silent_origin, hashlib.sha256(WEIGHTS).hexdigest(), Path())
    container = fetch_container(stuck, "w.gguf")
    container["args"] += ["--read-timeout", "300", "--retries", "0"]
    await admin.create(JOBS, job_body("stuck", container), namespace)

    async def running() -> Object | None:
        for pod in await pods_of_job(admin, namespace, "stuck"):
            statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
            if "running" in (statuses[0].get("state") or {}):
                return pod
        return None

    pod = await eventually(running, timeout=TIMEOUT, what="the fetch to be running")
    assert "batch.kubernetes.io/job-tracking" in pod["metadata"].get("finalizers", [])
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("sim://"))
    assert alive(pid)

    async with pod_history(admin, namespace) as history:
        await admin.delete(JOBS, "stuck", namespace, propagation_policy="Background")

        async def gone() -> bool:
            return not await pods_of_job(admin, namespace, "stuck")

        await eventually(gone, timeout=TIMEOUT, what="the job's pod to be gone")
    assert not alive(pid), "the fetch process was stopped"
    mine = [p for p in history if p["metadata"]["uid"] == pod["metadata"]["uid"]]
    terminating = [p for p in mine if p["metadata"].get("deletionTimestamp")]
    assert terminating, "the pod was never seen Terminating"
    final = terminating[-1]["status"]
    assert final["phase"] == "Failed", "reported terminal before it went, as a kubelet does"
    assert "terminated" in final["containerStatuses"][0]["state"]


async def test_a_real_server_runs_when_its_model_is_in_the_claim(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    binary = find_llama_server()  # a missing build fails here, saying how to build it
    start_node(cluster, tmp_path, started, namespace=namespace, llama_server=binary, monitor=False)
    claim = tmp_path / "simulators" / "pvc" / namespace / "weights"
    claim.mkdir(parents=True)
    shutil.copyfile(tiny_model(TinyModelSpec(context_length=512)), claim / "tiny.gguf")
    pod_spec = {
        "containers": [
            server_container("/models/tiny.gguf", {"name": "weights", "mountPath": "/models"})
        ],
        "volumes": [{"name": "weights", "persistentVolumeClaim": {"claimName": "weights"}}],
    }
    await admin.create(DEPLOYMENTS, member_deployment("r", pod_spec), namespace)

    pod = await member_pod(admin, namespace, "r", ready=True)
    (server,) = pod["status"]["containerStatuses"]
    pid = int(server["containerID"].removeprefix("sim://"))
    assert os.readlink(f"/proc/{pid}/exe") == str(binary.resolve())
    argv = cmdline(pid)
    assert argv[argv.index("--model") + 1] == str(claim / "tiny.gguf"), "--model rewritten"


async def test_a_stand_in_that_died_leaves_its_pods_to_the_next_one(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
    silent_origin: str,
) -> None:
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
    first = start_node(cluster, tmp_path / "first", started, namespace=namespace, monitor=False)
    scratch = {"name": "m", "mountPath": "/m"}
    pod_spec = {
        "containers": [server_container("/models/image.gguf", scratch)],
        "volumes": [{"name": "m", "emptyDir": {}}],
    }
    await admin.create(DEPLOYMENTS, member_deployment("m", pod_spec), namespace)
    stuck = Origin(silent_origin, hashlib.sha256(WEIGHTS).hexdigest(), Path())
    container = fetch_container(stuck, "w.gguf")
    container["args"] += ["--read-timeout", "300", "--retries", "0"]
    await admin.create(JOBS, job_body("stuck", container), namespace)
    member = await member_pod(admin, namespace, "m", ready=True)

    async def fetching() -> Object | None:
        for pod in await pods_of_job(admin, namespace, "stuck"):
            statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
            if "running" in (statuses[0].get("state") or {}):
                return pod
        return None

    job_pod = await eventually(fetching, timeout=TIMEOUT, what="the fetch to be running")
    first.kill()  # no clean-up: its processes die with it (PR_SET_PDEATHSIG), its pods stay
    start_node(cluster, tmp_path / "second", started, namespace=namespace, monitor=False)

    async def restarted() -> Object | None:
        pod = await member_pod(admin, namespace, "m", ready=True)
        (server,) = pod["status"]["containerStatuses"]
        return pod if server["restartCount"] == 1 else None

    again = await eventually(restarted, timeout=TIMEOUT, what="the member's server restarted")
    assert again["metadata"]["uid"] == member["metadata"]["uid"], "the same pod, taken over"
    lost = again["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert (lost["exitCode"], lost["reason"]) == (137, "ContainerStatusUnknown")

    async def failed() -> Object | None:
        pod = await admin.get(PODS, job_pod["metadata"]["name"], namespace)
        return pod if pod["status"]["phase"] == "Failed" else None

    gone = await eventually(failed, timeout=TIMEOUT, what="the job's lost pod to fail")
    end = terminated(gone["status"]["containerStatuses"][0])
    assert (end["exitCode"], end["reason"]) == (137, "ContainerStatusUnknown"), "Never: not rerun"


# -- slot server pods ------------------------------------------------------------------------------

SLOT_SERVER = "inference.modelpool.dev/slot-server"
#: The slot server's models folder, as its container sees it.
MODELS_DIR = "/models"
#: Where the node keeps the slot server's model files (hostPath).
SLOT_MODELS = "/var/lib/modelpool/slots"


def slot_server_deployment(pool: str, models: list[str]) -> Object:
    """A pool's slot server as the operator makes it: llama-server in router mode, each model a
    hostPath ``File`` volume mounted at ``MODELS_DIR/NAME.gguf``."""
    labels = {**MANAGED, SLOT_SERVER: pool}
    args = "--models-dir /models --models-max 1 --no-models-autoload --host 0.0.0.0 --port 8080"
    container = {
        "name": "server",
        "image": "llama-server",
        "args": [*args.split(), "--parallel", "2"],
        "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": [
            {"name": name, "mountPath": f"{MODELS_DIR}/{name}.gguf", "readOnly": True}
            for name in models
        ],
    }
    volumes = [
        {"name": name, "hostPath": {"path": f"{SLOT_MODELS}/{name}.gguf", "type": "File"}}
        for name in models
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{pool}-slots", "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {SLOT_SERVER: pool}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container], "volumes": volumes},
            },
        },
    }


def runs(pid: int, binary: Path) -> bool:
    return os.readlink(f"/proc/{pid}/exe") == str(binary.resolve())


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


async def test_a_slot_server_pod_runs_the_router_over_its_mounted_models_and_stops_them_all(
    admin: KubeClient, namespace: str, node: NodeStandInProcess, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        model = node_folder(tmp_path, f"{SLOT_MODELS}/{name}.gguf")
        model.parent.mkdir(parents=True, exist_ok=True)
        model.write_bytes(b"not a real model: the simulator's router plays it")
    await slot_server_loads_a_model_and_stops(admin, namespace)


async def test_a_slot_server_pod_runs_the_real_router_when_its_models_are_gguf(
    cluster: TestCluster,
    admin: KubeClient,
    namespace: str,
    tmp_path: Path,
    started: list[LocalProcess],
) -> None:
    binary = find_llama_server()  # a missing build fails here, saying how to build it
    start_node(cluster, tmp_path, started, namespace=namespace, llama_server=binary, monitor=False)
    for seed, name in enumerate(("a", "b")):
        model = node_folder(tmp_path, f"{SLOT_MODELS}/{name}.gguf")
        model.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tiny_model(TinyModelSpec(seed=seed, context_length=512)), model)
    await slot_server_loads_a_model_and_stops(admin, namespace, binary)


async def slot_server_loads_a_model_and_stops(
    admin: KubeClient, namespace: str, binary: Path | None = None
) -> int:
    """Create pool ``p``'s slot server over models ``a`` and ``b``; once Ready, load ``a`` through
    it; delete the pod: the router and its child are gone. The router's pid (it was ``binary``
    when given)."""
    await admin.create(DEPLOYMENTS, slot_server_deployment("p", ["a", "b"]), namespace)

    async def ready_pod() -> Object | None:
        pods = (await admin.list(PODS, namespace, label_selector=f"{SLOT_SERVER}=p")).items
        for pod in pods:
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or ()}
            if conditions.get("Ready") == "True":
                return pod
        return None

    pod = await eventually(ready_pod, timeout=TIMEOUT, what="the slot server's pod Ready")
    (server,) = pod["status"]["containerStatuses"]
    pid = int(server["containerID"].removeprefix("sim://"))
    if binary is not None:
        assert runs(pid, binary)
    argv = cmdline(pid)
    assert argv[argv.index("--models-dir") + 1] != MODELS_DIR, "--models-dir laid out here"
    assert environ(pid)["MODELPOOL_SLOT_SERVER"] == f"{namespace}/p"
    url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"

    async with http_client(base_url=url, timeout=10.0) as client:
        listed = (await client.get("/models")).json()["data"]
        assert {m["id"]: m["status"]["value"] for m in listed} == {"a": "unloaded", "b": "unloaded"}
        assert (await client.post("/models/load", json={"model": "a"})).json() == {"success": True}

        async def loaded() -> bool:
            listed = (await client.get("/models")).json()["data"]
            return bool({m["id"]: m["status"]["value"] for m in listed}["a"] == "loaded")

        await eventually(loaded, timeout=TIMEOUT, what="model a loaded")
    children = children_of(pid)
    assert children, "the loaded model is a child process of the router"

    await admin.delete(PODS, pod["metadata"]["name"], namespace)

    async def gone() -> bool:
        return not alive(pid) and not any(alive(child) for child in children)

    await eventually(gone, timeout=TIMEOUT, what="the router and its children gone")
    return pid
