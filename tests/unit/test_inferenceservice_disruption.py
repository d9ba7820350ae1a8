"""Evictions wait for idle: the member's PodDisruptionBudget and the pods a drain waits for."""

from __future__ import annotations

from typing import Any

from controlplane.api.v1alpha1 import InferenceService
from controlplane.controllers.inferenceservice.desired import desired_deployment
from controlplane.controllers.inferenceservice.disruption import (
    desired_disruption_budget,
    leaving_node,
    pods_leaving,
)
from controlplane.runtime.objects import node_leaving

ISVC = InferenceService.from_dict(
    {
        "apiVersion": "inference.modelpool.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "llama", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {"model": {"name": "tiny", "source": "/models/tiny.gguf"}},
    }
)
NODES: dict[str, dict[str, Any]] = {
    "gpu-1": {"metadata": {"name": "gpu-1"}, "spec": {"unschedulable": True}},
    "gpu-2": {"metadata": {"name": "gpu-2"}, "spec": {}},
}


def pod(name: str, node: str | None, *, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def test_the_budget_selects_exactly_the_member_pods_and_refuses_every_eviction_of_a_ready_one() -> (
    None
):
    budget = desired_disruption_budget(ISVC)
    pod_labels = desired_deployment(ISVC, 1)["spec"]["template"]["metadata"]["labels"]
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert budget["spec"]["maxUnavailable"] == 0
    # A pod that is not Ready serves nothing: evicting it cuts nothing, and a broken member
    # never blocks a drain.
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    owner = budget["metadata"]["ownerReferences"][0]
    assert (owner["uid"], owner["controller"]) == ("u1", True)
    assert (budget["metadata"]["name"], budget["metadata"]["namespace"]) == ("llama", "ns")


def test_only_live_pods_on_a_cordoned_node_leave() -> None:
    pods = [
        pod("on-cordoned", "gpu-1"),
        pod("stopping", "gpu-1", terminating=True),  # already going
        pod("elsewhere", "gpu-2"),
        pod("pending", None),  # not scheduled: on no node
        pod("gone-node", "gpu-9"),  # a node we do not know: not cordoned as far as we know
    ]
    leaving = pods_leaving(pods, NODES.get)
    assert [p["metadata"]["name"] for p in leaving] == ["on-cordoned"]
    assert leaving_node(leaving) == "gpu-1"
    assert leaving_node([]) is None


def test_a_node_leaves_when_cordoned() -> None:
    assert node_leaving(NODES["gpu-1"])
    assert not node_leaving(NODES["gpu-2"])
    assert not node_leaving(None)
    assert not node_leaving({"metadata": {"name": "x"}})


def tainted(*taints: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "spec": {"taints": list(taints)}}


def test_a_node_autoscalers_removal_taint_is_a_drain_like_a_cordon() -> None:
    assert node_leaving(tainted({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}))
    old_karpenter = {"key": "karpenter.sh/disruption", "value": "disrupting"}
    assert node_leaving(tainted({**old_karpenter, "effect": "NoSchedule"}))
    assert node_leaving(tainted({"key": "ToBeDeletedByClusterAutoscaler", "value": "1733",
                                 "effect": "NoSchedule"}))  # fmt: skip
    assert node_leaving(tainted({"key": "karpenter.sh/disrupted", "effect": "NoExecute"}))


def test_a_soft_mark_or_an_unrelated_taint_moves_nothing() -> None:
    # A candidate the Cluster Autoscaler may pick some day, not a drain.
    soft = {"key": "DeletionCandidateOfClusterAutoscaler", "effect": "PreferNoSchedule"}
    assert not node_leaving(tainted(soft))
    # The removal taint's key with a discouraging effect only.
    assert not node_leaving(
        tainted({"key": "karpenter.sh/disrupted", "effect": "PreferNoSchedule"})
    )
    # An old Karpenter taint with another value; a GPU node's own taint.
    assert not node_leaving(tainted({"key": "karpenter.sh/disruption", "value": "x",
                                     "effect": "NoSchedule"}))  # fmt: skip
    assert not node_leaving(tainted({"key": "nvidia.com/gpu", "effect": "NoSchedule"}))
    assert not node_leaving(tainted())
