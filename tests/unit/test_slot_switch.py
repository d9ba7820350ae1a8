"""Turning a pool's slot server on or off (controllers/modelpool/slotswitch.py): the pool's
decision in ``status.runtime``, and what a switch waits for before it is written."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.api.v1alpha1.modelpool import serves_from_slot_server
from controlplane.controllers.modelpool.slotswitch import (
    RuntimeSwitch,
    SwitchStep,
    runtime_switch,
    switch_step,
)

PODS, SERVER = "Pods", "SlotServer"


def pool(slot_server: bool, runtime: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"members": [{"inferenceServiceRef": {"name": "a"}}]}
    if slot_server:
        spec["slotServer"] = {}
    return {"spec": spec, "status": {"runtime": runtime} if runtime else {}}


@pytest.mark.parametrize(
    ("slot_server", "runtime", "current", "wanted", "served"),
    [
        (False, None, PODS, PODS, False),  # a status from before the field: as the spec says
        (True, None, SERVER, SERVER, True),
        (True, PODS, PODS, SERVER, False),  # turned on: pods until the switch is written
        (False, SERVER, SERVER, PODS, True),  # turned off: the server until then
        (True, SERVER, SERVER, SERVER, True),
        (False, "Bogus", PODS, PODS, False),
    ],
)
def test_the_runtime_is_the_pools_written_decision_not_its_spec(
    slot_server: bool, runtime: str | None, current: str, wanted: str, served: bool
) -> None:
    """The InferenceService controller and the router-proxies read where a member runs from the
    pool's status: a spec just changed moves nothing until the pool switches."""
    obj = pool(slot_server, runtime)
    assert runtime_switch(obj) == RuntimeSwitch(current, wanted)
    assert serves_from_slot_server(obj) is served


ON, OFF, STAY = RuntimeSwitch(PODS, SERVER), RuntimeSwitch(SERVER, PODS), RuntimeSwitch(PODS, PODS)


@pytest.mark.parametrize(
    ("switch", "holding", "exists", "models", "step"),
    [
        (STAY, ("a",), False, None, SwitchStep.SERVE),
        (RuntimeSwitch(SERVER, SERVER), (), True, {"m": True}, SwitchStep.SERVE),
        # Turning it on: the resident's pod drains first, then the switch is confirmed live.
        (ON, ("a",), False, None, SwitchStep.DRAIN),
        (ON, (), False, None, SwitchStep.CONFIRM),
        # Turning it off: its loaded model drains first (a stray included), then it is deleted,
        # then its pod's end is confirmed live.
        (OFF, ("a",), True, {"model-a": True}, SwitchStep.DRAIN),
        (OFF, (), True, {"stray": True, "model-a": False}, SwitchStep.DRAIN),
        (OFF, (), True, None, SwitchStep.DRAIN),  # unreadable: nothing on a guess
        (OFF, (), True, {"model-a": False}, SwitchStep.RETIRE_SERVER),
        (OFF, (), True, {}, SwitchStep.RETIRE_SERVER),
        (OFF, (), False, None, SwitchStep.CONFIRM),
    ],
)
def test_a_switch_waits_until_nothing_runs_the_old_way(
    switch: RuntimeSwitch,
    holding: tuple[str, ...],
    exists: bool,
    models: dict[str, bool] | None,
    step: SwitchStep,
) -> None:
    assert switch_step(switch, holding, server_exists=exists, server_models=models) is step
