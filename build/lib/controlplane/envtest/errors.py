"""Errors of the control-plane launcher: each names what went wrong and what to do."""

from __future__ import annotations


class EnvtestError(RuntimeError):
    """Base of everything the launcher raises."""


class BinaryNotFoundError(EnvtestError):
    """A required binary is neither configured nor built."""


class PortInUseError(EnvtestError):
    """A port the control plane was asked to listen on is taken."""


class ProcessFailedError(EnvtestError):
    """A control-plane process exited or never became healthy; the message ends with its log."""
