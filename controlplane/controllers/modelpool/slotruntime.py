"""The I/O of a pool with a slot server (``spec.slotServer``): its objects, its reading, its orders.

The pure parts are :mod:`.slotserver` (the Deployment and Service) and :mod:`.slotmembers` (the
members as the server shows them, the orders); the reconciler calls :meth:`SlotRuntime.observe`
before it plans and :meth:`SlotRuntime.carry_out` once the decision is written.

* **The server's objects** are applied when they differ from the cache, except a change of the
  pod's template while a model is loaded: that would replace the server's pod and kill whatever
  is in flight. Such a change (a member added, its weights arrived, ``spec.slotServer`` edited)
  makes the pool *outdated*: the reconciler plans as if nobody owned the slot, so the resident
  is released through the idle gate like any drain, and the new template is applied once nothing
  is loaded.
* **The reading** is one ``GET /models`` per reconcile, a live read, so the grant needs no other.
* **The orders** (unload, load) follow the written decision, and are repeated by every reconcile
  until ``/models`` shows them done (they are idempotent). ``/models`` has no watch: the reconcile
  that sent an order reads it every 10 ms for up to ``wait_seconds`` and, once the order shows,
  reconciles again at once (the grant follows an unload by one status write); past that the pool
  is read every ``poll_seconds``. A model that runs for no member (one removed from the pool
  while loaded) is unloaded once its ``/slots?model=`` says idle. A load whose child exited on its
  own is not repeated before :data:`FAILED_LOAD_RETRY_SECONDS`.
* **Turning the server on or off** (:mod:`.slotswitch`): while the switch drains, the server is
  read as it is (turning it off) or not at all (turning it on), and nothing of it is applied;
  once nothing runs the old way, :meth:`SlotRuntime.switch_runtime` deletes a server turned off
  and confirms on a live LIST that nothing of the old way is left before the pool switches.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.controllers.children import FIELD_MANAGER, needs_apply
from controlplane.controllers.inferenceservice.desired import ISVC_LABEL
from controlplane.controllers.inferenceservice.disruption import leaving_node, pods_leaving
from controlplane.controllers.inferenceservice.weights import WeightsPlacement
from controlplane.controllers.inferenceservice.weightsstatus import weights_ready
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.slotmembers import (
    SlotOrders,
    SlotView,
    busy_with_orders,
    orders_done,
    slot_member_state,
    slot_orders,
    stray_models,
)
from controlplane.controllers.modelpool.slotserver import (
    SLOT_SERVER_LABEL,
    desired_slot_deployment,
    desired_slot_disruption_budget,
    desired_slot_service,
    mounted_members,
    restarts_server,
    slot_server_name,
    unservable,
)
from controlplane.controllers.modelpool.slotswitch import RuntimeSwitch, SwitchStep, switch_step
from controlplane.probes.idle import IdleOutcome, IdleProbe
from controlplane.probes.llamacpp import SlotsProbe
from controlplane.probes.slotserver import SlotServerClient, SlotServerError
from controlplane.runtime.cache import NAMESPACE_INDEX
from controlplane.runtime.client import KubeClient
from controlplane.runtime.endpoints import member_urls
from controlplane.runtime.errors import KubeError, NotFound
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import DEPLOYMENTS, POD_DISRUPTION_BUDGETS, PODS, SERVICES

log = logging.getLogger(__name__)

#: How often a pool waiting on its slot server reads ``/models`` again (``--slot-server-poll``).
DEFAULT_POLL_SECONDS: Final = 0.05
#: How long a reconcile that sent an order watches for its effect before it polls instead
#: (``--slot-server-wait``): a child's exit takes tens of ms, a tiny model's load hundreds.
DEFAULT_WAIT_SECONDS: Final = 0.5
#: The requeue once an order shows done: the next step follows at once (a delay of 0 would be no
#: requeue at all, and ``requeue`` a rate-limited one).
AT_ONCE_SECONDS: Final = 0.001
#: How often ``/models`` is read while a reconcile watches an order take effect.
SETTLE_POLL_SECONDS: Final = 0.01
#: How soon a slot server that could not be read is read again, when no watch event comes first.
UNREADABLE_REQUEUE_SECONDS: Final = 1.0
#: A model whose child exited on its own is loaded again at most this often.
FAILED_LOAD_RETRY_SECONDS: Final = 10.0
#: How soon a switch waiting for the old way's pods to be gone looks again: a slot server's pods
#: are not watched (only its EndpointSlice and Deployment are), so this is the backstop.
SWITCH_RECHECK_SECONDS: Final = 0.5


@dataclass(frozen=True, slots=True)
class SlotObservation:
    """One reconcile's view of a pool with a slot server."""

    members: dict[str, MemberState]
    view: SlotView
    #: member → the model name the server knows it by.
    models_of: dict[str, str]
    #: The server's pod template must change, and will once nothing is loaded.
    outdated: bool


class SlotRuntime:
    """Applies the slot server's objects, reads it, and carries out the pool's decisions."""

    def __init__(
        self,
        client: KubeClient,
        *,
        deployments: Informer,
        services: Informer,
        endpoint_slices: Informer,
        pods: Informer | None = None,
        nodes: Informer | None = None,
        budgets: Informer | None = None,
        server: SlotServerClient | None = None,
        probe: IdleProbe | None = None,
        placement: WeightsPlacement | None = None,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> None:
        self.client = client
        self.deployments = deployments
        self.services = services
        self.endpoint_slices = endpoint_slices
        #: The servers' pods (by :data:`SLOT_SERVER_LABEL`) and the nodes they run on: a pod on
        #: a node being emptied moves through the fenced drain. None: nodes are not watched.
        self.pods = pods
        self.nodes = nodes
        #: The servers' PodDisruptionBudgets (applied only when the cached one differs).
        self.budgets = budgets
        self.server = server or SlotServerClient()
        #: Asks ``/slots?model=`` before a model that no member serves is unloaded.
        self.probe: IdleProbe = probe or SlotsProbe()
        self.placement = placement or WeightsPlacement()
        self.poll_seconds = poll_seconds
        #: How long a reconcile watches an order it sent take effect (``--slot-server-wait``).
        self.wait_seconds = wait_seconds
        #: (pool key, model) → when a load of it was last sent while it had failed before.
        self._failed_loads: dict[tuple[str, str], float] = {}

    async def observe(
        self,
        pool: ModelPool,
        members: Mapping[str, MemberState],
        isvcs: Mapping[str, Mapping[str, Any]],
        *,
        apply: bool = True,
    ) -> SlotObservation:
        """The members as the slot server shows them; its objects applied on the way, unless
        ``apply`` is False (a server being turned off is read as it is, never changed)."""
        namespace, name = str(pool.metadata.namespace), str(pool.metadata.name)
        typed = {m: InferenceService.from_dict(dict(obj)) for m, obj in isvcs.items()}
        why_not = {m: unservable(isvc) for m, isvc in typed.items()}
        models_of = {
            m: str(isvc.spec.model.name)
            for m, isvc in typed.items()
            if isvc.spec.model is not None and isvc.spec.model.name
        }
        nodes = {
            m: str(node)
            for m, obj in isvcs.items()
            if (node := ((obj.get("status") or {}).get("model") or {}).get("node"))
        }
        ready = {m for m, obj in isvcs.items() if weights_ready(obj)}
        served = mounted_members(pool.spec.member_names(), typed, ready, nodes)
        key = f"{namespace}/{slot_server_name(name)}"
        if apply:
            await self._apply_service(pool, key)
            await self._apply_budget(pool, key)
        wanted = desired_slot_deployment(pool, served, self.placement, nodes)
        cached = self.deployments.store.get(key)
        view = await self._read(namespace, name)
        pods = self._server_pods(namespace, name) if apply else []
        leaving = pods_leaving(pods, self.nodes.store.get) if self.nodes is not None else []
        outdated = apply and (restarts_server(cached, wanted) or bool(leaving))
        nothing_loaded = view.models is not None and not any(
            s.running for s in view.models.values()
        )
        replace_now = not outdated or nothing_loaded or not view.url
        if apply and needs_apply(cached, wanted) and replace_now:
            # No model loaded (or no server up): replacing the pod loses nothing.
            await self.client.apply(DEPLOYMENTS, wanted, field_manager=FIELD_MANAGER, force=True)
            log.info("%s: applied the slot server's Deployment", key)
            outdated = False
        elif leaving and replace_now:
            await self._move_off(key, leaving)  # still outdated: this server is going
        states = {
            m: slot_member_state(state, models_of.get(m, ""), view, why_not.get(m))
            for m, state in members.items()
        }
        # A server pod being deleted (moved off a node, or replaced) may still look ready for a
        # moment: nothing is granted to it, the pool waits for the next pod.
        stopping = any(pod["metadata"].get("deletionTimestamp") for pod in pods)
        return SlotObservation(states, view, models_of, outdated or stopping)

    def server_exists(self, pool: ModelPool) -> bool:
        """The pool's slot server Deployment is in the cache (not being deleted)."""
        key = f"{pool.metadata.namespace}/{slot_server_name(str(pool.metadata.name))}"
        found = self.deployments.store.get(key)
        return found is not None and not found["metadata"].get("deletionTimestamp")

    async def switch_runtime(
        self,
        pool: ModelPool,
        switch: RuntimeSwitch,
        holding: Sequence[str],
        members: Sequence[str],
        seen: SlotObservation | None,
    ) -> tuple[str, float | None]:
        """The runtime to write (``status.runtime``) and how soon to look again: the wanted one
        once nothing runs the old way (:mod:`.slotswitch`), confirmed on a live LIST; a server
        turned off with nothing loaded is deleted first."""
        models = seen.view.models if seen is not None else None
        step = switch_step(
            switch,
            holding,
            server_exists=self.server_exists(pool),
            server_models=None if models is None else {m: s.running for m, s in models.items()},
        )
        if step is SwitchStep.SERVE:
            return switch.current, None
        if step is SwitchStep.DRAIN:
            return switch.current, None  # the drain's own events and requeues drive it
        namespace, name = str(pool.metadata.namespace), str(pool.metadata.name)
        if step is SwitchStep.RETIRE_SERVER:
            for resource in (DEPLOYMENTS, SERVICES, POD_DISRUPTION_BUDGETS):
                with contextlib.suppress(NotFound):
                    await self.client.delete(resource, slot_server_name(name), namespace)
            log.info("%s/%s: slot server turned off, nothing loaded: deleted", namespace, name)
            return switch.current, SWITCH_RECHECK_SECONDS
        if switch.slot_server:  # turning it off: its pods must be gone
            selector = f"{SLOT_SERVER_LABEL}={name}"
        elif members:  # turning it on: every member pod must be gone
            selector = f"{ISVC_LABEL} in ({','.join(sorted(members))})"
        else:
            return switch.wanted, None
        try:
            left = (await self.client.list(PODS, namespace, label_selector=selector)).items
        except KubeError as err:
            log.info("%s/%s: pods not listed before the switch (%s)", namespace, name, err)
            return switch.current, SWITCH_RECHECK_SECONDS
        if left:
            names = ", ".join(sorted(p["metadata"]["name"] for p in left))
            log.info("%s/%s: switch to %s waits for pods: %s", namespace, name, switch.wanted,
                     names)  # fmt: skip
            return switch.current, SWITCH_RECHECK_SECONDS
        log.info("%s/%s: members now run as %s", namespace, name, switch.wanted)
        return switch.wanted, None

    def _server_pods(self, namespace: str, pool: str) -> list[Mapping[str, Any]]:
        """The server's pods as cached (none when they are not watched)."""
        if self.pods is None:
            return []
        return [
            pod
            for pod in self.pods.store.by_index(NAMESPACE_INDEX, namespace)
            if (pod["metadata"].get("labels") or {}).get(SLOT_SERVER_LABEL) == pool
        ]

    async def _move_off(self, key: str, leaving: Sequence[Mapping[str, Any]]) -> None:
        """Delete the server's pods on a node being emptied, once nothing is loaded in them: the
        Deployment makes the next one where it may run, and the drain's next eviction finds the
        old one gone (an eviction would be refused: the budget allows none)."""
        for pod in leaving:
            meta = pod["metadata"]
            with contextlib.suppress(NotFound):
                await self.client.delete(PODS, meta["name"], meta.get("namespace") or "")
            log.info("%s: nothing loaded: deleted pod %s, which leaves node %s", key,
                     meta["name"], leaving_node([pod]))  # fmt: skip

    async def _apply_budget(self, pool: ModelPool, key: str) -> None:
        if self.budgets is None:
            return
        wanted = desired_slot_disruption_budget(pool)
        if needs_apply(self.budgets.store.get(key), wanted):
            await self.client.apply(
                POD_DISRUPTION_BUDGETS, wanted, field_manager=FIELD_MANAGER, force=True
            )
            log.info("%s: applied the slot server's PodDisruptionBudget", key)

    async def _apply_service(self, pool: ModelPool, key: str) -> None:
        wanted = desired_slot_service(pool)
        if needs_apply(self.services.store.get(key), wanted):
            await self.client.apply(SERVICES, wanted, field_manager=FIELD_MANAGER, force=True)
            log.info("%s: applied the slot server's Service", key)

    async def _read(self, namespace: str, pool: str) -> SlotView:
        urls = member_urls(self.endpoint_slices.store, namespace, slot_server_name(pool))
        if not urls:
            return SlotView(None, error="the slot server has no ready endpoint")
        try:
            return SlotView(urls[0], await self.server.models(urls[0]))
        except SlotServerError as err:
            return SlotView(urls[0], error=f"the slot server at {urls[0]}: {err}")

    async def carry_out(
        self, key: str, slots: Mapping[str, str | None], seen: SlotObservation
    ) -> float | None:
        """Send the orders of the written ``slots``; how soon to read the server again (None:
        nothing to wait for)."""
        view = seen.view
        orders = slot_orders(slots, seen.models_of, view)
        if view.url is None or view.models is None:
            # Not up, or not answering: its EndpointSlice's change wakes us, this is the backstop.
            return UNREADABLE_REQUEUE_SECONDS
        for model in orders.unload:
            order = await self.server.unload(view.url, model)
            log.info("%s: unload %s: %s", key, model, order.detail)
        strays = stray_models(seen.models_of, view)
        for model in strays:
            await self._unload_when_idle(key, view.url, model)
        if orders.load is not None:
            await self._load(key, view, orders.load)
        if orders.unload or orders.load:
            # The next step (the grant after an unload, the resident after a load) waits on this
            # order's effect: watch for it closely a little while, then fall back to polling.
            if await self._settled(view.url, orders):
                return AT_ONCE_SECONDS
            return self.poll_seconds
        if busy_with_orders(slots, seen.models_of, view):
            return self.poll_seconds
        if strays:
            return UNREADABLE_REQUEUE_SECONDS  # re-probed as a deferred drain is
        return None

    async def _settled(self, url: str, orders: SlotOrders) -> bool:
        """Whether ``/models`` shows ``orders`` done (the unloaded not running, the loaded loaded
        or failed) within :attr:`wait_seconds`, read every :data:`SETTLE_POLL_SECONDS`."""
        deadline = time.monotonic() + self.wait_seconds
        while time.monotonic() < deadline:
            await anyio.sleep(SETTLE_POLL_SECONDS)
            try:
                models = await self.server.models(url)
            except SlotServerError:
                return False
            if orders_done(orders, models):
                return True
        return False

    async def _unload_when_idle(self, key: str, url: str, model: str) -> None:
        """A model no member serves: unloaded only once ``/slots?model=`` says idle."""
        report = await self.probe.probe(url, model=model)
        if report.outcome is not IdleOutcome.IDLE:
            log.info("%s: %s runs for no member; not unloaded yet: %s", key, model, report.detail)
            return
        order = await self.server.unload(url, model)
        log.info("%s: %s runs for no member: unload: %s", key, model, order.detail)

    async def _load(self, key: str, view: SlotView, model: str) -> None:
        assert view.url is not None
        assert view.models is not None
        state = view.models[model]
        if state.failed:
            last = self._failed_loads.get((key, model))
            if last is not None and time.monotonic() - last < FAILED_LOAD_RETRY_SECONDS:
                return
            self._failed_loads[(key, model)] = time.monotonic()
        order = await self.server.load(view.url, model)
        log.info("%s: load %s: %s", key, model, order.detail)
