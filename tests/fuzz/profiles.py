"""The fuzzers' hypothesis settings: a bounded, reproducible run for ``make test`` and a long one.

``FUZZ_PROFILE=ci`` (the default) is what ``make test`` runs: derandomized (the same examples on
every machine, so a failure in CI fails the same way locally), no example database, a fixed number
of examples per test chosen so that all the fuzzers take well under a minute on two cores.
``FUZZ_PROFILE=long`` (``make fuzz``) draws at random, ``FUZZ_EXAMPLES`` examples per test
(default 5,000), and keeps the failing examples it found in ``.hypothesis/fuzz`` (git-ignored), so
a re-run replays them first. Deadlines are off in both: an example's time is network time, and the
oracles bound each answer's time themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

#: Where the long run keeps the failing examples it found (replayed first on the next run).
LONG_RUN_DATABASE = Path(__file__).resolve().parents[2] / ".hypothesis" / "fuzz"
DEFAULT_LONG_EXAMPLES = 5000
_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def profile() -> str:
    """The profile named by ``FUZZ_PROFILE``: ``ci`` or ``long``."""
    name = os.environ.get("FUZZ_PROFILE", "ci")
    if name not in ("ci", "long"):
        raise ValueError(f"FUZZ_PROFILE must be ci or long, got {name!r}")
    return name


def fuzz_settings(ci_examples: int) -> settings:
    """Settings for one fuzz test: ``ci_examples`` in the bounded run, ``FUZZ_EXAMPLES`` (or
    :data:`DEFAULT_LONG_EXAMPLES`) in the long one."""
    if profile() == "ci":
        return settings(
            max_examples=ci_examples,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=_SLOW_IS_FINE,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            print_blob=True,
        )
    examples = int(os.environ.get("FUZZ_EXAMPLES", DEFAULT_LONG_EXAMPLES))
    return settings(
        max_examples=examples,
        derandomize=False,
        database=DirectoryBasedExampleDatabase(LONG_RUN_DATABASE),
        deadline=None,
        suppress_health_check=_SLOW_IS_FINE,
        print_blob=True,
    )
