"""The no-cut load run (``make bench-no-cut``): its pure part, judged without running it, so that
a wrong rhythm or a wrong verdict is found in seconds rather than after ten minutes of load."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.fairness_bench import pool_objects
from bench.no_cut_bench import (
    ALTERNATING,
    BUSY_SECONDS,
    LOOPING,
    POOL,
    QUIET_SECONDS,
    Replaced,
    Request,
    Run,
    retry_wait,
    rollout_outcomes,
    rollout_times,
    summary,
)
from bench.streamread import Stream


def test_quiet_periods_follow_each_busy_one() -> None:
    run = Run(100.0, 1000.0)
    assert run.quiet(100.0) == 0.0
    assert run.quiet(100.0 + BUSY_SECONDS - 0.1) == 0.0
    assert run.quiet(100.0 + BUSY_SECONDS) == pytest.approx(QUIET_SECONDS)
    assert run.quiet(100.0 + BUSY_SECONDS + QUIET_SECONDS) == 0.0


@pytest.mark.parametrize(("seconds", "rollouts"), [(600.0, 2), (120.0, 2), (90.0, 1), (600.0, 5)])
def test_rollouts_fall_in_busy_periods_within_the_run(seconds: float, rollouts: int) -> None:
    times = rollout_times(seconds, rollouts)
    assert len(times) == rollouts
    run = Run(0.0, seconds)
    for at in times:
        assert 0 < at < seconds
        assert run.quiet(at) == 0.0


def test_retry_after_is_waited_within_bounds() -> None:
    assert retry_wait("3") == 3.0
    assert retry_wait("3600") == 10.0
    assert retry_wait(None) == 1.0
    assert retry_wait("Wed, 21 Oct 2015 07:28:00 GMT") == 1.0


def test_what_fails_the_run() -> None:
    def request(outcome: str, retry_after: str | None = None) -> Request:
        return Request(LOOPING, "a", 0.0, outcome=outcome, retry_after=retry_after)

    assert not request("whole").failed
    assert not request("refused", "2").failed
    assert request("refused").failed
    assert request("cut").failed
    assert request("no answer").failed


def test_summary_counts_per_kind_and_the_requests_a_rollout_caught() -> None:
    run = Run(0.0, 60.0)
    run.requests = [
        Request(LOOPING, "a", 1.0, ended=3.0, status=200, outcome="whole"),
        Request(LOOPING, "a", 9.0, ended=12.0, status=200, outcome="cut"),
        Request(ALTERNATING, "b", 2.0, ended=20.0, status=503, retry_after="4", outcome="refused"),
        Request(ALTERNATING, "a", 30.0, ended=31.0, status=None, outcome="no answer"),
    ]
    run.replaced = [Replaced("router-proxy-x", 10.0)]
    record = summary(run, Counter({"Reclaimed": 1}))
    looping, alternating = record["kinds"][LOOPING], record["kinds"][ALTERNATING]
    assert (looping["whole"], looping["cut"], looping["statuses"]) == (1, 1, {"200": 2})
    assert alternating["refused with Retry-After"] == 1
    assert alternating["no answer"] == 1
    assert looping["latency max s"] == 2.0
    assert rollout_outcomes(run) == {"cut": 1, "refused": 1}
    assert len(record["failed"]) == 2


def test_the_pool_has_two_proxies_and_gives_its_slot_back() -> None:
    objects = pool_objects(pools=(POOL,), scheduling={"idleAfter": "5s"}, proxy_replicas=2)
    router = next(o for o in objects if o["kind"] == "ModelRouter")
    assert router["spec"]["proxy"] == {"replicas": 2}
    assert "proxy" not in next(o for o in pool_objects() if o["kind"] == "ModelRouter")["spec"]


def test_a_stream_is_whole_only_with_its_finish_and_done() -> None:
    whole, cut = Stream(), Stream()
    finish = '{"choices": [{"delta": {}, "finish_reason": "length"}]}'
    for line in ('data: {"choices": [{"delta": {"content": "x"}}]}', f"data: {finish}"):
        whole.read(line)
        cut.read(line)
    whole.read("data: [DONE]")
    cut.read('data: {"error": {"type": "upstream_disconnected"}}')
    assert whole.whole
    assert (whole.tokens, whole.finish_reason) == (1, "length")
    assert not cut.whole
