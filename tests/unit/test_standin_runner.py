"""A pod's containers on the stand-in: the phase a kubelet derives, and taking over a pod."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from controlplane.runtime.client import KubeClient
from controlplane.standin.process import ExitedProcess
from controlplane.standin.runner import LOST_REASON, PodContainers
from controlplane.standin.settings import NodeSettings


def pod(policy: str = "Never", status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {
            "restartPolicy": policy,
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "main"}],
        },
        "status": status or {},
    }


def containers(tmp_path: Path, body: dict[str, Any]) -> PodContainers:
    # The client is only used to read Secrets when a container starts; none starts here.
    return PodContainers(body, NodeSettings(log_dir=tmp_path), cast(KubeClient, None))


def end(run: Any, code: int, tmp_path: Path, *, restart: bool = False) -> None:
    run.begin(ExitedProcess(tmp_path / "log", ""))
    run.end(code, "", restart=restart, clock=0.0, base=1.0, cap=1.0)


def test_the_phase_follows_the_containers(tmp_path: Path) -> None:
    found = containers(tmp_path, pod())
    (init,), (main,) = found.init, found.containers
    assert found.phase() == "Pending"
    assert found.status(pod(), "127.0.0.1")["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "PodInitializing"}
    }
    end(init, 0, tmp_path)
    assert found.phase() == "Pending"
    main.begin(ExitedProcess(tmp_path / "log", ""))
    assert found.phase() == "Running"
    main.end(0, "", restart=False, clock=0.0, base=1.0, cap=1.0)
    assert found.phase() == "Succeeded"
    assert found.finished


def test_a_failed_init_container_fails_a_never_pod(tmp_path: Path) -> None:
    found = containers(tmp_path, pod())
    end(found.init[0], 1, tmp_path)
    assert found.phase() == "Failed"


def test_a_main_container_failure_fails_the_pod(tmp_path: Path) -> None:
    found = containers(tmp_path, pod())
    end(found.init[0], 0, tmp_path)
    end(found.containers[0], 3, tmp_path)
    assert found.phase() == "Failed"


def test_a_stopped_pod_that_had_not_finished_has_failed(tmp_path: Path) -> None:
    found = containers(tmp_path, pod("Always"))
    found.stopped = True
    assert found.phase() == "Failed"


def test_a_pod_an_earlier_stand_in_ran_is_taken_over(tmp_path: Path) -> None:
    status = {
        "initContainerStatuses": [
            {"name": "init", "restartCount": 2, "state": {"terminated": {"exitCode": 0}}}
        ],
        "containerStatuses": [
            {"name": "main", "restartCount": 1, "state": {"running": {"startedAt": "t"}}}
        ],
    }
    found = containers(tmp_path, pod("Always", status))
    assert found.adopt(pod("Always", status)) == ["main"]
    (init,), (main,) = found.init, found.containers
    assert init.succeeded, "an init container that succeeded stays so"
    assert init.restarts == 2
    assert main.ended is not None
    assert (main.ended["exitCode"], main.ended["reason"]) == (137, LOST_REASON)
    assert main.will_restart
    assert main.may_start(clock=0.0)
    main.begin(ExitedProcess(tmp_path / "log", ""))
    assert main.restarts == 2


def test_a_never_pods_lost_container_is_not_run_again(tmp_path: Path) -> None:
    status = {
        "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0}}}],
        "containerStatuses": [{"name": "main", "state": {"running": {}}}],
    }
    found = containers(tmp_path, pod("Never", status))
    found.adopt(pod("Never", status))
    assert found.phase() == "Failed"
