"""A mode that a test switches at run time, for a while or for good (``/slots``, answers).

A timed switch reverts by itself, read lazily on the model's clock, so a test that breaks a
member "for a while" leaves no member broken even if it is cancelled before it could switch the
mode back. Switching while a timed switch runs keeps the mode that was in force before it as the
one to return to.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from controlplane.sim.clock import Clock

Mode = TypeVar("Mode")


class TimedSwitch(Generic[Mode]):
    """One mode, switchable for good or for ``seconds`` of ``clock``."""

    def __init__(self, initial: Mode, clock: Clock) -> None:
        self._clock = clock
        self._mode = initial
        #: A timed switch: (when it ends on the clock, the mode to return to).
        self._until: tuple[float, Mode] | None = None

    @property
    def mode(self) -> Mode:
        """The mode now; a timed switch that has run out has reverted."""
        if self._until is not None:
            until, previous = self._until
            if self._clock.now() >= until:
                self._mode, self._until = previous, None
        return self._mode

    def set(self, mode: Mode, seconds: float | None = None) -> None:
        """Switch; with ``seconds``, only for that long, then back to the mode in force before."""
        current = self.mode
        if seconds is None:
            self._mode, self._until = mode, None
            return
        previous = self._until[1] if self._until else current
        self._mode = mode
        self._until = (self._clock.now() + seconds, previous)

    @property
    def seconds_left(self) -> float | None:
        """How long a timed switch still lasts; None when the mode is not timed."""
        _ = self.mode  # a switch that has run out reverts here
        if self._until is None:
            return None
        return max(self._until[0] - self._clock.now(), 0.0)
