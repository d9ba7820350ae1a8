"""Property test: random interleavings of adds, delays, retries and workers keep the contract.

Hypothesis writes a script of operations; the test plays it against a real
:class:`RateLimitingQueue` on a fake clock, with real worker tasks that block in ``get`` like
a controller's. Each worker only moves when the script gives it a step (a gate it waits on), and
after every operation the test waits until every task is blocked, so an interleaving is exactly
reproducible and Hypothesis can shrink a failure to a short script.

A reference model runs alongside: ``owed`` holds every key that has been added (immediately, or
by a delay that came due) since its last processing started. The invariants checked:

* no key is ever held by two workers;
* a worker only ever gets a key that is owed (duplicates collapse: no extra processing);
* no idle worker sits parked in ``get`` while an owed key is queued (no lost wake-up);
* after the delays come due and the workers run, nothing is owed (every key was processed after
  its last add), and after a shut-down with drain, nothing that was owed is lost, the drain
  returned only once no key was processing, and every worker ended with ``QueueShutDown``.

Each example runs its own event loop (``anyio.run``): Hypothesis drives the examples, and a
fresh loop per example keeps them independent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Literal

import anyio
import anyio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.runtime.workqueue import (
    FakeClock,
    QueueShutDown,
    RateLimiter,
    RateLimitingQueue,
    default_controller_rate_limiter,
)

KEYS = st.sampled_from(["a", "b", "c"])
DELAYS = st.sampled_from([-1.0, 0.0, 0.005, 0.1, 0.5, 1.0, 2.5])

Op = (
    tuple[Literal["add"], str]
    | tuple[Literal["add_after"], str, float]
    | tuple[Literal["add_rate_limited"], str]
    | tuple[Literal["forget"], str]
    | tuple[Literal["advance"], float]
    | tuple[Literal["step"], int]
    | tuple[Literal["shutdown"]]
)

OPS = st.one_of(
    st.tuples(st.just("add"), KEYS),
    st.tuples(st.just("add_after"), KEYS, DELAYS),
    st.tuples(st.just("add_rate_limited"), KEYS),
    st.tuples(st.just("forget"), KEYS),
    st.tuples(st.just("advance"), st.sampled_from([0.005, 0.1, 0.5, 1.0, 3.0])),
    st.tuples(st.just("step"), st.integers(0, 3)),
    st.tuples(st.just("step"), st.integers(0, 3)),  # twice as likely: workers must keep up
    st.tuples(st.just("shutdown")),
)


async def wait_all_tasks_blocked() -> None:
    """Yield until every other task waits on something.

    ``anyio.wait_all_tasks_blocked`` does this too, but sleeps 0.1 s whenever a task is still
    runnable; thousands of scripted steps make that minutes. This polls with zero-length yields
    instead, reading the same asyncio task attribute anyio reads.
    """
    this = asyncio.current_task()
    while True:
        await anyio.lowlevel.checkpoint()
        runnable = False
        for task in asyncio.all_tasks():
            waiter = getattr(task, "_fut_waiter", None)
            if task is not this and (waiter is None or waiter.done()):
                runnable = True
                break
        if not runnable:
            return


class RecordingLimiter:
    """Wraps the default limiter to let the model know the delay each retry was given."""

    def __init__(self, inner: RateLimiter[Hashable]) -> None:
        self.inner = inner
        self.last = 0.0

    def when(self, key: str) -> float:
        self.last = self.inner.when(key)
        return self.last

    def forget(self, key: str) -> None:
        self.inner.forget(key)

    def num_requeues(self, key: str) -> int:
        return self.inner.num_requeues(key)


@dataclass
class Model:
    owed: set[str] = field(default_factory=set)
    waiting: dict[str, float] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    shut: bool = False
    processed: int = 0

    def add_after(self, key: str, ready_at: float, now: float) -> None:
        if self.shut:
            return
        if ready_at <= now:
            self.owed.add(key)
        elif key not in self.waiting or ready_at < self.waiting[key]:
            self.waiting[key] = ready_at

    def advance_to(self, now: float) -> None:
        for key, ready_at in list(self.waiting.items()):
            if ready_at <= now:
                self.owed.add(key)
                del self.waiting[key]


class Worker:
    """A controller-like worker that takes one scripted step at a time (or runs freely)."""

    def __init__(self, ident: int, queue: RateLimitingQueue[str], model: Model) -> None:
        self.ident = ident
        self.queue = queue
        self.model = model
        self.phase: Literal["gate", "get", "exited"] = "gate"
        self.free = False
        self._gate = anyio.Event()

    def step(self) -> None:
        self._gate.set()

    def run_freely(self) -> None:
        self.free = True
        self._gate.set()

    async def _wait_gate(self) -> None:
        self.phase = "gate"
        if not self.free:
            await self._gate.wait()
            self._gate = anyio.Event()

    async def run(self) -> None:
        model = self.model
        while True:
            await self._wait_gate()
            self.phase = "get"
            try:
                key = await self.queue.get()
            except QueueShutDown:
                self.phase = "exited"
                return
            assert key not in model.held, f"{key} handed to {self.ident} while {model.held}"
            assert key in model.owed, f"{key} processed without an add since it last started"
            model.owed.remove(key)
            model.held[key] = self.ident
            await self._wait_gate()
            del model.held[key]
            model.processed += 1
            self.queue.done(key)


async def play(ops: list[Op], workers_count: int, settle_first: bool) -> None:
    clock = FakeClock()
    limiter = RecordingLimiter(default_controller_rate_limiter(clock))
    queue: RateLimitingQueue[str] = RateLimitingQueue(limiter, clock=clock)
    model = Model()
    workers = [Worker(i, queue, model) for i in range(workers_count)]
    drained_with_held: dict[str, int] | None = None

    def check_no_idle_worker_beside_work() -> None:
        if any(w.phase == "get" for w in workers):
            queued = model.owed - model.held.keys()
            assert not queued, f"{queued} queued while a worker is parked in get"

    async def settle() -> None:
        await wait_all_tasks_blocked()
        check_no_idle_worker_beside_work()

    async def drain() -> None:
        nonlocal drained_with_held
        await queue.shut_down_with_drain()
        drained_with_held = dict(model.held)

    with anyio.fail_after(30):  # a hang is a failure, not a flake: nothing here waits on time
        async with anyio.create_task_group() as tg:
            for worker in workers:
                tg.start_soon(worker.run)
            await settle()
            for op in ops:
                match op:
                    case ("add", key):
                        queue.add(key)
                        model.add_after(key, clock.now(), clock.now())
                    case ("add_after", key, delay):
                        queue.add_after(key, delay)
                        model.add_after(key, clock.now() + delay, clock.now())
                    case ("add_rate_limited", key):
                        queue.add_rate_limited(key)
                        if not model.shut:
                            model.add_after(key, clock.now() + limiter.last, clock.now())
                    case ("forget", key):
                        queue.forget(key)
                        assert queue.num_requeues(key) == 0
                    case ("advance", seconds):
                        clock.advance(seconds)
                        model.advance_to(clock.now())
                    case ("step", ident):
                        workers[ident % workers_count].step()
                    case ("shutdown",):
                        queue.shut_down()
                        model.shut = True
                        model.waiting.clear()
                await settle()

            if settle_first and not model.shut:
                clock.advance(1e6)  # every delay and every bucket debt is due
                model.advance_to(clock.now())
                for worker in workers:
                    worker.run_freely()
                await settle()
                assert not model.owed, f"{model.owed} never processed after their last add"
                assert not model.held
                assert len(queue) == 0

            model.shut = True
            model.waiting.clear()
            tg.start_soon(drain)
            await settle()
            if model.held:
                assert drained_with_held is None, "the drain returned while keys were processing"
            for worker in workers:
                worker.run_freely()

    assert not model.owed, f"{model.owed} lost at shut-down"
    assert not model.held
    assert drained_with_held == {}, "the drain returned while keys were still processing"
    assert all(w.phase == "exited" for w in workers)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(OPS, max_size=60),
    workers_count=st.integers(1, 4),
    settle_first=st.booleans(),
)
def test_random_interleavings_keep_the_queue_contract(
    ops: list[Op], workers_count: int, settle_first: bool
) -> None:
    anyio.run(play, ops, workers_count, settle_first, backend="asyncio")
