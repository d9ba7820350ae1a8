"""A container's record across restarts, and the pod status a kubelet puts together from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane.standin.containers import (
    CRASH_LOOP,
    ContainerRun,
    backoff_seconds,
    restarts_after,
)
from controlplane.standin.podstatus import (
    assemble_status,
    pod_status_summary,
    unschedulable_status,
)
from controlplane.standin.process import ExitedProcess

IP = "127.0.0.1"


@pytest.mark.parametrize(
    ("policy", "code", "init", "expected"),
    [
        ("Always", 0, False, True),
        ("Always", 1, False, True),
        ("OnFailure", 0, False, False),
        ("OnFailure", 1, False, True),
        ("Never", 1, False, False),
        (None, 0, False, True),
        ("Always", 0, True, False),
        ("Always", 1, True, True),
        ("Never", 1, True, False),
    ],
)
def test_what_restarts_under_each_policy(
    policy: str | None, code: int, init: bool, expected: bool
) -> None:
    assert restarts_after(policy, code, init=init) is expected


def test_the_back_off_restarts_at_once_then_doubles_up_to_its_cap() -> None:
    assert [backoff_seconds(n, 1.0, 5.0) for n in range(1, 7)] == [0, 1, 2, 4, 5, 5]


def process(tmp_path: Path) -> ExitedProcess:
    return ExitedProcess(tmp_path / "log", "boom\n")


def test_a_crash_loop_waits_reports_its_last_end_and_counts_restarts(tmp_path: Path) -> None:
    run = ContainerRun("server", "img")
    assert run.status("p")["state"] == {"waiting": {"reason": "ContainerCreating"}}
    for expected_restarts in range(3):
        assert run.may_start(clock=100.0)
        run.begin(process(tmp_path))
        assert run.restarts == expected_restarts
        run.end(1, "", restart=True, clock=10.0, base=1.0, cap=10.0)
    status = run.status("p")
    assert status["state"]["waiting"]["reason"] == CRASH_LOOP
    assert (
        "back-off 2s restarting failed container=server pod=p"
        in (status["state"]["waiting"]["message"])
    )
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert not run.may_start(clock=11.0), "still in its back-off"
    assert run.may_start(clock=12.0)
    run.begin(process(tmp_path))
    assert run.status("p")["lastState"]["terminated"]["reason"] == "Error"
    run.mark_ready(True)
    assert run.failures == 0, "ready resets the back-off"


def test_a_container_that_is_not_restarted_reports_its_end(tmp_path: Path) -> None:
    run = ContainerRun("fetch-model")
    run.begin(process(tmp_path))
    run.end(3, "NotFound: gone", restart=False, clock=0.0, base=1.0, cap=10.0)
    assert run.done
    assert not run.succeeded
    end = run.status("p")["state"]["terminated"]
    assert (end["exitCode"], end["reason"], end["message"]) == (3, "Error", "NotFound: gone")
    assert not run.may_start(clock=1e9)


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec, "status": {}}


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_an_initializing_pod_is_pending_and_says_which_init_containers_are_left() -> None:
    init = ContainerRun("fetch-model").status("p")
    server = ContainerRun("server", waiting=("PodInitializing", "")).status("p")
    status = assemble_status(pod(), phase="Pending", ip=IP, started_at="t0",
                             init_statuses=[init], container_statuses=[server])  # fmt: skip
    found = conditions(status)
    assert status["phase"] == "Pending"
    assert (found["Initialized"]["status"], found["Initialized"]["reason"]) == (
        "False", "ContainersNotInitialized"
    )  # fmt: skip
    assert found["Initialized"]["message"] == "containers with incomplete status: [fetch-model]"
    assert found["Ready"]["reason"] == "ContainersNotReady"
    assert "[server]" in found["ContainersReady"]["message"]
    assert status["initContainerStatuses"] == [init]


def test_a_finished_pod_is_not_ready_because_it_completed(tmp_path: Path) -> None:
    run = ContainerRun("fetch-model")
    run.begin(process(tmp_path))
    run.end(0, "", restart=False, clock=0.0, base=1.0, cap=10.0)
    status = assemble_status(pod(), phase="Succeeded", ip=IP, started_at="t0",
                             container_statuses=[run.status("p")])  # fmt: skip
    found = conditions(status)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "PodCompleted")
    assert found["Initialized"]["status"] == "True"
    assert "initContainerStatuses" not in status


def test_the_summary_sees_a_change_of_state_but_not_of_timestamps(tmp_path: Path) -> None:
    run = ContainerRun("server")
    waiting = assemble_status(pod(), phase="Pending", ip=IP, started_at="t0",
                              container_statuses=[run.status("p")])  # fmt: skip
    run.begin(process(tmp_path))
    running = assemble_status(pod(), phase="Running", ip=IP, started_at="t1",
                              container_statuses=[run.status("p")])  # fmt: skip
    assert pod_status_summary(waiting) != pod_status_summary(running)
    again = assemble_status({**pod(), "status": running}, phase="Running", ip=IP,
                            started_at="t2", container_statuses=[run.status("p")])  # fmt: skip
    assert pod_status_summary(again) == pod_status_summary(running)


def test_a_pod_no_node_fits_is_pending_unschedulable() -> None:
    status = unschedulable_status(pod(), "0/1 nodes are available")
    scheduled = conditions(status)["PodScheduled"]
    assert status["phase"] == "Pending"
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
