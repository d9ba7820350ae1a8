"""A pool's slot server: its objects, its members as /models shows them, and its orders.

Tables over the pure parts (controllers/modelpool/slotserver.py, slotmembers.py and the reading of
``/models`` in probes/slotserver.py), and the plan fed with what they make: a busy model is probed
before it is released, an unreadable server releases and grants nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from controlplane.api.v1alpha1 import InferenceService, ModelPool
from controlplane.api.v1alpha1.modelpool import SLOT_GRANTED, SLOT_RELEASED
from controlplane.controllers.inferenceservice.status import (
    REASON_SCALED_TO_ZERO,
    PhaseDecision,
    served_phase,
)
from controlplane.controllers.modelpool.grant import slot_server_pool
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.plan import plan_actions
from controlplane.controllers.modelpool.slotmembers import (
    UNREADABLE,
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
    mounted_members,
    restarts_server,
    server_args,
    slot_server_name,
    unservable,
)
from controlplane.controllers.modelpool.watches import slot_pods_on_node
from controlplane.probes.slotserver import ModelState, ModelStatus, SlotServerError, read_models
from controlplane.runtime.cache import Store
from controlplane.runtime.controller import Request

URL = "http://10.0.0.5:8080"


def pool(**slot_server: Any) -> ModelPool:
    return ModelPool.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "ModelPool",
            "metadata": {"name": "gpu-0", "namespace": "team", "uid": "u-1"},
            "spec": {
                "members": [{"inferenceServiceRef": {"name": n}} for n in ("a", "b")],
                "slotServer": slot_server,
            },
        }
    )


def isvc(name: str, source: str, model: str | None = None) -> InferenceService:
    return InferenceService.from_dict(
        {
            "apiVersion": "inference.modelpool.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"model": {"name": model or f"model-{name}", "source": source}},
        }
    )


# -- the server's objects ------------------------------------------------------------------------


def test_the_server_runs_router_mode_with_the_pools_decisions_and_the_users_args() -> None:
    args = server_args(pool(args=["--ctx-size", "4096"], port=9000))
    assert args[:5] == ["--models-dir", "/var/lib/modelpool/slot-models", "--models-max", "1",
                        "--no-models-autoload"]  # fmt: skip
    assert args[-4:] == ["--port", "9000", "--ctx-size", "4096"]


@pytest.mark.parametrize(
    ("source", "volume", "sub_path"),
    [
        ("file:///models/a.gguf", {"hostPath": {"path": "/models/a.gguf", "type": "File"}}, None),
        (
            "pvc://weights/x/a.gguf",
            {"persistentVolumeClaim": {"claimName": "weights", "readOnly": True}},
            "x/a.gguf",
        ),
    ],
)
def test_each_members_weights_are_its_model_name_in_the_models_folder(
    source: str, volume: dict[str, Any], sub_path: str | None
) -> None:
    wanted = desired_slot_deployment(pool(), [isvc("a", source)])
    spec = wanted["spec"]["template"]["spec"]
    (mount,) = spec["containers"][0]["volumeMounts"]
    assert mount["mountPath"] == "/var/lib/modelpool/slot-models/model-a.gguf"
    assert mount["readOnly"] is True
    assert mount.get("subPath") == sub_path
    assert spec["volumes"] == [{"name": "model-0", **volume}]
    assert wanted["spec"]["replicas"] == 1
    assert wanted["spec"]["strategy"] == {"type": "Recreate"}
    assert wanted["metadata"]["ownerReferences"][0]["kind"] == "ModelPool"
    assert wanted["spec"]["template"]["metadata"]["labels"][SLOT_SERVER_LABEL] == "gpu-0"


def test_fetched_weights_are_read_from_the_node_cache_and_pin_the_pod() -> None:
    member = isvc("a", "hf://org/repo/a.gguf")
    wanted = desired_slot_deployment(pool(), [member], nodes={"a": "node-7"})
    spec = wanted["spec"]["template"]["spec"]
    (volume,) = spec["volumes"]
    assert volume["hostPath"]["type"] == "Directory"
    assert volume["hostPath"]["path"].startswith("/var/lib/modelpool/models/")
    assert "node-7" in msgspec.json.encode(spec["affinity"]).decode()


@pytest.mark.parametrize(
    ("member", "refused"),
    [
        (isvc("a", "file:///m/a.gguf"), None),
        (isvc("a", "/models/a.gguf"), "inside its own image"),
        (isvc("a", "file:///m/a.gguf", model="org/model"), "cannot name a file"),
        (isvc("a", "file:///m/a.gguf", model="..x"), "cannot name a file"),
        (isvc("a", "file:///m/a.gguf", model="a.gguf"), "cannot name a file"),
    ],
)
def test_a_member_the_server_cannot_serve_is_named_with_why(
    member: InferenceService, refused: str | None
) -> None:
    why = unservable(member)
    assert (why is None) == (refused is None)
    if refused is not None:
        assert why is not None
        assert refused in why
        assert "a's" in why


def test_the_server_mounts_what_it_can_serve_once_ready_and_on_one_node() -> None:
    members = {
        "a": isvc("a", "hf://org/repo/a.gguf"),
        "b": isvc("b", "file:///m/b.gguf"),
        "c": isvc("c", "hf://org/repo/c.gguf"),
        "d": isvc("d", "/in/its/image.gguf"),
        "e": isvc("e", "hf://org/repo/e.gguf"),
    }
    names = ["a", "b", "c", "d", "e"]
    nodes = {"a": "node-1", "c": "node-2", "e": "node-1"}
    mounted = mounted_members(names, members, {"a", "b", "c", "d", "e"}, nodes)
    # c's file is on another node than a's, d's inside its own image
    assert [m.name for m in mounted] == ["a", "b", "e"]
    assert [m.name for m in mounted_members(names, members, {"b", "c"}, nodes)] == ["b", "c"]


def test_only_a_template_change_replaces_the_server() -> None:
    wanted = desired_slot_deployment(pool(), [isvc("a", "file:///m/a.gguf")])
    assert not restarts_server(None, wanted)
    assert not restarts_server(wanted, wanted)
    more = desired_slot_deployment(
        pool(), [isvc("a", "file:///m/a.gguf"), isvc("b", "file:///m/b.gguf")]
    )
    assert restarts_server(wanted, more)
    relabelled = {**wanted, "metadata": {**wanted["metadata"], "labels": {}}}
    assert not restarts_server(relabelled, wanted)


def test_the_servers_budget_selects_its_pod_and_refuses_every_eviction_of_a_ready_one() -> None:
    budget = desired_slot_disruption_budget(pool())
    labels = desired_slot_deployment(pool(), [])["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["maxUnavailable"] == 0
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    meta = budget["metadata"]
    assert (meta["name"], meta["namespace"]) == (slot_server_name("gpu-0"), "team")
    assert meta["ownerReferences"][0]["uid"] == "u-1"
    assert meta["labels"][SLOT_SERVER_LABEL] == "gpu-0"  # the pool's watch maps it back


def test_a_node_being_emptied_maps_to_the_pools_whose_server_runs_there() -> None:
    store = Store()

    def server_pod(name: str, namespace: str, pool_name: str, node: str) -> None:
        labels = {SLOT_SERVER_LABEL: pool_name}
        meta = {"name": name, "namespace": namespace, "labels": labels}
        store.upsert({"metadata": meta, "spec": {"nodeName": node}})

    server_pod("p1", "team", "gpu-0", "node-1")
    server_pod("p2", "other", "gpu-0", "node-1")
    server_pod("p3", "team", "gpu-1", "node-2")
    mapper = slot_pods_on_node(store)

    def node(name: str, *, cordoned: bool = True) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"unschedulable": cordoned}}

    assert list(mapper(node("node-1"))) == [Request("other", "gpu-0"), Request("team", "gpu-0")]
    assert list(mapper(node("node-3"))) == []
    # A node that is not being emptied (its status, or uncordoned) concerns no pool.
    assert list(mapper(node("node-1", cordoned=False))) == []


def test_the_servers_name_stays_a_dns_label() -> None:
    assert slot_server_name("gpu-0") == "gpu-0-slot"
    long = slot_server_name("p" * 63)
    assert len(long) <= 63
    assert long.endswith("-slot")
    assert long != slot_server_name("p" * 62 + "q")


# -- reading /models ------------------------------------------------------------------------------


def models_body(**statuses: str) -> bytes:
    data = [{"id": name, "status": {"value": value}} for name, value in statuses.items()]
    return msgspec.json.encode({"data": data, "object": "list"})


def test_models_are_read_by_id_and_status() -> None:
    read = read_models(200, models_body(a="loaded", b="unloaded"))
    assert read == {"a": ModelState(ModelStatus.LOADED), "b": ModelState(ModelStatus.UNLOADED)}
    assert read["a"].running
    assert not read["b"].running
    failed = {
        "data": [{"id": "a", "status": {"value": "unloaded", "failed": True, "exit_code": 1}}]
    }
    assert read_models(200, msgspec.json.encode(failed))["a"] == ModelState(
        ModelStatus.UNLOADED, failed=True, exit_code=1
    )


@pytest.mark.parametrize(
    ("status", "body", "why"),
    [
        (500, b"{}", "answered 500"),
        (200, b"not json", "not JSON"),
        (200, b'{"object": "list"}', "without a data array"),
        (200, b'{"data": [{"status": {"value": "loaded"}}]}', "has no id"),
        (200, b'{"data": [{"id": "a", "status": {"value": "warm"}}]}', "'warm'"),
    ],
)
def test_an_answer_that_proves_nothing_is_an_error_never_an_empty_list(
    status: int, body: bytes, why: str
) -> None:
    with pytest.raises(SlotServerError, match=why):
        read_models(status, body)


# -- members as the server shows them -----------------------------------------------------------


def view(**statuses: str) -> SlotView:
    return SlotView(URL, {name: ModelState(ModelStatus(v)) for name, v in statuses.items()})


def member(name: str, slot: str | None = None) -> MemberState:
    return MemberState(name, slot=slot, phase="Stopped")


@pytest.mark.parametrize(
    ("status", "phase", "urls", "starting", "pods"),
    [
        ("loaded", "Ready", (URL,), (), 1),
        ("sleeping", "Ready", (URL,), (), 1),
        ("loading", "Starting", (), (URL,), 1),
        ("unloaded", "Stopped", (), (), 0),
    ],
)
def test_a_models_state_is_the_members(
    status: str, phase: str, urls: tuple[str, ...], starting: tuple[str, ...], pods: int
) -> None:
    state = slot_member_state(member("a"), "model-a", view(**{"model-a": status}), None)
    assert (state.phase, state.urls, state.starting_urls, state.pods) == (
        phase,
        urls,
        starting,
        pods,
    )
    assert state.weights_ready


def test_a_model_the_server_does_not_list_or_cannot_serve_waits_as_weights_do() -> None:
    missing = slot_member_state(member("a"), "model-a", view(), None)
    assert not missing.weights_ready
    assert missing.weights is not None
    assert "not in the slot server's models" in missing.weights
    refused = slot_member_state(member("a"), "model-a", view(), "no: a path in its image")
    assert (refused.weights_ready, refused.weights) == (False, "no: a path in its image")


def test_an_unreadable_server_holds_every_member_and_proves_none_idle() -> None:
    dark = SlotView(URL, error="/models answered 500")
    members = {
        "a": slot_member_state(member("a"), "model-a", dark, None),
        "b": slot_member_state(member("b", SLOT_RELEASED), "model-b", dark, None),
    }
    assert members["a"].urls == (UNREADABLE + "/models answered 500",)
    plan = plan_actions(members, "b")
    assert plan.release == ()
    assert plan.grant is None
    assert plan.probe == ("a",)  # probed: and an unreadable probe is never idle


def test_a_loaded_model_is_probed_before_it_is_released_and_the_owner_waits_for_its_unload() -> (
    None
):
    seen = view(**{"model-a": "loaded", "model-b": "unloaded"})
    members = {
        "a": slot_member_state(member("a", SLOT_GRANTED), "model-a", seen, None),
        "b": slot_member_state(member("b"), "model-b", seen, None),
    }
    plan = plan_actions(members, "b")
    assert (plan.probe, plan.release, plan.grant) == (("a",), (), None)
    released = {
        **members,
        "a": slot_member_state(member("a", SLOT_RELEASED), "model-a", seen, None),
    }
    assert plan_actions(released, "b").grant is None, "granted while a's model still runs"
    gone = view(**{"model-a": "unloaded", "model-b": "unloaded"})
    after = {
        "a": slot_member_state(member("a", SLOT_RELEASED), "model-a", gone, None),
        "b": slot_member_state(member("b"), "model-b", gone, None),
    }
    assert plan_actions(after, "b").grant == "b"


# -- the orders ------------------------------------------------------------------------------


MODELS_OF = {"a": "model-a", "b": "model-b"}


@pytest.mark.parametrize(
    ("slots", "statuses", "unload", "load"),
    [
        # released and still running: unloaded; the grant waits for it
        ({"a": SLOT_RELEASED, "b": SLOT_GRANTED}, ("loaded", "unloaded"), ("model-a",), None),
        # nothing else runs: the granted model is loaded
        ({"a": SLOT_RELEASED, "b": SLOT_GRANTED}, ("unloaded", "unloaded"), (), "model-b"),
        # already loading or loaded: no second order
        ({"a": SLOT_RELEASED, "b": SLOT_GRANTED}, ("unloaded", "loading"), (), None),
        ({"a": None, "b": SLOT_GRANTED}, ("unloaded", "loaded"), (), None),
        # a model running without a decision (not released) keeps the grant from loading
        ({"a": None, "b": SLOT_GRANTED}, ("loaded", "unloaded"), (), None),
    ],
)
def test_orders_unload_the_released_then_load_the_granted_alone(
    slots: dict[str, str | None],
    statuses: tuple[str, str],
    unload: tuple[str, ...],
    load: str | None,
) -> None:
    seen = view(**dict(zip(("model-a", "model-b"), statuses, strict=True)))
    orders = slot_orders(slots, MODELS_OF, seen)
    assert (orders.unload, orders.load) == (unload, load)


def test_no_order_to_a_server_that_could_not_be_read_and_it_is_read_again() -> None:
    dark = SlotView(URL, error="timeout")
    slots = {"a": SLOT_RELEASED, "b": SLOT_GRANTED}
    assert slot_orders(slots, MODELS_OF, dark) == slot_orders({}, {}, dark)
    assert slot_orders(slots, MODELS_OF, dark).load is None
    assert busy_with_orders(slots, MODELS_OF, dark)
    settled = view(**{"model-a": "unloaded", "model-b": "loaded"})
    assert not busy_with_orders(slots, MODELS_OF, settled)


def test_an_order_is_done_once_models_shows_it() -> None:
    unload = SlotOrders(unload=("model-a",))
    assert not orders_done(unload, view(**{"model-a": "loaded"}).models or {})
    assert orders_done(unload, view(**{"model-a": "unloaded"}).models or {})
    load = SlotOrders(load="model-b")
    assert not orders_done(load, view(**{"model-b": "loading"}).models or {})
    assert orders_done(load, view(**{"model-b": "loaded"}).models or {})
    exited = {"model-b": ModelState(ModelStatus.UNLOADED, failed=True)}
    assert orders_done(load, exited), "a child that exited is the pool's to see, not to wait for"


def test_a_model_running_for_no_member_is_a_stray() -> None:
    seen = view(**{"model-a": "loaded", "model-old": "loaded", "model-b": "unloaded"})
    assert stray_models(MODELS_OF, seen) == ("model-old",)
    assert stray_models(MODELS_OF, SlotView(URL, error="timeout")) == ()


# -- the InferenceService side --------------------------------------------------------------------


def pool_object(phase: str | None, slot_server: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"members": [{"inferenceServiceRef": {"name": "a"}}]}
    if slot_server:
        spec["slotServer"] = {}
    return {
        "metadata": {"name": "gpu-0"},
        "spec": spec,
        "status": {"members": [{"name": "a", "phase": phase}]},
    }


def test_only_a_pool_with_a_slot_server_serves_its_members() -> None:
    assert slot_server_pool([pool_object(None, slot_server=False)], "a") is None
    assert slot_server_pool([pool_object(None)], "a") is not None
    assert slot_server_pool([pool_object(None)], "b") is None


@pytest.mark.parametrize(
    ("phase", "wanted"),
    [("Ready", "Ready"), ("Starting", "Starting"), ("Failed", "Failed"), ("Stopped", "Stopped")],
)
def test_a_served_members_phase_is_its_models_in_the_server(phase: str, wanted: str) -> None:
    stopped = PhaseDecision("Stopped", REASON_SCALED_TO_ZERO, "scaled to zero")
    assert served_phase(stopped, pool_object(phase), "a").phase == wanted


def test_a_member_with_pods_of_its_own_drains_them_first() -> None:
    draining = PhaseDecision("Draining", "Stopping", "1 pod(s) still terminating")
    assert served_phase(draining, pool_object("Ready"), "a") == draining
