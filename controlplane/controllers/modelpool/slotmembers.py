"""A pool's members as its slot server shows them, and the orders that carry out a decision.

Pure (no I/O), unit-tested as tables (``tests/unit/test_slot_server.py``).

*Why the same rules as pods:* in a pool with ``spec.slotServer`` a member's model is loaded in the
slot server instead of running in a pod of its own, but what the plan (:mod:`.plan`) asks of a
member is the same: is it serving (probe before release), starting, or holding nothing. So each
member's :class:`~.member.MemberState` is rewritten from what ``GET /models`` said, and the plan,
the status and the scheduler read it unchanged:

* ``loaded`` (or ``sleeping``, which wakes on a request): Ready, the server's address as its
  ready endpoint (the idle probe asks ``/slots?model=`` there);
* ``loading``: Starting, probed as a starting pod is;
* a child that exited on its own: Failed; anything else: Stopped;
* a running model counts as a pod: a member holds the slot until its model is unloaded (and its
  own Deployment, kept at 0, has no pod left either);
* a model the server does not list (its weights arrived after the server started), a member the
  server cannot serve: its weights are not ready (the pool waits instead of draining for it);
* **the server could not be read**: every member may be running, and serving at an address whose
  probe fails (:data:`UNREADABLE`): nothing is released and nothing granted until it answers,
  never a drain on a guess.

:func:`slot_orders` turns the decided slots into the server's orders: unload every released member
still running, then load the granted one once nothing else runs. :func:`stray_models` names what
runs for no member (one removed from the pool while loaded), unloaded once idle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from controlplane.api.v1alpha1.inferenceservice import (
    PHASE_FAILED,
    PHASE_READY,
    PHASE_STARTING,
    PHASE_STOPPED,
)
from controlplane.api.v1alpha1.modelpool import SLOT_GRANTED, SLOT_RELEASED
from controlplane.controllers.modelpool.member import MemberState
from controlplane.probes.slotserver import ModelState, ModelStatus

#: The address of a member whose slot server could not be read: its probe is never idle.
UNREADABLE: Final = "slot-server-unreadable:"


def unreadable_why(url: str) -> str | None:
    """Why the server could not be read, when ``url`` is :data:`UNREADABLE`'s."""
    return url[len(UNREADABLE) :] if url.startswith(UNREADABLE) else None


@dataclass(frozen=True, slots=True)
class SlotView:
    """What one reading of the slot server said: its address and every model, or why not."""

    url: str | None
    models: Mapping[str, ModelState] | None = None
    error: str | None = None

    @property
    def readable(self) -> bool:
        return self.url is not None and self.models is not None


def slot_member_state(
    base: MemberState, model_name: str, view: SlotView, unservable: str | None
) -> MemberState:
    """``base`` (the member as the caches show it) as the slot server makes it (module doc)."""
    if not base.found:
        return base
    if not view.readable:
        why = view.error or "the slot server has no ready endpoint"
        return replace(
            base, phase=None, urls=(UNREADABLE + why,), starting_urls=(), pods=base.pods + 1
        )
    assert view.models is not None
    assert view.url is not None
    model = view.models.get(model_name)
    listed = model is not None
    status = model.status if model is not None else ModelStatus.UNLOADED
    running = model is not None and model.running
    serving = status in (ModelStatus.LOADED, ModelStatus.SLEEPING)
    if serving:
        phase = PHASE_READY
    elif status is ModelStatus.LOADING:
        phase = PHASE_STARTING
    elif model is not None and model.failed:
        phase = PHASE_FAILED
    else:
        phase = PHASE_STOPPED
    weights = base.weights
    if unservable is not None:
        weights = unservable
    elif not listed:
        weights = f"{model_name} is not in the slot server's models yet"
    return replace(
        base,
        phase=phase,
        urls=(view.url,) if serving else (),
        starting_urls=(view.url,) if status is ModelStatus.LOADING else (),
        pods=base.pods + int(running),
        # Nothing raises a member's Deployment here: the release is ours to carry out (unload).
        acknowledged=True,
        weights_ready=base.weights_ready and unservable is None and listed,
        weights=weights,
    )


@dataclass(frozen=True, slots=True)
class SlotOrders:
    """What to tell the slot server after the decision is written: models by name."""

    unload: tuple[str, ...] = ()
    load: str | None = None


def slot_orders(
    slots: Mapping[str, str | None],
    models_of: Mapping[str, str],
    view: SlotView,
) -> SlotOrders:
    """The orders that carry out ``slots`` (member → decision, as just written): unload each
    ``Released`` member's model still running; load the ``Granted`` member's model once no
    other model runs (llama.cpp would refuse a second one anyway, at ``--models-max 1``). None
    when the server could not be read. ``models_of``: member → model name."""
    if view.models is None:
        return SlotOrders()
    models = view.models
    running = {name for name, state in models.items() if state.running}
    unload = tuple(
        models_of[m]
        for m, slot in slots.items()
        if slot == SLOT_RELEASED and m in models_of and models_of[m] in running
    )
    granted = [m for m, slot in slots.items() if slot == SLOT_GRANTED and m in models_of]
    load = None
    if len(granted) == 1:
        model = models_of[granted[0]]
        state = models.get(model)
        if state is not None and not state.running and not running - {model}:
            load = model
    return SlotOrders(unload, load)


def orders_done(orders: SlotOrders, models: Mapping[str, ModelState]) -> bool:
    """``/models`` shows ``orders`` carried out: every unloaded model stopped, the loaded one
    loaded (or its child exited: the pool sees that as Failed)."""
    if any((state := models.get(m)) is not None and state.running for m in orders.unload):
        return False
    if orders.load is None:
        return True
    state = models.get(orders.load)
    return state is None or state.status is ModelStatus.LOADED or state.failed


def stray_models(models_of: Mapping[str, str], view: SlotView) -> tuple[str, ...]:
    """Models running in the server that no member serves any more (a member removed from the
    pool while loaded): nobody's decision unloads them, and they would keep every grant waiting.
    The runtime unloads each once its ``/slots`` says idle, as any drain."""
    if view.models is None:
        return ()
    served = set(models_of.values())
    return tuple(
        sorted(name for name, state in view.models.items() if state.running and name not in served)
    )


def busy_with_orders(
    slots: Mapping[str, str | None], models_of: Mapping[str, str], view: SlotView
) -> bool:
    """Whether the server is between states the pool waits on (a model loading, a released one
    still running, a granted one not loaded): ``/models`` has no watch, so it is read again soon."""
    if view.models is None:
        return True
    for member, slot in slots.items():
        state = view.models.get(models_of.get(member, ""))
        if state is None:
            continue
        if state.status is ModelStatus.LOADING:
            return True
        if slot == SLOT_RELEASED and state.running:
            return True
        if slot == SLOT_GRANTED and state.status is not ModelStatus.LOADED and not state.failed:
            return True
    return False
