"""The delaying layer on a fake clock: when keys become available, and who is woken for them."""

from __future__ import annotations

import anyio
import pytest

from controlplane.runtime.workqueue import DelayingQueue, FakeClock, QueueShutDown

pytestmark = pytest.mark.anyio


def make_queue() -> tuple[DelayingQueue[str], FakeClock]:
    clock = FakeClock(start=100.0)
    return DelayingQueue(clock=clock), clock


async def test_zero_or_negative_delay_is_an_immediate_add() -> None:
    queue, _ = make_queue()
    queue.add_after("a", 0)
    queue.add_after("b", -1)
    assert len(queue) == 2


async def test_a_delayed_key_appears_exactly_when_due() -> None:
    queue, clock = make_queue()
    queue.add_after("a", 5)
    clock.advance(4.999)
    assert len(queue) == 0
    clock.advance(0.001)
    assert len(queue) == 1
    assert await queue.get() == "a"


async def test_a_later_add_after_does_not_postpone_a_key() -> None:
    queue, clock = make_queue()
    queue.add_after("a", 1)
    queue.add_after("a", 10)
    clock.advance(1)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    clock.advance(20)
    assert len(queue) == 0, "the later request was dropped, not kept as a second entry"


async def test_an_earlier_add_after_moves_a_key_earlier_once() -> None:
    queue, clock = make_queue()
    queue.add_after("a", 10)
    queue.add_after("a", 2)
    clock.advance(2)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    clock.advance(10)
    assert len(queue) == 0, "the superseded entry must not fire as well"


async def test_a_due_key_is_queued_before_a_new_delay_is_compared() -> None:
    # At t+1 "a" is due: it counts as queued, as if it had moved at its deadline, so a new
    # add_after schedules another run rather than being swallowed by the old entry.
    queue, clock = make_queue()
    queue.add_after("a", 1)
    clock.advance(1)
    queue.add_after("a", 5)
    queue.done(await queue.get())
    clock.advance(5)
    assert len(queue) == 1


async def test_due_keys_come_out_in_deadline_order() -> None:
    queue, clock = make_queue()
    queue.add_after("c", 3)
    queue.add_after("a", 1)
    queue.add_after("b", 2)
    clock.advance(3)
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]


async def test_a_delayed_key_collapses_with_the_same_key_already_queued() -> None:
    queue, clock = make_queue()
    queue.add("a")
    queue.add_after("a", 1)
    clock.advance(1)
    assert len(queue) == 1


async def test_a_parked_worker_wakes_when_the_deadline_passes() -> None:
    queue, clock = make_queue()
    got: list[tuple[float, str]] = []

    async def worker() -> None:
        key = await queue.get()
        got.append((clock.now(), key))

    async with anyio.create_task_group() as tg:
        queue.add_after("a", 5)
        tg.start_soon(worker)
        await anyio.wait_all_tasks_blocked()
        assert clock.sleepers == 1, "the parked worker armed a timer for the deadline"
        clock.advance(5)
    assert got == [(105.0, "a")]


async def test_a_parked_worker_rearms_for_an_earlier_key() -> None:
    queue, clock = make_queue()
    got: list[tuple[float, str]] = []

    async def worker() -> None:
        key = await queue.get()
        got.append((clock.now(), key))

    async with anyio.create_task_group() as tg:
        queue.add_after("late", 60)
        tg.start_soon(worker)
        await anyio.wait_all_tasks_blocked()
        queue.add_after("early", 1)  # arrives while the worker sleeps until t+60
        await anyio.wait_all_tasks_blocked()
        clock.advance(1)
    assert got == [(101.0, "early")]


async def test_a_parked_worker_with_nothing_delayed_arms_no_timer() -> None:
    queue, clock = make_queue()
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.get)
        await anyio.wait_all_tasks_blocked()
        assert clock.sleepers == 0
        queue.add("a")


async def test_shut_down_drops_keys_not_yet_due_but_keeps_due_ones() -> None:
    queue, clock = make_queue()
    queue.add_after("due", 1)
    queue.add_after("later", 10)
    clock.advance(1)
    queue.shut_down()
    queue.add_after("after-shutdown", 0)
    assert await queue.get() == "due"
    clock.advance(100)
    with pytest.raises(QueueShutDown):
        await queue.get()


async def test_fake_clock_refuses_to_go_backwards() -> None:
    with pytest.raises(ValueError, match="backwards"):
        FakeClock().advance(-1)
