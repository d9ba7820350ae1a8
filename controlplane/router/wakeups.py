"""Who wakes whom in the router-proxy: one event per change, taken before the state is read.

*Why a module of its own:* waiting is what the activator does most: every held request, every
swap driver, and a dispatch whose upstream's caches have not caught up wait for "the next change
that could alter my answer". Who is woken by what decides the proxy's cost under load: an
in-flight release that woke every held request cost 5,000 task steps for each fast-path answer
(bench/README.md, "Slow clients and held capacity (issue 20)"). So the primitive is here, apart
from every one of its users, and the two notifiers the activator makes of it are wired in one
place: held requests wait on the notifier (cache events, a swap's end, the stop); swap drivers
wait on the progress notifier, which the notifier forwards to, and which the in-flight requests'
ends and the backstop's ticks wake too.
"""

from __future__ import annotations

import anyio

#: Backstop wake-up of waiting loops (progress is driven by cache events).
POLL_SECONDS = 1.0


class Notifier:
    """Wakes every waiter on any change it is told of, and every notifier it forwards to."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._taken = False
        self._forwards: list[Notifier] = []

    def forward_to(self, other: Notifier) -> None:
        """Every change this one is told of wakes ``other``'s waiters too."""
        self._forwards.append(other)

    def notify(self) -> None:
        for other in self._forwards:
            other.notify()
        if not self._taken:
            return  # nobody holds the current event: nobody to wake (every request's end notifies)
        self._event.set()
        self._event = anyio.Event()
        self._taken = False

    def snapshot(self) -> anyio.Event:
        """The event the next change sets; take it *before* reading the state it guards."""
        self._taken = True
        return self._event

    @staticmethod
    async def wait(event: anyio.Event, timeout: float) -> None:
        with anyio.move_on_after(max(0.0, timeout)):
            await event.wait()
