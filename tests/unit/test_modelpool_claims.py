"""One member, one pool: which pool's claim on a shared member stands."""

from __future__ import annotations

from typing import Any

from controlplane.controllers.modelpool.claims import claimed_elsewhere, standing_pools
from controlplane.controllers.modelpool.grant import member_slots, slot_server_pool
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.plan import Plan, members_valid, plan_actions


def pool(
    name: str,
    members: tuple[str, ...],
    created: str = "2026-01-01T00:00:00Z",
    decided: tuple[str, ...] = (),
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"members": [{"inferenceServiceRef": {"name": m}} for m in members]},
        "status": {"members": [{"name": m, "slot": "Granted"} for m in decided]},
    }


def test_a_member_no_other_pool_lists_is_this_pools() -> None:
    one = pool("one", ("a", "b"))
    assert claimed_elsewhere(one, ("a", "b"), [one, pool("two", ("c",))]) == {}


def test_the_pool_created_first_holds_the_claim_and_the_later_one_is_refused() -> None:
    first = pool("zeta", ("a", "b"), created="2026-01-01T00:00:00Z")
    later = pool("alpha", ("a", "c"), created="2026-01-01T00:00:05Z")
    both = [first, later]
    assert claimed_elsewhere(later, ("a", "c"), both) == {"a": "zeta"}
    assert claimed_elsewhere(first, ("a", "b"), both) == {}


def test_a_pool_that_already_decided_about_the_member_keeps_it_whatever_its_age() -> None:
    """Adding a member another pool runs to an older pool never takes it from that pool."""
    older = pool("older", ("a",), created="2026-01-01T00:00:00Z")
    running = pool("running", ("a",), created="2026-01-01T00:00:09Z", decided=("a",))
    assert claimed_elsewhere(older, ("a",), [older, running]) == {"a": "running"}
    assert claimed_elsewhere(running, ("a",), [older, running]) == {}


def test_two_pools_created_in_the_same_second_are_ordered_by_name() -> None:
    one, two = pool("one", ("a",)), pool("two", ("a",))
    assert claimed_elsewhere(two, ("a",), [one, two]) == {"a": "one"}
    assert claimed_elsewhere(one, ("a",), [one, two]) == {}


def test_a_pool_being_deleted_claims_nothing() -> None:
    going = pool("going", ("a",), decided=("a",), deleting=True)
    staying = pool("staying", ("a",), created="2026-01-01T00:00:09Z")
    assert claimed_elsewhere(staying, ("a",), [going, staying]) == {}


def test_a_refused_pool_changes_no_slot_and_names_the_pool_that_holds_the_member() -> None:
    members = {
        "a": MemberState(
            "a", slot="Granted", phase="Ready", urls=("http://a:1",), pods=1, claimed_by="first"
        ),
        "c": MemberState("c", phase="Stopped"),
    }
    plan = plan_actions(members, "c")
    assert plan == Plan(claimed=(("a", "first"),))
    assert plan.invalid
    status, reason, message = members_valid(plan)
    assert (status, reason) == ("False", "MemberInAnotherPool")
    assert "a (held by pool first)" in message


def test_the_members_controller_reads_only_the_pool_whose_claim_stands() -> None:
    """A refused pool (here one with a slot server and a grant it should never have written)
    decides nothing about the member: neither its replicas nor whether a slot server serves it
    (issue 46: a refused ``slotServer`` pool stopped the other pool's resident)."""
    first = pool("first", ("a", "b"), decided=("a",))
    refused = pool("a-slot", ("a", "c"), created="2026-01-01T00:00:05Z")
    refused["spec"]["slotServer"] = {}
    unrelated = pool("other", ("d",))
    pools = [first, refused, unrelated]
    assert standing_pools(pools, "a") == [first, unrelated]
    assert slot_server_pool(standing_pools(pools, "a"), "a") is None
    assert member_slots(standing_pools(pools, "a"), "a") == {"first": "Granted"}
    # c is the refused pool's own: its claim there stands.
    assert standing_pools(pools, "c") == pools
    assert slot_server_pool(standing_pools(pools, "c"), "c") is refused
    # Once the first pool is being deleted, the claim passes and the slot server pool counts.
    first["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    assert slot_server_pool(standing_pools(pools, "a"), "a") is refused
