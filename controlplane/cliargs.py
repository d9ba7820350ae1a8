"""Value types for the subcommands' flags, and the error a subcommand prints: one spelling each.

A leaf module: every subcommand (operator, router-proxy, sim, sim-node) may import it, and it
imports nothing of theirs.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def host_port(text: str) -> tuple[str, int]:
    """``host:port``; ``:8081`` means every interface."""
    host, _, port = text.rpartition(":")
    try:
        return (host or "0.0.0.0", int(port))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}") from err


def host_port_or_off(text: str) -> tuple[str, int] | None:
    """:func:`host_port`, or ``0`` to turn the endpoint off."""
    return None if text == "0" else host_port(text)


def seconds(text: str) -> float:
    """A duration in seconds, zero or more."""
    try:
        value = float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from err
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text}")
    return value


def positive_int(text: str) -> int:
    """A whole number, one or more."""
    try:
        value = int(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from err
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text}")
    return value


def positive_float(text: str) -> float:
    """A number of seconds above zero."""
    try:
        value = float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from err
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def directory(text: str) -> Path:
    """A folder that exists (and is one)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a directory")
    return path


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of a (possibly nested) exception group: the error worth printing."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
