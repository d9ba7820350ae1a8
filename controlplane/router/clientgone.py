"""Noticing a client that left while the proxy waits on its behalf.

Under uvicorn a client that disconnects is told to the app only through ``receive()``: a ``send``
to a closed connection is dropped without an error (ASGI 2.3). Without a listener, a request held
for a cold member went on until its budget, counted in this replica's demand report all that time
(so the pool could swap for nobody, and could never be judged idle), and a held stream was relayed
to its end for nobody, keeping the member busy (issue 40).

:func:`unless_client_leaves` runs one piece of work beside a listener on ``receive()`` and
cancels the work when the client leaves. Its rules:

* it starts only once the request body has been read in full, so the listener takes no body;
* it ends before starlette streams an answer (starlette listens on ``receive()`` itself), and a
  held stream's own sends go through :meth:`ClientWatch.send`, which marks the answer complete
  before its last body: uvicorn's ``receive()`` also says ``http.disconnect`` once the response
  is complete, and that is no client leaving;
* the work's exception is re-raised as itself, not wrapped in the task group's ExceptionGroup
  (a ``ProxyError`` must still reach the handler that answers it);
* it is for waits that may be long (a hold, a held stream): its task costs about 60 µs of CPU,
  which a request for a ready member does not pay.

The cancelled work must release what it holds in ``finally`` blocks that survive a cancellation
(the in-flight count, the member's connection): see ``ProxyApp._dispatch`` and
:mod:`controlplane.router.heldstream`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.types import Message, Receive, Send

T = TypeVar("T")


class ClientWatch:
    """Whether the client left, and the ``send`` that tells the watch when the answer is done."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.left = False
        self.answered = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered = True  # from here, receive()'s http.disconnect means "complete"
        await self._send(message)


async def unless_client_leaves(
    receive: Receive, send: Send, work: Callable[[ClientWatch], Awaitable[T]]
) -> tuple[T | None, ClientWatch]:
    """``work``'s result, or None when the client left first (``watch.left``); ``work``'s own
    exception is raised as it was. ``work`` sends only through the watch it is given."""
    watch = ClientWatch(send)
    result: list[T] = []
    failure: list[Exception] = []
    async with anyio.create_task_group() as group:

        async def listen() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not watch.answered:
                        watch.left = True
                        group.cancel_scope.cancel()
                    return

        group.start_soon(listen)
        try:
            result.append(await work(watch))
        except Exception as err:  # re-raised below, unwrapped
            failure.append(err)
        finally:
            group.cancel_scope.cancel()
    if failure:
        raise failure[0]
    return (result[0] if result else None), watch
