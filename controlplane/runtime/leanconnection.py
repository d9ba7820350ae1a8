"""Per-connection state of uvicorn's httptools protocol, made only when a connection needs it.

A held request is an open connection whose answer waits (docs/router.md, "The activator"), and a
replica holds up to 10,000 of them (``--max-held-requests``). uvicorn makes, for every connection
and every request, state that a held request never uses: an ``asyncio.Event`` for flow control
(only a client that stops reading pauses the writes to it), a ``deque`` for pipelined requests
(only a client that pipelines queues one) and an ``asyncio.Event`` per request for its body
(waited on only while a body is still arriving). Each event carries a ``deque`` of waiters, and an
empty ``deque`` is already 0.6 KB: 2.3 KB per held request in all, about a sixth of its cost
(bench/README.md, "Slow clients and held capacity (issue 20)").

The classes here keep uvicorn's interfaces and behaviour and allocate their containers on first
use. They are installed by the coalescing protocol (:mod:`controlplane.runtime.coalescing`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl


class LazyEvent:
    """What uvicorn's request cycle uses of ``asyncio.Event`` (``set``, ``clear``, ``is_set``,
    ``wait``), with no waiter list until something waits."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        for waiter in self._waiters or ():
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            return await waiter
        finally:
            self._waiters.remove(waiter)


class LazyFlowControl(FlowControl):
    """uvicorn's flow control, whose "writable again" event is made only when writing pauses:
    :meth:`drain` returns at once unless writing is paused, as uvicorn's does."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._writable: LazyEvent | None = None

    async def drain(self) -> None:
        if self._writable is not None:
            await self._writable.wait()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            if self._writable is None:
                self._writable = LazyEvent()
            self._writable.clear()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            if self._writable is not None:
                self._writable.set()


class Pipeline(list[Any]):
    """The queue of pipelined requests, as uvicorn uses its ``deque`` (``appendleft``, ``pop``
    from the right, truth): first in, first out. An empty list holds no item storage."""

    __slots__ = ()

    def appendleft(self, item: Any) -> None:
        self.insert(0, item)
