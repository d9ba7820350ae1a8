"""Polling helpers for e2e tests: wait for a condition with a deadline, never forever."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str,
) -> T:
    """Call ``probe`` until it returns something truthy, and return that; fail after ``timeout``."""
    last_error: BaseException | None = None
    with anyio.move_on_after(timeout):
        while True:
            try:
                result = await probe()
                if result:
                    return result
            except Exception as err:  # the condition may raise until it holds
                last_error = err
            await anyio.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}; last error: {last_error!r}"
    )


async def until(
    condition: Callable[[], bool], *, timeout: float = 30.0, interval: float = 0.05, what: str
) -> None:
    """Wait for a synchronous ``condition`` on local state (no I/O) to hold."""

    async def probe() -> bool:
        return condition()

    await eventually(probe, timeout=timeout, interval=interval, what=what)
