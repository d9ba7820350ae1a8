"""Mutation evidence: break the code on purpose, one breakage at a time, and show the tests notice.

A passing suite says the code does what the tests check; it does not say the tests check what the
design promises. For each breakage listed in ``hack/mutations.toml`` (renew at the full Lease
duration, take over a live Lease, force a write after a 409, ...) this command

1. snapshots the working tree once (tracked and untracked, not ignored files), so every run sees
   the same code even while others keep editing the real tree;
2. checks that every mutation's ``old`` snippet occurs exactly once in its file and that the
   mutated file still compiles: a snippet that no longer matches is a loud error, never a skip,
   because a mutation that silently stops applying would look like evidence it is not;
3. runs all the selected mutations' tests once on an unmutated copy: they must pass, or a
   "caught" verdict would only repeat a failure that was already there;
4. for each mutation, copies the snapshot, applies the replacement, runs its tests
   (``pytest -x``; unit and e2e tests in sessions of their own, as ``make test`` runs them)
   with the copy first on ``sys.path`` (``hack/mutationguard.py`` proves that
   ``controlplane`` really came from the copy), and records CAUGHT (a test failed) or SURVIVED;
5. prints a Markdown table and exits non-zero if a mutation survived, a baseline failed, or a run
   ended in anything but pass or fail (collection error, timeout, guard).

See docs/mutations.md for how to run it and how to add a mutation.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTATIONS_FILE = REPO / "hack" / "mutations.toml"
#: pytest's exit status when tests ran and some failed; 0 is all passed. Anything else
#: (interrupted, internal error, usage error, no tests collected, the guard's 97) is an error.
PYTEST_TESTS_FAILED = 1
#: A run that takes longer than this is stopped and reported as an error (pytest-timeout stops
#: single hung tests first: a mutation that hangs a test is caught by that).
DEFAULT_RUN_TIMEOUT_SECONDS = 900.0
_SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) (\S+)")


class HarnessError(Exception):
    """The evidence cannot be produced as asked (a snippet that does not apply, a bad id)."""


@dataclass(frozen=True)
class Mutation:
    id: str
    description: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]

    @property
    def needs_cluster(self) -> bool:
        return any(test.startswith("tests/e2e/") for test in self.tests)

    def apply(self, root: Path) -> None:
        """Replace ``old`` with ``new`` in ``root/file``; the snippet must occur exactly once."""
        path = root / self.file
        if not path.is_file():
            raise HarnessError(f"{self.id}: {self.file} does not exist")
        text = path.read_text()
        found = text.count(self.old)
        if found != 1:
            what = "snippet not found" if found == 0 else f"snippet found {found} times"
            raise HarnessError(
                f"{self.id}: {what} in {self.file} (the code changed: update hack/mutations.toml)"
                f"\n--- snippet ---\n{self.old}\n---------------"
            )
        mutated = text.replace(self.old, self.new)
        try:
            compile(mutated, str(path), "exec")
        except SyntaxError as err:
            raise HarnessError(
                f"{self.id}: the mutated {self.file} does not compile: {err}"
            ) from err
        path.write_text(mutated)


@dataclass
class Run:
    """One pytest invocation: how it ended and what failed."""

    returncode: int
    seconds: float
    failed: list[str] = field(default_factory=list)
    log: Path | None = None
    problem: str = ""


@dataclass
class Row:
    mutation: Mutation
    verdict: str
    seconds: float = 0.0
    detail: str = ""


def load_mutations(path: Path = MUTATIONS_FILE) -> list[Mutation]:
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    mutations = []
    seen: set[str] = set()
    for entry in data.get("mutation", []):
        try:
            mutation = Mutation(
                id=str(entry["id"]),
                description=str(entry["description"]),
                file=str(entry["file"]),
                old=str(entry["old"]),
                new=str(entry["new"]),
                tests=tuple(str(t) for t in entry["tests"]),
            )
        except KeyError as err:
            raise HarnessError(f"{path}: a mutation lacks {err}: {entry}") from err
        if mutation.id in seen:
            raise HarnessError(f"{path}: mutation id {mutation.id} is used twice")
        if not mutation.tests:
            raise HarnessError(f"{path}: mutation {mutation.id} lists no tests")
        if mutation.old == mutation.new:
            raise HarnessError(f"{path}: mutation {mutation.id} changes nothing")
        seen.add(mutation.id)
        mutations.append(mutation)
    return mutations


def select(mutations: Sequence[Mutation], only: Iterable[str]) -> list[Mutation]:
    wanted = [i for chunk in only for i in chunk.split(",") if i]
    if not wanted:
        return list(mutations)
    by_id = {m.id: m for m in mutations}
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        raise HarnessError(f"unknown mutation id(s): {', '.join(unknown)} (see --list)")
    return [m for m in mutations if m.id in wanted]


# -- the scratch copies --------------------------------------------------------------------------


def snapshot(into: Path) -> None:
    """Copy the working tree as it is now: tracked files and untracked ones git does not ignore
    (a new module someone has not committed yet is part of the code under test)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in sorted(set(filter(None, listed.split("\0")))):
        source = REPO / name
        if not source.is_file():
            continue  # tracked but deleted in the working tree
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def copy_of(pristine: Path, into: Path) -> Path:
    shutil.copytree(pristine, into, symlinks=True)
    return into


# -- running the tests ---------------------------------------------------------------------------


def controlplane_assets() -> str:
    """The control-plane binaries' folder, for e2e tests (built once, then cached)."""
    done = subprocess.run(
        [str(REPO / "hack" / "build-controlplane.sh")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise HarnessError(
            "hack/build-controlplane.sh failed; e2e tests cannot run:\n" + done.stderr[-2000:]
        )
    return lines[-1]


def run_tests(
    python: str,
    root: Path,
    tests: Sequence[str],
    log: Path,
    *,
    assets: str | None,
    stop_at_first_failure: bool,
    timeout: float,
) -> Run:
    """``python -m pytest`` in ``root`` with ``root`` first on ``sys.path``."""
    guard_report = log.with_suffix(".guard")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root), str(root / "hack"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no stale bytecode from one copy leaks to another
    env["MUTATION_SCRATCH"] = str(root)
    env["MUTATION_GUARD_REPORT"] = str(guard_report)
    if assets is not None:
        env["KUBEBUILDER_ASSETS"] = assets
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "mutationguard", "-q"]
    command += ["-rfE", *(["-x"] if stop_at_first_failure else []), *tests]
    started = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=timeout)
            problem = ""
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            returncode = process.wait()
            problem = f"timed out after {timeout:g} s"
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    failed = [m.group(2) for line in text.splitlines() if (m := _SUMMARY_LINE.match(line))]
    run = Run(returncode, seconds, failed, log, problem)
    if not run.problem:
        run.problem = _guard_problem(root, guard_report)
    if not run.problem and returncode not in (0, PYTEST_TESTS_FAILED):
        run.problem = f"pytest exited {returncode}: {_tail(text)}"
    return run


def run_tiers(
    python: str,
    root: Path,
    tests: Sequence[str],
    log_stem: Path,
    *,
    assets: str | None,
    stop_at_first_failure: bool,
    timeout: float,
) -> Run:
    """Unit tests, then e2e tests, each in a pytest session of its own as ``make test`` runs
    them: one session for both lets state the unit tests leave behind reach the e2e tests (a
    baseline that fails only in the mixed session proves nothing about the code)."""
    tiers = [
        ("unit", [t for t in tests if not t.startswith("tests/e2e/")]),
        ("e2e", [t for t in tests if t.startswith("tests/e2e/")]),
    ]
    total = Run(0, 0.0)
    for tier, chosen in tiers:
        if not chosen:
            continue
        run = run_tests(
            python,
            root,
            chosen,
            log_stem.with_name(f"{log_stem.name}.{tier}.log"),
            assets=assets,
            stop_at_first_failure=stop_at_first_failure,
            timeout=timeout,
        )
        total.seconds += run.seconds
        total.failed += run.failed
        total.log = run.log if total.log is None or run.returncode else total.log
        if run.problem:
            total.problem = f"{tier}: {run.problem}"
            return total
        if run.returncode == PYTEST_TESTS_FAILED:
            total.returncode = PYTEST_TESTS_FAILED
            total.log = run.log
            if stop_at_first_failure:
                return total
    return total


def _guard_problem(root: Path, report: Path) -> str:
    if not report.is_file():
        return "the guard did not run: it cannot be shown the tests imported the scratch copy"
    where = Path(report.read_text())
    if root.resolve() not in where.parents:
        return f"controlplane was imported from {where}, not from the scratch copy {root}"
    return ""


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# -- the table -----------------------------------------------------------------------------------


def short_test(node: str) -> str:
    tier = "e2e" if node.startswith("tests/e2e/") else "unit"
    return f"{tier}: `{node.rsplit('::', 1)[-1]}`"


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| mutation | file | tests | verdict | seconds |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        m = row.mutation
        tests = "<br>".join(short_test(t) for t in m.tests)
        verdict = f"**{row.verdict}**" if row.verdict != "CAUGHT" else row.verdict
        lines.append(
            f"| `{m.id}`: {m.description} | `{m.file}` | {tests} | {verdict} | {row.seconds:.1f} |"
        )
    return "\n".join(lines)


def listing(mutations: Sequence[Mutation]) -> str:
    lines = []
    for m in mutations:
        lines.append(f"{m.id}  ({m.file})\n    {m.description}")
        lines += [f"    - {t}" for t in m.tests]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def evidence(
    mutations: Sequence[Mutation], python: str, workdir: Path, timeout: float
) -> list[Row]:
    pristine = workdir / "snapshot"
    snapshot(pristine)
    say(f"snapshot of {REPO} in {pristine}")
    problems = []
    for mutation in mutations:  # every snippet checked before anything runs
        try:
            mutation.apply(copy_of(pristine, workdir / "check"))
        except HarnessError as err:
            problems.append(str(err))
        finally:
            shutil.rmtree(workdir / "check", ignore_errors=True)
    if problems:
        raise HarnessError("\n\n".join(problems))
    assets = controlplane_assets() if any(m.needs_cluster for m in mutations) else None
    logs = workdir / "logs"
    logs.mkdir()

    tests = unique(t for m in mutations for t in m.tests)
    say(f"baseline: {len(tests)} test node(s) on the unmutated copy ...")
    baseline = run_tiers(
        python,
        copy_of(pristine, workdir / "baseline"),
        tests,
        logs / "baseline",
        assets=assets,
        stop_at_first_failure=False,
        timeout=timeout,
    )
    say(f"baseline: exit {baseline.returncode} in {baseline.seconds:.1f} s")
    if baseline.problem:
        raise HarnessError(f"the baseline run failed to run: {baseline.problem} ({baseline.log})")
    broken = set(baseline.failed)

    rows = []
    for mutation in mutations:
        spoiled = [t for t in mutation.tests if any(f.startswith(t) for f in broken)]
        if spoiled:
            detail = "fails unmutated: " + ", ".join(spoiled)
            rows.append(Row(mutation, "BASELINE FAILED", detail=detail))
            say(f"{mutation.id}: BASELINE FAILED ({detail})")
            continue
        scratch = copy_of(pristine, workdir / mutation.id)
        mutation.apply(scratch)
        run = run_tiers(
            python,
            scratch,
            mutation.tests,
            logs / mutation.id,
            assets=assets,
            stop_at_first_failure=True,
            timeout=timeout,
        )
        if run.problem:
            row = Row(mutation, "ERROR", run.seconds, f"{run.problem} ({run.log})")
        elif run.returncode == PYTEST_TESTS_FAILED:
            row = Row(mutation, "CAUGHT", run.seconds, "by " + ", ".join(run.failed))
        else:
            row = Row(mutation, "SURVIVED", run.seconds, f"every listed test passed ({run.log})")
        rows.append(row)
        say(f"{mutation.id}: {row.verdict} in {row.seconds:.1f} s: {row.detail}")
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hack/mutations",
        description="Apply each mutation of hack/mutations.toml in a scratch copy, run the tests "
        "meant to catch it, and print a Markdown table of what they caught.",
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="ID", help="run only these (repeatable)"
    )
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests")
    parser.add_argument(
        "--check", action="store_true", help="only check that every snippet applies; run nothing"
    )
    parser.add_argument(
        "--python",
        default=str(REPO / ".venv" / "bin" / "python"),
        help="the interpreter with the project's test dependencies (default: .venv)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_RUN_TIMEOUT_SECONDS,
        help="seconds before one pytest run is stopped and reported as an error",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch directory (copies and logs)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        mutations = select(load_mutations(), args.only)
        if args.list:
            print(listing(mutations))
            return 0
        workdir = Path(tempfile.mkdtemp(prefix="mutations-"))
        try:
            if args.check:
                pristine = workdir / "snapshot"
                snapshot(pristine)
                problems = []
                for mutation in mutations:
                    try:
                        mutation.apply(copy_of(pristine, workdir / mutation.id))
                    except HarnessError as err:
                        problems.append(str(err))
                if problems:
                    raise HarnessError("\n\n".join(problems))
                print(f"all {len(mutations)} mutation(s) apply")
                return 0
            started = time.monotonic()
            rows = evidence(mutations, args.python, workdir, args.timeout)
        finally:
            if args.keep:
                say(f"kept {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    except HarnessError as err:
        say(f"hack/mutations: {err}")
        return 2
    print(table(rows))
    total = time.monotonic() - started
    bad = [r for r in rows if r.verdict != "CAUGHT"]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} caught in {total:.0f} s")
    for row in bad:
        print(f"- {row.mutation.id}: {row.verdict}: {row.detail}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
