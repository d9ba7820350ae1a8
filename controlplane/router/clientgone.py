"""Noticing a client that leaves while its request waits (held, or for the member's answer).

Why: an ASGI server tells the app that a client disconnected only through ``receive()``; uvicorn
never makes ``send`` fail for a closed connection (it drops what is sent). A request held for a
cold member, or waiting for a member's answer, calls neither once its body is read, so a client
that gave up stayed held until its budget ran out, was counted in this replica's demand report
all that time, and could swap the pool to a member nobody was waiting for any more; a member then
computed an answer for nobody (issue 40, "demand that outlives its requests"). Streamed answers
are watched by Starlette's ``StreamingResponse`` itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.types import Receive

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before it was answered: nobody to answer."""


async def until_disconnect(receive: Receive) -> None:
    """Return once the client has disconnected (call it only after the body was read whole: the
    server answers ``receive()`` then with the disconnect alone, when it comes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def while_client_stays(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """``work()``'s result, or :class:`ClientGone` when the client leaves first (``work`` is then
    cancelled, so a hold ends and a request waiting for its member stops counting)."""
    done: list[T] = []
    failed: list[Exception] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            await until_disconnect(receive)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            done.append(await work())
        except Exception as err:  # raised as it is, not wrapped in the task group's group
            failed.append(err)
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if not done:
        raise ClientGone
    return done[0]
