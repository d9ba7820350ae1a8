"""pytest plugin loaded by ``hack/mutations`` (``-p mutationguard``) in every run it makes.

A mutation run proves something only if the tests exercised the mutated scratch copy. The
virtualenv has an editable install of the project pointing at the real working tree, so a wrong
``sys.path`` would silently test the unmutated code and report every mutation SURVIVED (or, worse,
a baseline pass of code that is not the snapshot). After collection, when the test modules have
imported what they need, this plugin checks that ``controlplane`` and every ``controlplane.*``
module loaded come from ``$MUTATION_SCRATCH``, writes where ``controlplane`` came from to
``$MUTATION_GUARD_REPORT`` (the harness reads it back, so a run where the plugin did not run is
an error too), and otherwise stops the session with :data:`GUARD_EXIT`, which the harness reports
as an error, never as a caught mutation.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

#: The exit status of a run that imported the package from outside the scratch copy.
GUARD_EXIT = 97


def _outside(root: Path) -> list[str]:
    stray = []
    for name, module in list(sys.modules.items()):
        if name != "controlplane" and not name.startswith("controlplane."):
            continue
        where = getattr(module, "__file__", None)
        if where is not None and root not in Path(where).resolve().parents:
            stray.append(f"{name} from {where}")
    return stray


def pytest_collection_finish(session: pytest.Session) -> None:
    root = Path(os.environ["MUTATION_SCRATCH"]).resolve()
    import controlplane

    where = str(Path(controlplane.__file__ or "").resolve())
    Path(os.environ["MUTATION_GUARD_REPORT"]).write_text(where)
    stray = _outside(root)
    if stray:
        pytest.exit(
            f"mutationguard: modules imported from outside the scratch copy {root}: "
            + "; ".join(stray[:5])
            + (f" and {len(stray) - 5} more" if len(stray) > 5 else ""),
            returncode=GUARD_EXIT,
        )
