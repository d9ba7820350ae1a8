"""The demand report protocol and the waiting demand a pool shows (pure, no network).

A report is a Lease per replica and pool (controlplane/api/v1alpha1/demand.py): the one parsing
refuses every malformed shape by name, a report is never mistaken for the pool's intent, and the
pool controller sums live reports into ``status.waiting`` (controllers/modelpool/waiting.py).
"""

from __future__ import annotations

import pytest

from controlplane.api.v1alpha1.activation import POOL_LABEL, pool_for_lease, read_activation
from controlplane.api.v1alpha1.demand import (
    DEMAND_ANNOTATION,
    REPORT_LABEL,
    MalformedReport,
    ReportedDemand,
    decode_demand,
    demand_lease,
    demand_lease_name,
    encode_demand,
    pool_of_demand_lease,
)
from controlplane.controllers.modelpool.waiting import SeenReport, waiting_demand


def test_a_report_round_trips_and_names_its_pool_never_as_an_intent() -> None:
    demand = {"b": ReportedDemand(held=3, waited=1.25), "a": ReportedDemand(active=True)}
    lease = demand_lease("ns", "gpu-0", "proxy-7", 15, demand)
    assert lease["metadata"]["name"] == demand_lease_name("gpu-0", "proxy-7")
    assert lease["metadata"]["labels"] == {POOL_LABEL: "gpu-0", REPORT_LABEL: "demand"}
    assert lease["spec"]["holderIdentity"] == "proxy-7"
    assert decode_demand(lease["metadata"]["annotations"][DEMAND_ANNOTATION]) == demand
    assert pool_of_demand_lease(lease) == "gpu-0"
    assert pool_for_lease(lease) is None, "a demand report is not the pool's intent"
    assert not read_activation(lease).target


def test_an_empty_report_has_no_holder_and_keeps_its_resource_version() -> None:
    first = demand_lease("ns", "gpu-0", "proxy-7", 15, {"b": ReportedDemand(held=1)})
    first["metadata"]["resourceVersion"] = "42"
    empty = demand_lease("ns", "gpu-0", "proxy-7", 15, {}, first)
    assert empty["spec"]["holderIdentity"] == ""
    assert empty["metadata"]["resourceVersion"] == "42", "an update must carry it"
    assert decode_demand(empty["metadata"]["annotations"][DEMAND_ANNOTATION]) == {}


def test_names_stay_valid_for_any_identity() -> None:
    name = demand_lease_name("gpu-0", "router-proxy-5d8f9c-xk2lp/with odd chars")
    prefix = "modelpool-demand-gpu-0-"
    assert name.startswith(prefix)
    assert len(name) == len(prefix) + 10


def test_a_lease_is_a_report_only_by_label_and_name() -> None:
    lease = demand_lease("ns", "gpu-0", "p", 15, {})
    lease["metadata"]["name"] = "something-else"
    assert pool_of_demand_lease(lease) is None
    other = demand_lease("ns", "gpu-0", "p", 15, {})
    del other["metadata"]["labels"][REPORT_LABEL]
    assert pool_of_demand_lease(other) is None


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("{not json", "is not JSON"),
        ("[]", "must be an object of members"),
        ('{"b": 3}', "['b'] must be an object"),
        ('{"b": {"held": "3", "active": false}}', ".held must be 0..1000000"),
        ('{"b": {"held": -1, "active": false}}', ".held must be 0..1000000"),
        ('{"b": {"held": true, "active": false}}', ".held must be 0..1000000"),
        ('{"b": {"held": 1, "waited": -2, "active": false}}', ".waited must be >= 0"),
        ('{"b": {"held": 1, "waited": "NaN", "active": false}}', ".waited must be >= 0"),
        ('{"b": {"held": 1, "active": "yes"}}', ".active must be a boolean"),
    ],
)
def test_every_malformed_report_is_refused_by_name(text: str, names: str) -> None:
    with pytest.raises(MalformedReport, match=names.replace("[", r"\[").replace("]", r"\]")):
        decode_demand(text)


def test_a_report_naming_too_many_members_is_refused() -> None:
    text = encode_demand({f"m{i}": ReportedDemand(held=1) for i in range(65)})
    with pytest.raises(MalformedReport, match="at most 64"):
        decode_demand(text)


def test_waiting_demand_sums_replicas_and_places_arrivals_on_our_clock() -> None:
    reports = [
        SeenReport(1000.0, {"b": ReportedDemand(held=2, waited=5.0), "a": ReportedDemand(held=9)}),
        SeenReport(1002.0, {"b": ReportedDemand(held=1, waited=10.0)}),
        SeenReport(1003.0, {"c": ReportedDemand(held=4, waited=1.0), "x": ReportedDemand(held=1)}),
        SeenReport(1004.0, {"d": ReportedDemand(active=True)}),
    ]
    found = waiting_demand(reports, ["a", "b", "c", "d"], resident="a")
    assert [(w.member, w.requests, w.since) for w in found] == [
        ("b", 3, "1970-01-01T00:16:32Z"),  # the oldest of b's: 1002 - 10 = 992
        ("c", 4, "1970-01-01T00:16:42Z"),
    ], "members outside the pool, the resident and members with nothing held are left out"
