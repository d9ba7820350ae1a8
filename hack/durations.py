"""Where a test tier's time goes, from the ``--durations=0`` table of a pytest log.

    make test-e2e PYTEST_ARGS=--durations=0 2>&1 | tee e2e.log
    .venv/bin/python hack/durations.py e2e.log [--top 10]

prints the time of each test file (setup, call and teardown of its tests added up, so a module's
operator start counts for its file), the files sorted by it, and the slowest single tests. Under
pytest-xdist the times are each worker's own, so their sum is the tier's work, not its wall time.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

#: A line of pytest's durations table: ``12.34s call     tests/e2e/test_x.py::test_y[param]``.
DURATION_LINE = re.compile(
    r"^(?P<seconds>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<test>\S+)"
)


def read_durations(log: str) -> list[tuple[float, str, str]]:
    """Every (seconds, phase, test id) the log's durations table holds."""
    found = []
    for line in log.splitlines():
        match = DURATION_LINE.match(line.strip())
        if match:
            found.append((float(match["seconds"]), match["phase"], match["test"]))
    return found


def per_file(durations: list[tuple[float, str, str]]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for seconds, _, test in durations:
        totals[test.split("::", 1)[0]] += seconds
    return dict(totals)


def per_test(durations: list[tuple[float, str, str]]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for seconds, _, test in durations:
        totals[test] += seconds
    return dict(totals)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("log", type=Path, help="a pytest log with a --durations=0 table")
    parser.add_argument("--top", type=int, default=10, help="how many single tests to name")
    args = parser.parse_args(argv)
    durations = read_durations(args.log.read_text(errors="replace"))
    if not durations:
        print(f"{args.log}: no durations table (run pytest with --durations=0)", file=sys.stderr)
        return 1
    files = per_file(durations)
    total = sum(files.values())
    print(f"{len(per_test(durations))} tests, {total:.0f} s of test time in {len(files)} files")
    print("\n| file | s | share |\n| --- | ---: | ---: |")
    for name, seconds in sorted(files.items(), key=lambda item: -item[1]):
        print(f"| {name} | {seconds:.0f} | {100 * seconds / total:.1f} % |")
    print("\n| slowest tests (setup + call + teardown) | s |\n| --- | ---: |")
    for name, seconds in sorted(per_test(durations).items(), key=lambda item: -item[1])[: args.top]:
        print(f"| {name} | {seconds:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
