"""Router mode's settings, kept light: the command line builds them without the server's imports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from controlplane.sim.modelsdir import DEFAULT_MODELS_MAX


@dataclass(frozen=True, slots=True)
class RouterSettings:
    """What ``llama-sim --models-dir`` was told."""

    models_dir: Path
    host: str = "127.0.0.1"
    port: int = 8080
    models_max: int = DEFAULT_MODELS_MAX
    autoload: bool = True
    #: The flags every child gets (``--parallel``, ``--ctx-size``, ``--sim-load-seconds``...).
    child_flags: tuple[str, ...] = ()


def child_flags(flags: Sequence[tuple[str, object]]) -> tuple[str, ...]:
    """``(flag, value)`` pairs as a child's arguments: None and False are left out, True is the
    flag alone."""
    out: list[str] = []
    for flag, value in flags:
        if value is None or value is False:
            continue
        out += [flag] if value is True else [flag, str(value)]
    return tuple(out)
