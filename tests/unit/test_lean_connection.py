"""The lean per-connection state (:mod:`controlplane.runtime.leanconnection`) behaves as uvicorn's
``asyncio.Event``, ``FlowControl`` and ``deque`` do where uvicorn uses them, and holds nothing
until it is used; the server protocol installs it and keeps its own state out of the instance
dict (what a held request's memory went to, bench/README.md, "Slow clients and held capacity").
"""

from __future__ import annotations

import asyncio

import pytest

from controlplane.runtime.coalescing import http_protocol
from controlplane.runtime.leanconnection import LazyEvent, LazyFlowControl, Pipeline
from controlplane.runtime.requestlimits import RequestLimits, guarded_protocol


class Reading(asyncio.Transport):
    """A transport that records pauses and resumes of reading."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.mark.anyio
async def test_the_event_wakes_every_waiter_once_set_and_keeps_no_list_until_waited() -> None:
    event = LazyEvent()
    assert event._waiters is None
    assert not event.is_set()
    waiters = [asyncio.create_task(event.wait()) for _ in range(3)]
    await settle()
    assert not any(w.done() for w in waiters)
    event.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert event._waiters == []  # each waiter took itself off
    assert await event.wait() is True  # set: at once
    event.clear()
    assert not event.is_set()


@pytest.mark.anyio
async def test_a_cancelled_waiter_leaves_and_does_not_block_a_later_set() -> None:
    event = LazyEvent()
    gone = asyncio.create_task(event.wait())
    stays = asyncio.create_task(event.wait())
    await settle()
    gone.cancel()
    await settle()
    event.set()
    assert await stays is True
    assert gone.cancelled()
    assert event._waiters == []


@pytest.mark.anyio
async def test_flow_control_drains_at_once_until_writing_pauses_then_waits_for_resume() -> None:
    transport = Reading()
    flow = LazyFlowControl(transport)
    await asyncio.wait_for(flow.drain(), 1)  # never paused: no event, no wait
    assert flow._writable is None
    flow.pause_writing()
    drained = asyncio.create_task(flow.drain())
    await settle()
    assert not drained.done()
    flow.resume_writing()
    await asyncio.wait_for(drained, 1)
    flow.pause_reading()
    flow.pause_reading()
    flow.resume_reading()
    assert transport.calls == ["pause", "resume"]  # as uvicorn's: once per change


def test_the_pipeline_is_first_in_first_out_as_uvicorns_deque_is_used() -> None:
    queue = Pipeline()
    assert not queue
    queue.appendleft("first")
    queue.appendleft("second")
    assert queue
    assert queue.pop() == "first"
    assert queue.pop() == "second"
    assert not queue


def test_the_guarded_protocol_keeps_its_own_state_in_slots() -> None:
    """Six attributes more in uvicorn's instance dict cost 1.6 KB per connection."""
    base = http_protocol()
    assert not isinstance(base, str)
    protocol = guarded_protocol(base, RequestLimits())
    slots = set(protocol.__dict__.get("__slots__", ()))
    assert {"_head_lines", "_head_bytes", "_head_started", "_head_timer"} <= slots
    assert {"_in_body", "_body_timer"} <= slots
