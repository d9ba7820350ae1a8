"""The basic queue: dedupe, one worker per key, re-queue after done, FIFO, shut-down with drain.

Concurrency is made deterministic with ``anyio.wait_all_tasks_blocked``: after it returns, every
task is parked, so "the worker has not got the key" is a fact about the queue, not about timing.
"""

from __future__ import annotations

import anyio
import pytest

from controlplane.runtime.workqueue import NotProcessing, Queue, QueueShutDown

pytestmark = pytest.mark.anyio


class Taker:
    """A task that calls ``get`` once and remembers what it got (or that the queue shut down)."""

    def __init__(self, queue: Queue[str]) -> None:
        self.queue = queue
        self.got: str | None = None
        self.shut_down = False
        self.scope = anyio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            try:
                self.got = await self.queue.get()
            except QueueShutDown:
                self.shut_down = True


async def test_get_returns_keys_in_the_order_they_were_added() -> None:
    queue: Queue[str] = Queue()
    for key in ("a", "b", "c"):
        queue.add(key)
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]


async def test_adds_while_queued_collapse_into_one() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    assert len(queue) == 0


async def test_an_add_while_processing_requeues_only_after_done() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0, "a processing key must not be handed to another worker"
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0, "the two adds during processing collapse into one re-queue"


async def test_a_second_worker_waits_while_the_key_is_processing() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    first = await queue.get()
    queue.add("a")
    second = Taker(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(second.run)
        await anyio.wait_all_tasks_blocked()
        assert second.got is None
        queue.done(first)
        await anyio.wait_all_tasks_blocked()
        assert second.got == "a"


async def test_a_parked_get_is_woken_by_an_add() -> None:
    queue: Queue[str] = Queue()
    taker = Taker(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(taker.run)
        await anyio.wait_all_tasks_blocked()
        assert taker.got is None
        queue.add("a")
    assert taker.got == "a"


async def test_one_add_wakes_one_of_several_parked_workers() -> None:
    queue: Queue[str] = Queue()
    takers = [Taker(queue) for _ in range(3)]
    async with anyio.create_task_group() as tg:
        for taker in takers:
            tg.start_soon(taker.run)
        await anyio.wait_all_tasks_blocked()
        queue.add("a")
        await anyio.wait_all_tasks_blocked()
        assert [t.got for t in takers].count("a") == 1
        queue.shut_down()
    assert sum(t.shut_down for t in takers) == 2


async def test_a_woken_worker_that_is_cancelled_passes_the_key_on() -> None:
    # The first parked worker is woken for "a" and cancelled before it runs: the key must go to
    # the second worker rather than sit in the queue beside it.
    queue: Queue[str] = Queue()
    first, second = Taker(queue), Taker(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(second.run)
        await anyio.wait_all_tasks_blocked()
        queue.add("a")
        first.scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert first.got is None
        assert second.got == "a"


async def test_a_cancelled_get_leaves_the_queue_usable() -> None:
    queue: Queue[str] = Queue()
    with anyio.move_on_after(0):
        await queue.get()
    queue.add("a")
    assert await queue.get() == "a"


async def test_done_for_a_key_not_processing_is_an_error() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    with pytest.raises(NotProcessing):
        queue.done("a")  # queued, not processing
    queue.done(await queue.get())
    with pytest.raises(NotProcessing):
        queue.done("a")  # twice


async def test_shut_down_hands_out_what_is_queued_then_raises() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    queue.add("b")
    queue.shut_down()
    assert queue.shutting_down()
    queue.add("c")  # ignored
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    with pytest.raises(QueueShutDown):
        await queue.get()


async def test_shut_down_releases_parked_workers() -> None:
    queue: Queue[str] = Queue()
    takers = [Taker(queue) for _ in range(2)]
    async with anyio.create_task_group() as tg:
        for taker in takers:
            tg.start_soon(taker.run)
        await anyio.wait_all_tasks_blocked()
        queue.shut_down()
    assert all(t.shut_down for t in takers)


async def test_a_key_dirty_at_shut_down_is_still_processed_again() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")  # changed while processing, before the shut-down
    queue.shut_down()
    queue.done(key)
    assert await queue.get() == "a"


async def test_drain_waits_until_every_processing_key_is_done() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    queue.add("b")
    a, b = await queue.get(), await queue.get()
    drained = False

    async def drain() -> None:
        nonlocal drained
        await queue.shut_down_with_drain()
        drained = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await anyio.wait_all_tasks_blocked()
        assert queue.shutting_down()
        assert not drained
        queue.done(a)
        await anyio.wait_all_tasks_blocked()
        assert not drained
        queue.done(b)
    assert drained


async def test_drain_returns_at_once_when_nothing_is_processing() -> None:
    queue: Queue[str] = Queue()
    with anyio.fail_after(5):  # a hang, not a timing assertion
        await queue.shut_down_with_drain()
    assert queue.shutting_down()


async def test_shut_down_stops_a_pending_drain() -> None:
    queue: Queue[str] = Queue()
    queue.add("a")
    await queue.get()
    drained = False

    async def drain() -> None:
        nonlocal drained
        await queue.shut_down_with_drain()
        drained = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await anyio.wait_all_tasks_blocked()
        assert not drained
        queue.shut_down()
    assert drained


async def test_keys_may_be_any_hashable_value_object() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Request:
        namespace: str
        name: str

    queue: Queue[Request] = Queue()
    queue.add(Request("ns", "a"))
    queue.add(Request("ns", "a"))
    assert len(queue) == 1
    assert await queue.get() == Request("ns", "a")
