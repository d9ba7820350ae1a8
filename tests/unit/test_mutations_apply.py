"""Every mutation of ``hack/mutations.toml`` still applies to the code as it is.

``hack/mutations`` refuses a snippet that no longer matches, but it is not part of ``make test``;
without this, a change to the code silently turns a mutation into an error the next time someone
runs it (two did in issue 24's session). Here each ``old`` snippet must occur exactly once in its
file, as the harness requires, at every CI run.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MUTATIONS = tomllib.loads((REPO / "hack" / "mutations.toml").read_text())["mutation"]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m["id"] for m in MUTATIONS])
def test_the_snippet_occurs_exactly_once_in_its_file(mutation: dict[str, object]) -> None:
    text = (REPO / str(mutation["file"])).read_text()
    found = text.count(str(mutation["old"]))
    assert found == 1, f"{mutation['id']}: its snippet occurs {found} times in {mutation['file']}"
    assert mutation["tests"], f"{mutation['id']} names no test to catch it"


def test_ids_are_unique() -> None:
    ids = [m["id"] for m in MUTATIONS]
    assert len(ids) == len(set(ids))
