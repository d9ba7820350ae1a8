"""The servers a fuzz session runs once: a proxy and its fake member, in the background loop.

Each fuzzer gets a :class:`Harness`: the proxy's port, the member (whose script a member-side
example sets), and the error log. The proxies share one loop and one process, as a replica's
connections do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.fuzz.errorlog import ErrorLog
from tests.fuzz.loop import BackgroundLoop
from tests.fuzz.member import FakeMember
from tests.fuzz.proxy import ProxyOptions, serve_proxy


@dataclass
class Harness:
    """One proxy on a loopback port, the member it forwards to, and the session's error log."""

    loop: BackgroundLoop
    port: int
    member: FakeMember
    errors: ErrorLog


async def _start(member: FakeMember, options: ProxyOptions) -> tuple[int, asyncio.Task[None]]:
    """The member, then the proxy forwarding to it: the proxy's port and its serving task."""
    member_port = await member.start()
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_proxy(f"http://127.0.0.1:{member_port}", options, bound.set_result)
    )
    port = await bound
    await asyncio.sleep(0.05)  # uvicorn has configured its logging and listens
    return port, task


async def _stop(member: FakeMember, task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await member.stop()


@contextmanager
def fuzz_servers(options: dict[str, ProxyOptions]) -> Iterator[dict[str, Harness]]:
    """A harness for each named proxy configuration, all stopped at the end."""
    loop = BackgroundLoop()
    errors = ErrorLog()
    harnesses: dict[str, Harness] = {}
    tasks: list[tuple[FakeMember, asyncio.Task[None]]] = []
    try:
        for name, option in options.items():
            member = FakeMember()
            port, task = loop.run(_start(member, option))
            tasks.append((member, task))
            harnesses[name] = Harness(loop, port, member, errors)
        errors.install()
        yield harnesses
    finally:
        errors.remove()
        for member, task in tasks:
            loop.run(_stop(member, task), timeout=20)
        loop.stop()
