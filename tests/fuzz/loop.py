"""An event loop in a thread of its own, so hypothesis' synchronous examples can talk to servers.

hypothesis runs each example as a plain function call; the proxy and the fake members are asyncio
servers. Keeping them in one long-lived loop in a background thread (the event loop production
runs: uvloop when it imports) lets every example use blocking sockets against servers that were
started once per session, instead of paying a server start-up per example.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class BackgroundLoop:
    """A running event loop in a daemon thread; coroutines are run in it from any thread."""

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fuzz-loop", daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Start ``coroutine`` in the loop; its future, to wait on or cancel."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run ``coroutine`` in the loop and wait for its result."""
        return self.submit(coroutine).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()
