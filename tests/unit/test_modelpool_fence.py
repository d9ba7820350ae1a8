"""The fenced drain's rule (controllers/modelpool/fence.py) and its acknowledgement's one parsing
(api/v1alpha1/demand.py), pure: a member is probed only once its closure was published and every
live replica acknowledged that generation with nothing in flight on it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.api.v1alpha1.demand import (
    ADMISSION_ANNOTATION,
    AdmissionAck,
    LiveReport,
    MalformedReport,
    decode_admission,
    demand_lease,
    encode_admission,
    live_reports,
)
from controlplane.controllers.modelpool.fence import judge_fence
from controlplane.runtime.leaserecord import ExpiryObserver


def report(holder: str, ack: AdmissionAck | None) -> LiveReport:
    return LiveReport(holder, 0.0, {}, ack)


def test_a_member_to_probe_is_published_first_with_a_raised_generation() -> None:
    fence = judge_fence(["a"], [], 3, [report("r0", AdmissionAck(3))])
    assert (fence.closed, fence.generation, fence.fenced) == (("a",), 4, ())
    assert "being closed" in fence.waiting["a"]


def test_a_published_member_is_probed_once_every_replica_acknowledges() -> None:
    acks = [report("r0", AdmissionAck(4)), report("r1", AdmissionAck(5, {"b": 2}))]
    fence = judge_fence(["a"], ["a"], 4, acks)
    assert (fence.closed, fence.generation, fence.fenced, fence.waiting) == (("a",), 4, ("a",), {})


@pytest.mark.parametrize(
    ("ack", "why"),
    [
        (None, "router replica r1 acknowledges no admission generation"),
        (AdmissionAck(3), "router replica r1 has applied admission generation 3 of 4"),
        (AdmissionAck(4, {"a": 2}), "router replica r1 has 2 request(s) in flight on a"),
    ],
)
def test_one_replica_that_has_not_closed_holds_the_probe_and_is_named(
    ack: AdmissionAck | None, why: str
) -> None:
    fence = judge_fence(["a"], ["a"], 4, [report("r0", AdmissionAck(4)), report("r1", ack)])
    assert fence.fenced == ()
    assert fence.waiting == {"a": why}


def test_a_released_member_whose_pod_is_not_gone_stays_closed_and_others_reopen() -> None:
    fence = judge_fence([], ["a", "c"], 6, [], holding=["a"])
    assert (fence.closed, fence.generation) == (("a",), 6), "reopening raises nothing"


def test_no_replica_no_wait() -> None:
    assert judge_fence(["a", "b"], ["a", "b"], 1, []).fenced == ("a", "b")


@given(
    probe=st.sets(st.sampled_from("abcd")),
    published=st.sets(st.sampled_from("abcd")),
    generation=st.integers(0, 5),
    acks=st.lists(
        st.one_of(
            st.none(),
            st.builds(
                AdmissionAck,
                st.integers(0, 6),
                st.dictionaries(st.sampled_from("abcd"), st.integers(0, 2)),
            ),
        ),
        max_size=3,
    ),
)
def test_a_probed_member_was_published_and_acknowledged_by_every_live_replica(
    probe: set[str],
    published: set[str],
    generation: int,
    acks: list[AdmissionAck | None],
) -> None:
    reports = [report(f"r{i}", ack) for i, ack in enumerate(acks)]
    fence = judge_fence(sorted(probe), sorted(published), generation, reports)
    assert set(fence.closed) >= probe, "a member to probe is not closed"
    assert fence.generation >= generation
    if probe - published:
        assert fence.generation == generation + 1, "a new closure must raise the generation"
    for member in fence.fenced:
        assert member in published
        for ack in acks:
            assert ack is not None
            assert ack.acknowledges(generation, member)
    assert set(fence.fenced) | set(fence.waiting) == probe


def test_an_acknowledgement_round_trips_and_leaves_idle_members_out() -> None:
    ack = AdmissionAck(7, {"a": 2, "b": 0})
    assert encode_admission(ack) == '{"generation":7,"inFlight":{"a":2}}'
    assert decode_admission(encode_admission(ack)) == AdmissionAck(7, {"a": 2})
    assert decode_admission(None) is None


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("{", "is not JSON"),
        ("[]", "must be an object"),
        ('{"generation": -1}', ".generation must be an integer >= 0"),
        ('{"generation": true}', ".generation must be an integer >= 0"),
        ('{"generation": 1, "inFlight": []}', ".inFlight must be an object of members"),
        ('{"generation": 1, "inFlight": {"a": -1}}', ".inFlight['a'] must be >= 0"),
    ],
)
def test_every_malformed_acknowledgement_is_refused_by_name(text: str, names: str) -> None:
    with pytest.raises(MalformedReport, match=names.replace("[", r"\[").replace("]", r"\]")):
        decode_admission(text)


def test_a_report_with_a_malformed_acknowledgement_still_counts_but_acknowledges_nothing() -> None:
    lease = demand_lease("ns", "gpu-0", "r1", 15, {}, admission=AdmissionAck(2))
    lease["metadata"]["annotations"][ADMISSION_ANNOTATION] = '{"generation": "two"}'
    seen: list[str] = []
    found = live_reports(
        [lease], "gpu-0", ExpiryObserver(), on_malformed=lambda k, w: seen.append(w)
    )
    assert [(r.holder, r.admission) for r in found] == [("r1", None)]
    assert len(seen) == 1
    assert "generation" in seen[0]
    assert not judge_fence(["a"], ["a"], 2, found).fenced, "a drain went ahead on a guess"


def test_a_routing_replica_without_demand_keeps_its_report_held() -> None:
    lease = demand_lease("ns", "gpu-0", "r1", 15, {}, admission=AdmissionAck(0))
    assert lease["spec"]["holderIdentity"] == "r1"
    emptied = demand_lease("ns", "gpu-0", "r1", 15, {}, lease)
    assert emptied["spec"]["holderIdentity"] == ""
    assert ADMISSION_ANNOTATION not in emptied["metadata"]["annotations"]
