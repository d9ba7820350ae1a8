"""A Terminating pod's grace period as the node stand-in reads it (a kubelet's order)."""

from __future__ import annotations

from controlplane.standin.stopgrace import DEFAULT_GRACE_SECONDS, grace_seconds


def test_the_deletions_grace_period_first_then_the_pods_then_the_apis_default() -> None:
    pod = {
        "metadata": {"deletionGracePeriodSeconds": 5},
        "spec": {"terminationGracePeriodSeconds": 600},
    }
    assert grace_seconds(pod) == 5.0
    assert grace_seconds({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 600}}) == 600.0
    assert grace_seconds({"metadata": {}, "spec": {}}) == DEFAULT_GRACE_SECONDS == 30.0


def test_zero_is_honoured_and_nonsense_ignored() -> None:
    assert grace_seconds({"metadata": {"deletionGracePeriodSeconds": 0}}) == 0.0
    odd = {
        "metadata": {"deletionGracePeriodSeconds": True},
        "spec": {"terminationGracePeriodSeconds": -1},
    }
    assert grace_seconds(odd) == DEFAULT_GRACE_SECONDS
