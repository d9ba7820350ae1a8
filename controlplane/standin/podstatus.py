"""The status a kubelet writes for a pod: phase, conditions, and each container's state.

Pure. The containers' own statuses come from :class:`controlplane.standin.containers.ContainerRun`
(or, for the simple case of a running server, :func:`pod_status` makes them); this module puts
them together with the pod's phase and the kubelet's conditions:

* ``PodScheduled``: True once bound (False with reason ``Unschedulable`` while the node does not
  fit a Job's pod, :func:`unschedulable_status`);
* ``Initialized``: True once every init container has succeeded (False with
  ``ContainersNotInitialized`` and the list of the others, as a kubelet says it);
* ``ContainersReady``: every regular container ready (``ContainersNotReady`` and the unready ones);
* ``Ready``: ``ContainersReady`` *and* every ``spec.readinessGates`` condition True (otherwise
  reason ``ReadinessGatesNotReady``), ``PodCompleted`` once the pod is Succeeded or Failed;
* conditions the kubelet does not own (a readiness gate's) are kept as they are on every write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from controlplane.runtime.objects import Object

#: The conditions a kubelet owns on a pod; any other (a readiness gate's) is someone else's and
#: is kept as it is.
KUBELET_CONDITIONS: Final = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)
TERMINAL_PHASES: Final = ("Succeeded", "Failed")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    existing: Sequence[Mapping[str, Any]], type_: str, status: bool, **extra: str
) -> Object:
    """A condition that keeps its ``lastTransitionTime`` unless its status flips."""
    value = "True" if status else "False"
    old = next((c for c in existing if c.get("type") == type_), None)
    stamp = old.get("lastTransitionTime") if old and old.get("status") == value else None
    return {"type": type_, "status": value, "lastTransitionTime": stamp or now(), **extra}


def readiness_gates(pod: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether every readiness gate's condition is True, and if not, a kubelet's message."""
    conditions = {
        c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or ()
    }
    for gate in (pod.get("spec") or {}).get("readinessGates") or ():
        wanted = gate.get("conditionType")
        if conditions.get(wanted) is None:
            return (
                False,
                f'corresponding condition of pod readiness gate "{wanted}" does not exist.',
            )
        if conditions.get(wanted) != "True":
            return False, f'the status of pod readiness gate "{wanted}" is not "True"'
    return True, ""


def _names(statuses: Sequence[Mapping[str, Any]], ok: str) -> list[str]:
    """The names of the containers whose ``ok`` test fails."""
    if ok == "ready":
        return [str(s.get("name")) for s in statuses if not s.get("ready")]
    return [
        str(s.get("name"))
        for s in statuses
        if ((s.get("state") or {}).get("terminated") or {}).get("exitCode") != 0
    ]


def assemble_status(
    pod: Mapping[str, Any],
    *,
    phase: str,
    ip: str,
    started_at: str,
    init_statuses: Sequence[Object] = (),
    container_statuses: Sequence[Object],
) -> Object:
    """The pod's status from its containers' statuses (init ones first) and its ``phase``."""
    current: Object = dict(pod.get("status") or {})
    conditions = current.get("conditions") or []
    done = phase in TERMINAL_PHASES
    pending_init = _names(init_statuses, "succeeded")
    unready = _names(container_statuses, "ready")
    containers_ready = not unready and not done
    gates_ready, why = readiness_gates(pod)
    ready = containers_ready and gates_ready
    if done:
        unready_why: dict[str, str] = {"reason": "PodCompleted"}
    elif unready:
        listed = " ".join(unready)
        unready_why = {
            "reason": "ContainersNotReady",
            "message": f"containers with unready status: [{listed}]",
        }
    else:
        unready_why = {"reason": "ReadinessGatesNotReady", "message": why}
    initialized = not pending_init
    init_why = {
        "reason": "ContainersNotInitialized",
        "message": f"containers with incomplete status: [{' '.join(pending_init)}]",
    }
    others = [c for c in conditions if c.get("type") not in KUBELET_CONDITIONS]
    status = dict(current)
    status.update(
        phase=phase,
        hostIP=ip,
        hostIPs=[{"ip": ip}],
        podIP=ip,
        podIPs=[{"ip": ip}],
        startTime=current.get("startTime") or started_at,
        conditions=[
            condition(conditions, "PodReadyToStartContainers", True),
            condition(conditions, "Initialized", initialized, **({} if initialized else init_why)),
            condition(conditions, "Ready", ready, **({} if ready else unready_why)),
            condition(
                conditions,
                "ContainersReady",
                containers_ready,
                **({} if containers_ready else unready_why),
            ),
            condition(conditions, "PodScheduled", True),
            *others,
        ],
        containerStatuses=list(container_statuses),
    )
    if init_statuses:
        status["initContainerStatuses"] = list(init_statuses)
    else:
        status.pop("initContainerStatuses", None)
    return status


def pod_status(
    pod: Mapping[str, Any],
    *,
    ip: str,
    ready: bool,
    restarts: int,
    started_at: str,
    container_id: str,
) -> Object:
    """The status a kubelet reports for a pod whose (simulated) containers run: ``ready`` is the
    containers' readiness; the pod is Ready only when they are and every readiness gate's
    condition is True. Conditions the kubelet does not own (a gate's) are kept as they are."""
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = [
        {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": f"sim://{container.get('image', '')}",
            "containerID": container_id,
            "ready": ready,
            "started": True,
            "restartCount": restarts,
            "state": {"running": {"startedAt": started_at}},
        }
        for container in containers
    ]
    return assemble_status(
        pod, phase="Running", ip=ip, started_at=started_at, container_statuses=statuses
    )


def unschedulable_status(pod: Mapping[str, Any], message: str) -> Object:
    """A pending pod no node fits, as the scheduler reports it."""
    current: Object = dict(pod.get("status") or {})
    conditions = [c for c in current.get("conditions") or () if c.get("type") != "PodScheduled"]
    scheduled = condition(
        current.get("conditions") or [], "PodScheduled", False, reason="Unschedulable",
        message=message,
    )  # fmt: skip
    return {**current, "phase": "Pending", "conditions": [*conditions, scheduled]}


def _container_summary(status: Mapping[str, Any]) -> tuple[Any, ...]:
    state = status.get("state") or {}
    kind = next(iter(state), None)
    detail = (state.get(kind) or {}) if kind else {}
    return (
        status.get("name"),
        status.get("ready"),
        status.get("restartCount"),
        status.get("containerID"),
        kind,
        detail.get("reason"),
        detail.get("exitCode"),
    )


def pod_status_summary(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a pod status write would change; the rest (timestamps, messages) follows from it."""
    conditions = tuple(
        sorted(
            (str(c.get("type")), str(c.get("status")), str(c.get("reason")))
            for c in status.get("conditions") or ()
        )
    )
    containers = tuple(_container_summary(c) for c in status.get("containerStatuses") or ())
    init = tuple(_container_summary(c) for c in status.get("initContainerStatuses") or ())
    return (status.get("phase"), status.get("podIP"), conditions, containers, init)


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
