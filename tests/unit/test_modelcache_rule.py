"""The node cache's collection rule: a table of cases, and properties over any cache."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.modelcache.rule import CacheEntry, Policy, Why, decide

HOUR = 3600.0
NOW = 1_000_000.0


def entry(path: str, size: int = 10, age: float = 0.0) -> CacheEntry:
    return CacheEntry(path, size, NOW - age)


@pytest.mark.parametrize(
    ("entries", "named", "policy", "removed"),
    [
        pytest.param([entry("a", age=2 * HOUR)], {"a"}, Policy(HOUR), [], id="named-old-kept"),
        pytest.param([entry("a", age=2 * HOUR)], set(), Policy(HOUR), [("a", Why.UNUSED)],
                     id="unnamed-old-removed"),
        pytest.param([entry("a", age=HOUR)], set(), Policy(HOUR), [("a", Why.UNUSED)],
                     id="unused-exactly-the-retention"),
        pytest.param([entry("a", age=HOUR - 1)], set(), Policy(HOUR), [], id="unnamed-young-kept"),
        pytest.param(
            [entry("old", 10, 30), entry("new", 10, 10), entry("mid", 10, 20)],
            set(), Policy(HOUR, max_bytes=15), [("old", Why.OVER_CAP), ("mid", Why.OVER_CAP)],
            id="cap-evicts-least-recently-used-first",
        ),
        pytest.param(
            [entry("old", 10, 30), entry("new", 10, 10)],
            {"old"}, Policy(HOUR, max_bytes=15), [("new", Why.OVER_CAP)],
            id="cap-never-takes-a-named-file",
        ),
        pytest.param(
            [entry("a", 100, 30)], {"a"}, Policy(HOUR, max_bytes=15), [],
            id="named-files-alone-over-the-cap-stay",
        ),
        pytest.param(
            [entry("expired", 10, 2 * HOUR), entry("young", 10, 5)],
            set(), Policy(HOUR, max_bytes=10), [("expired", Why.UNUSED)],
            id="an-expired-file-counts-toward-the-cap-first",
        ),
        pytest.param(
            [entry("b", 10, 5), entry("a", 10, 5)], set(), Policy(HOUR, max_bytes=10),
            [("a", Why.OVER_CAP)], id="a-tie-goes-by-path",
        ),
        pytest.param([entry("a", 10, 5)], set(), Policy(HOUR, max_bytes=10), [],
                     id="at-the-cap-is-not-over-it"),
    ],
)  # fmt: skip
def test_the_rule(
    entries: list[CacheEntry], named: set[str], policy: Policy, removed: list[tuple[str, Why]]
) -> None:
    decision = decide(entries, named, NOW, policy)
    assert [(r.entry.path, r.why) for r in decision.removals] == removed


def test_named_files_over_the_cap_are_reported_over_it() -> None:
    decision = decide([entry("a", 100)], {"a"}, NOW, Policy(HOUR, max_bytes=15))
    assert (decision.removals, decision.kept_bytes, decision.over_cap) == ((), 100, True)


@pytest.mark.parametrize(("retention", "max_bytes"), [(-1.0, 0), (float("inf"), 0), (1.0, -1)])
def test_a_policy_out_of_range_is_refused(retention: float, max_bytes: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        Policy(retention, max_bytes)


paths = st.sampled_from([f"https/{i:016x}/m.gguf" for i in range(12)])
entries_strategy = st.lists(
    st.builds(CacheEntry, paths, st.integers(0, 1000), st.floats(NOW - 10 * HOUR, NOW)),
    max_size=12,
    unique_by=lambda e: e.path,
)
policies = st.builds(Policy, st.floats(0, 5 * HOUR), st.sampled_from([0, 1, 500, 2000, 20_000]))


@settings(max_examples=300, deadline=None)
@given(entries_strategy, st.sets(paths), policies)
def test_properties_of_any_cache(
    entries: list[CacheEntry], named: set[str], policy: Policy
) -> None:
    decision = decide(entries, named, NOW, policy)
    gone = {r.entry.path for r in decision.removals}
    kept = [e for e in entries if e.path not in gone]
    assert len(gone) == len(decision.removals), "an entry is removed at most once"
    # A named file is never removed, whatever its age or the cap.
    assert not gone & named
    for e in entries:
        expired = e.path not in named and NOW - e.last_used >= policy.retention
        # Every unnamed file past the retention goes; without a cap, nothing else does.
        assert not expired or e.path in gone
        if not policy.max_bytes:
            assert (e.path in gone) == expired
    assert decision.kept_bytes == sum(e.size for e in kept)
    if policy.max_bytes:
        cap_taken = [r.entry for r in decision.removals if r.why is Why.OVER_CAP]
        unnamed_kept = [e for e in kept if e.path not in named]
        # Under the cap, or nothing unnamed left to take.
        assert decision.kept_bytes <= policy.max_bytes or not unnamed_kept
        assert decision.over_cap == (decision.kept_bytes > policy.max_bytes)
        # The least recently used go first: none taken for the cap was used after one kept.
        for taken in cap_taken:
            assert all((taken.last_used, taken.path) <= (e.last_used, e.path) for e in unnamed_kept)
        # And no more than needed: without the last one taken, the cache was still over.
        if cap_taken:
            assert decision.kept_bytes + cap_taken[-1].size > policy.max_bytes
    else:
        assert not decision.over_cap
