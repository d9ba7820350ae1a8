"""Test doubles for the preflight's injection points: a clock that sleeps instantly and a
scripted API server that answers SelfSubjectAccessReviews.

They live in the package (as ``anyio``'s and ``httpx``'s do) because the clock and the submit
function are part of the public surface, and whoever wires the preflight into a process tests
that wiring with the same doubles.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from controlplane.preflight.permissions import ScopedPermission

#: Loop turns a sleeper yields before asking whether every task is blocked.
SETTLE_CHECKPOINTS = 5
#: Wall-clock time at which a :class:`FakeClock` starts (any fixed instant will do).
FAKE_EPOCH = 1_750_000_000.0


@dataclass
class FakeClock:
    """Virtual time: monotonic starts at 0 and jumps to the next wake-up whenever every task is
    blocked, so a test of many concurrent reviews runs instantly yet in the order real time would
    give (each sleeper wakes at its own deadline, and sleepers overlap rather than add up)."""

    #: Monotonic seconds since the clock was made (read it with :meth:`now`).
    elapsed: float = 0.0
    epoch: float = FAKE_EPOCH
    sleeps: list[float] = field(default_factory=list)
    _sleepers: list[list[float]] = field(default_factory=list)
    _sequence: itertools.count[int] = field(default_factory=itertools.count)
    _tick: anyio.Event = field(default_factory=anyio.Event)

    def now(self) -> float:
        return self.elapsed

    def time(self) -> float:
        return self.epoch + self.elapsed

    async def sleep_until(self, deadline: float) -> None:
        await self.sleep(deadline - self.elapsed)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        entry = [self.elapsed + max(seconds, 0.0), float(next(self._sequence))]
        heapq.heappush(self._sleepers, entry)
        self._notify()  # the newcomer may be the earliest now
        try:
            while True:
                if self._sleepers[0] is entry:
                    # Let the tasks a tick just woke settle first: the wait below polls every
                    # 0.1 s of real time while any task is still runnable.
                    for _ in range(SETTLE_CHECKPOINTS):
                        await anyio.lowlevel.checkpoint()
                    await anyio.wait_all_tasks_blocked()
                    if self._sleepers[0] is entry:
                        heapq.heappop(self._sleepers)
                        self.elapsed = max(self.elapsed, entry[0])
                        self._notify()
                        return
                else:
                    tick = self._tick
                    await tick.wait()
        except BaseException:
            if entry in self._sleepers:
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)
                self._notify()
            raise

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds

    def _notify(self) -> None:
        self._tick.set()
        self._tick = anyio.Event()


#: One scripted answer: ``True``/``False`` is ``status.allowed``; an exception is raised.
Answer = bool | Exception


def attributes_key(attributes: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(attributes.items()))


@dataclass
class Submitted:
    """One review as the fake API server received it (a deep copy) and when."""

    body: dict[str, Any]
    at: float

    @property
    def attributes(self) -> dict[str, Any]:
        spec = self.body["spec"]["resourceAttributes"]
        assert isinstance(spec, dict)
        return spec


class FakeApiServer:
    """Answers reviews from per-permission scripts; permissions without a script are allowed.

    Each call consumes the next answer of that permission's script; the last answer repeats.
    ``mutate_bodies`` scribbles on each received body after recording it, as a careless client
    might, so that tests can prove no body is ever sent twice.
    """

    def __init__(self, clock: FakeClock | None = None, *, mutate_bodies: bool = False) -> None:
        self.clock = clock or FakeClock()
        self.mutate_bodies = mutate_bodies
        self.calls: list[Submitted] = []
        #: Every body object received, kept alive so that identity comparisons are meaningful.
        self.received: list[dict[str, Any]] = []
        self._scripts: dict[tuple[tuple[str, Any], ...], list[Answer]] = {}
        self._default: list[Answer] = [True]

    def script(self, permission: ScopedPermission, *answers: Answer) -> None:
        self._scripts[attributes_key(permission.resource_attributes())] = list(answers)

    def script_all(self, permissions: Iterable[ScopedPermission], *answers: Answer) -> None:
        for permission in permissions:
            self.script(permission, *answers)

    def default(self, *answers: Answer) -> None:
        """Script every permission that has no script of its own."""
        self._default = list(answers)

    def calls_for(self, permission: ScopedPermission) -> list[Submitted]:
        wanted = permission.resource_attributes()
        return [c for c in self.calls if c.attributes == wanted]

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if any(seen is body for seen in self.received):
            raise AssertionError("the same review object was submitted twice")
        self.received.append(body)
        self.calls.append(Submitted(copy.deepcopy(body), self.clock.now()))
        key = attributes_key(body["spec"]["resourceAttributes"])
        script = self._scripts.get(key, self._default)
        answer = script.pop(0) if len(script) > 1 else script[0]
        if self.mutate_bodies:
            body["spec"]["resourceAttributes"]["verb"] = "mutated"
        await anyio.lowlevel.checkpoint()
        if isinstance(answer, Exception):
            raise answer
        status: dict[str, Any] = {"allowed": answer}
        if not answer:
            status["reason"] = "no RBAC policy matched"
        return {**body, "status": status}
