"""A stopping router-proxy's timeline (controlplane/router/stopplan.py), and its flags."""

from __future__ import annotations

import argparse

import pytest

from controlplane.api.v1alpha1.modelrouter import (
    DEFAULT_PROXY_TERMINATION_GRACE_SECONDS,
    MIN_PROXY_TERMINATION_GRACE_SECONDS,
)
from controlplane.router.command import add_arguments, settings_from
from controlplane.router.stopplan import StopPlan


def test_the_defaults_relay_for_the_grace_period_less_the_margin_after_the_delay() -> None:
    plan = StopPlan()
    assert (plan.grace, plan.delay, plan.margin) == (600, 5, 5)
    assert plan.accepting_for == 5
    assert plan.budget == 595
    assert plan.relay_for(5) == 590  # when the socket closes
    assert plan.relay_for(594.5) == pytest.approx(0.5)
    assert plan.relay_for(700) == 0
    assert plan.grace == DEFAULT_PROXY_TERMINATION_GRACE_SECONDS


def test_the_exit_comes_before_sigkill_whatever_the_numbers() -> None:
    """The relays are cut no later than the grace period less the margin, and the socket
    closes no later than that: a grace period shorter than the delay shortens the delay."""
    for grace in (0, 3, 7, 10, 15, 600):
        for delay in (0, 5, 20):
            for margin in (0, 5):
                plan = StopPlan(grace=grace, delay=delay, margin=margin)
                assert plan.accepting_for <= plan.budget <= max(0, grace - margin)
                assert plan.accepting_for + plan.relay_for(plan.accepting_for) == plan.budget
                assert plan.budget + margin <= max(grace, margin)
    short = StopPlan(grace=7, delay=5, margin=5)
    assert (short.accepting_for, short.budget) == (2, 2)
    assert StopPlan(grace=3, delay=5, margin=5).budget == 0


def test_the_smallest_grace_period_the_api_allows_still_relays_for_a_while() -> None:
    plan = StopPlan(grace=MIN_PROXY_TERMINATION_GRACE_SECONDS)
    assert plan.relay_for(plan.accepting_for) >= 5


def test_negative_numbers_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        StopPlan(grace=-1)


def test_the_flags_make_the_plan_with_their_documented_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert settings_from(parser.parse_args(["--router", "r"])).stop_plan == StopPlan(600, 5, 5)
    flags = ["--router", "r", "--termination-grace-period", "90", "--shutdown-delay", "2"]
    plan = settings_from(parser.parse_args([*flags, "--shutdown-margin", "3"])).stop_plan
    assert plan == StopPlan(grace=90, delay=2, margin=3)
    assert "relays cut 87 s after SIGTERM" in plan.describe()
    with pytest.raises(SystemExit):
        parser.parse_args(["--router", "r", "--shutdown-delay", "-1"])
