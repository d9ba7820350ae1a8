"""Who owns a pool's slot: the intent on the pool's Lease, judged on our clock, then stickiness."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.api.v1alpha1.activation import (
    POOL_LABEL,
    TARGET_ANNOTATION,
    pool_for_lease,
    pool_lease_name,
)
from controlplane.controllers.modelpool import map_lease
from controlplane.controllers.modelpool.intent import (
    Intent,
    LeaseObserver,
    OwnerReason,
    choose_owner,
)
from controlplane.runtime.informer import DeletedFinalStateUnknown

MEMBERS = ["a", "b", "c"]


def lease(
    holder: str | None = "router-0",
    target: str | None = "b",
    duration: Any = 15,
    renew: str = "2026-01-01T00:00:00.000000Z",
    name: str = "modelpool-pool-gpu",
    pool: str | None = "gpu",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if pool is not None:
        meta["labels"] = {POOL_LABEL: pool}
    if target is not None:
        meta["annotations"] = {TARGET_ANNOTATION: target}
    spec: dict[str, Any] = {"renewTime": renew}
    if holder is not None:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"metadata": meta, "spec": spec}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pool_lease_is_known_by_its_label_and_its_name_together() -> None:
    assert pool_lease_name("gpu-0") == "modelpool-pool-gpu-0"
    assert pool_for_lease(lease(name="modelpool-pool-gpu-0", pool="gpu-0")) == "gpu-0"
    assert pool_for_lease(lease(name="modelpool-pool-gpu-0", pool=None)) is None  # no label
    assert pool_for_lease(lease(name="something-else", pool="gpu-0")) is None  # a copied label
    assert pool_for_lease(lease(name="modelpool-pool-x", pool="gpu-0")) is None


def test_the_operators_leader_lease_is_never_a_pool_intent_whatever_pools_are_called() -> None:
    """A pool named ``operator`` used to own ``modelpool-operator``, the operator's leader Lease,
    and was reconciled at every leader renewal, forever."""
    leader = lease(name="modelpool-operator", pool=None, target=None)
    assert pool_for_lease(leader) is None
    assert list(map_lease(leader)) == []
    assert pool_lease_name("operator") != "modelpool-operator"
    observer = LeaseObserver(FakeClock())
    observer.on_add(leader, True)
    assert observer.intent(leader) is None


@pytest.mark.parametrize(
    ("record", "now", "expected"),
    [
        (lease(), 100.0, Intent("router-0", "b", 15.0)),
        (lease(), 115.0, Intent("router-0", "b", 0.0)),  # exactly its duration: still valid
        (lease(), 115.5, None),  # unchanged for longer than its duration: expired
        (lease(holder=None), 100.0, None),  # released
        (lease(holder=""), 100.0, None),  # released (empty holder)
        (lease(target=None), 100.0, None),  # held, but asks for nothing
        (lease(target=""), 100.0, None),
        (lease(duration=None), 100.0, None),  # expiry cannot be judged
        (lease(duration=0), 100.0, None),
        (lease(duration="15"), 100.0, None),
        (lease(pool=None), 100.0, None),  # not a pool's Lease
        (None, 100.0, None),  # no Lease at all
    ],
)
def test_intent(record: dict[str, Any] | None, now: float, expected: Intent | None) -> None:
    clock = FakeClock()
    clock.now = 100.0
    observer = LeaseObserver(clock)
    if record is not None:
        observer.on_add(record, True)
    clock.now = now
    assert observer.intent(record) == expected


def test_expiry_is_judged_from_when_we_saw_the_record_change_not_from_renew_time() -> None:
    clock = FakeClock()
    observer = LeaseObserver(clock)
    # renewTime from a clock an hour behind ours: irrelevant, only our observation counts.
    first = lease(renew="2020-01-01T00:00:00.000000Z")
    observer.on_add(first, True)
    clock.now += 10
    assert observer.intent(first) == Intent("router-0", "b", 5.0)
    clock.now += 6  # 16 s unchanged > 15 s duration
    assert observer.intent(first) is None
    renewed = lease(renew="2020-01-01T00:00:05.000000Z")  # the holder renewed: the record changed
    observer.on_update(first, renewed)
    assert observer.intent(renewed) == Intent("router-0", "b", 15.0)


def test_a_changed_target_is_a_change_of_the_record() -> None:
    clock = FakeClock()
    observer = LeaseObserver(clock)
    observer.on_add(lease(target="b"), True)
    clock.now += 14
    observer.on_update(lease(target="b"), lease(target="c"))
    clock.now += 10
    assert observer.intent(lease(target="c")) == Intent("router-0", "c", 5.0)


def test_a_lease_first_seen_by_a_reconcile_counts_from_then_and_deletion_forgets_it() -> None:
    clock = FakeClock()
    observer = LeaseObserver(clock)
    held = lease()
    assert observer.intent(held) == Intent("router-0", "b", 15.0)
    clock.now += 14
    observer.on_delete(DeletedFinalStateUnknown("ns/modelpool-pool-gpu", held))
    assert observer.intent(held) == Intent("router-0", "b", 15.0), "seen anew after deletion"


def test_other_leases_are_not_tracked() -> None:
    clock = FakeClock()
    observer = LeaseObserver(clock)
    other = lease(name="kube-controller-manager", pool=None)
    observer.on_add(other, True)
    clock.now += 100  # had it been observed at the start, its intent would have expired
    assert observer.intent(lease(name="kube-controller-manager")) is None


VALID = Intent("router-0", "b", 10.0)


@pytest.mark.parametrize(
    ("default", "resident", "intent", "owner", "reason"),
    [
        # a valid intent for a member wins over the resident and the default
        ("a", "a", VALID, "b", OwnerReason.REQUESTED),
        (None, None, VALID, "b", OwnerReason.REQUESTED),
        # no (or an expired, or a released: read_intent gives None) intent: the resident stays
        ("a", "c", None, "c", OwnerReason.RESIDENT),
        # an intent for something that is not a member is ignored
        ("a", "c", Intent("router-0", "zz", 10.0), "c", OwnerReason.RESIDENT),
        # cold: the default is warmed
        ("a", None, None, "a", OwnerReason.DEFAULT),
        # a resident that is no longer a member is no resident
        ("a", "gone", None, "a", OwnerReason.DEFAULT),
        # cold without a default: nobody
        (None, None, None, None, OwnerReason.COLD),
        (None, None, Intent("router-0", "zz", 10.0), None, OwnerReason.COLD),
    ],
)
def test_choose_owner(
    default: str | None,
    resident: str | None,
    intent: Intent | None,
    owner: str | None,
    reason: OwnerReason,
) -> None:
    chosen = choose_owner(MEMBERS, default, resident, intent)
    assert (chosen.name, chosen.reason) == (owner, reason)
    if intent is not None and intent.target not in MEMBERS:
        assert chosen.ignored is not None
        assert "zz" in chosen.ignored
    else:
        assert chosen.ignored is None


def test_a_withdrawn_intent_falls_back_and_never_keeps_the_abandoned_target() -> None:
    clock = FakeClock()
    observer = LeaseObserver(clock)
    held = lease(target="b")
    observer.on_add(held, True)
    assert choose_owner(MEMBERS, "a", "a", observer.intent(held)).name == "b"
    released = lease(holder=None, target="b")
    observer.on_update(held, released)
    assert choose_owner(MEMBERS, "a", "a", observer.intent(released)).name == "a"
    assert choose_owner(MEMBERS, None, None, observer.intent(released)).name is None

    abandoned = LeaseObserver(clock)  # and one never renewed expires the same way
    abandoned.on_add(held, True)
    clock.now += 16
    assert choose_owner(MEMBERS, "c", "a", abandoned.intent(held)).name == "a"
