"""Turning a pool's slot server on or off: what runs the old way is drained and gone first.

Pure (no I/O), unit-tested as a table (``tests/unit/test_slot_switch.py``); the I/O it asks for
(the server's removal, the live LISTs) is :meth:`~.slotruntime.SlotRuntime.switch_runtime`.

*Why a decision of the pool's own:* a pool runs its members either in pods of their own or as
models in its slot server (``spec.slotServer``), and a switch between the two stops whatever runs
the old way. Read from the spec, the switch took effect the moment the spec changed: turned on,
the InferenceService controller put the resident's Deployment to 0 at once (as if the pool had
released it), cutting its streams, and the server loaded the model beside the dying pod; turned
off, the member's pod started beside the server's loaded model. So the pool decides how its
members run in its own status (``status.runtime``), which the InferenceService controller and the
router-proxies read (:func:`~controlplane.api.v1alpha1.modelpool.serves_from_slot_server`), and
moves it only once the old way runs nothing:

1. **Drain.** While ``status.runtime`` is not what the spec asks, the pool plans as if nobody
   owned the slot: the resident is probed and released through the plan like any drained member
   (admission closed, ``/slots`` idle, the same fenced drain as a swap's), and nothing is granted.
2. **The old way gone.** Turning the server on: every member released with no pod left (a live
   LIST confirms it). Turning it off: nothing loaded in the server (its ``/models``, strays
   included), then its Deployment and Service are deleted, and its pod is gone (a live LIST).
3. **Switch.** ``status.runtime`` is written; from then on the owner is granted the new way (its
   pod raised, or its model loaded), one swap later than a swap's grant.

Bound: a switch waits for the resident's requests in flight (the drain's ``D``), then one pod's
stop (the member's, or the server's), then the owner's start the new way: a swap's time plus the
server's own start when turning it on. Admission to the resident is closed for as long, so its
held requests wait within ``swapBudget`` as a swap's do.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.api.v1alpha1.modelpool import RUNTIME_PODS, RUNTIME_SLOT_SERVER, RUNTIMES


@dataclass(frozen=True, slots=True)
class RuntimeSwitch:
    """How a pool's members run now (``status.runtime``) and how its spec asks them to."""

    current: str
    wanted: str

    @property
    def switching(self) -> bool:
        return self.current != self.wanted

    @property
    def slot_server(self) -> bool:
        """The members run in the slot server now (it is read, and its orders sent)."""
        return self.current == RUNTIME_SLOT_SERVER


def runtime_switch(pool: Mapping[str, Any]) -> RuntimeSwitch:
    """``pool``'s switch, from its object: ``status.runtime`` as last written (a status written
    before that field runs as its spec says, as it did then) and what ``spec.slotServer`` asks."""
    wanted = (
        RUNTIME_SLOT_SERVER
        if (pool.get("spec") or {}).get("slotServer") is not None
        else RUNTIME_PODS
    )
    written = (pool.get("status") or {}).get("runtime")
    return RuntimeSwitch(str(written) if written in RUNTIMES else wanted, wanted)


class SwitchStep(enum.Enum):
    #: Not switching: the members run as ``status.runtime`` says.
    SERVE = "serve"
    #: Something still runs the old way: the plan drains it (nothing is granted meanwhile).
    DRAIN = "drain"
    #: Turning the server off, and nothing is loaded in it: delete its Deployment and Service.
    RETIRE_SERVER = "retire-server"
    #: Nothing runs the old way as the caches say: confirm it on a live LIST, then switch.
    CONFIRM = "confirm"


def switch_step(
    switch: RuntimeSwitch,
    holding: Sequence[str],
    *,
    server_exists: bool = False,
    server_models: Mapping[str, bool] | None = None,
) -> SwitchStep:
    """What the switch waits for now. ``holding``: the members that still hold the slot as the
    plan (planned with no owner) sees them; ``server_exists``: the slot server's Deployment is in
    the cache; ``server_models``: model → whether it runs, as the server's ``/models`` said (None:
    it could not be read)."""
    if not switch.switching:
        return SwitchStep.SERVE
    if holding:
        return SwitchStep.DRAIN
    if switch.slot_server and server_exists:
        if server_models is None or any(server_models.values()):
            return SwitchStep.DRAIN  # unread, or a model still loaded (a stray included)
        return SwitchStep.RETIRE_SERVER
    return SwitchStep.CONFIRM
