"""``make dev`` and the walkthrough (docs/walkthrough.md), run as written.

The dev system is started the way ``make dev`` starts it (``python -m controlplane.cli dev``, its
own control plane, in a temporary folder), watched by the pool invariant monitor. Then every ``$``
line of the walkthrough's ``console`` blocks runs in order, as a reader types it in a second
terminal: ``kubectl apply -f manifests/samples/`` (the node stand-in plays the router's proxy pods
as the router's ServiceAccount), the waits for the router and the pool's default, ``kubectl get
modelpool-all``, a watch of the pool in the background, a chat completion through the printed
address for the resident model and one for the parked model that swaps the pool, ``kubectl
describe mpool`` and the swap's trace from Jaeger. Each command must succeed and print what the
page shows of its output (the first word of each line shown in full; the trace's lines whole), the
router must answer each request with the model asked for, and the watch must see the swap. Ctrl-C
stops everything and the logs are kept where it says.

The page is read, not copied here, so a command that stops working fails this test, and so does
a page that no longer has the steps it checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread
import pytest

from controlplane.api.v1alpha1 import ModelPool
from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.standin.process import die_with_parent
from tests.e2e.invariants import PoolInvariantMonitor
from tests.e2e.kubectl import REPO
from tests.e2e.waiting import eventually, until

pytestmark = pytest.mark.anyio

NAMESPACE = "default"
START_TIMEOUT = 180.0


class DevProcess:
    """``controlplane dev`` in ``cwd``, its output read line by line as it comes."""

    def __init__(self, cwd: Path) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "dev"],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))},
            preexec_fn=die_with_parent,
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            self._new.put(line)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first output line (seen or to come) matching ``pattern``."""
        deadline = time.monotonic() + timeout
        compiled = re.compile(pattern)
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if found := compiled.search(line):
                    return found
            seen = len(self.lines)
            left = deadline - time.monotonic()
            if left <= 0 or (self.popen.poll() is not None and self._new.empty()):
                raise AssertionError(f"no {pattern!r} in the output:\n{self.output()}")
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=min(left, 0.5))

    def output(self) -> str:
        return "\n".join(self.lines[-200:])

    def interrupt(self, timeout: float = 60.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        return self.popen.returncode


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevProcess]:
    process = DevProcess(tmp_path)
    try:
        yield process
    finally:
        process.interrupt()
        print(f"--- controlplane dev output (last lines)\n{process.output()}")


#: The walkthrough this module runs as written.
WALKTHROUGH = REPO / "docs" / "walkthrough.md"
#: What the walkthrough has the reader copy from ``make dev``'s output, by variable, and the line
#: it is copied from: the test gives each the address this run printed (the page shows an example).
COPIED: Final = {
    "ROUTER": rf"router {NAMESPACE}/chat answers at (http://\S+)",
    "JAEGER": r"^traces: Jaeger at (http://\S+)",
}
#: A variable assignment: ``NAME=VALUE`` or ``export NAME=VALUE``.
ASSIGNMENT: Final = re.compile(r"^(?:export )?([A-Z][A-Z0-9_]*)=(.*)$")
#: What marks a left-out part of an output the page shows.
ABBREVIATED: Final = "…"
#: The seconds one walkthrough command may take (its `kubectl wait`s have shorter timeouts).
COMMAND_TIMEOUT = 180.0
#: A file to append every command's output to, when set: what docs/walkthrough.md's outputs are
#: taken from (`MODELPOOL_WALKTHROUGH_CAPTURE=walkthrough.txt pytest tests/e2e/test_dev.py`).
CAPTURE_ENV: Final = "MODELPOOL_WALKTHROUGH_CAPTURE"
#: The seconds the trace's spans get to arrive in Jaeger (they are exported in batches).
TRACE_TIMEOUT = 30.0


@dataclass
class Step:
    """One ``$`` line of a ``console`` block of the walkthrough, and the output shown under it."""

    command: str
    shown: list[str] = field(default_factory=list)

    def full_lines(self) -> list[str]:
        """The output lines shown in full (no ``…`` in them), without surrounding spaces."""
        return [line.strip() for line in self.shown if line.strip() and ABBREVIATED not in line]

    def first_words(self) -> list[str]:
        """The first word of each output line whose first word is shown in full: the name of
        each object a kubectl listing shows, the field or event type of each line of a
        ``describe``, the start of a JSON answer."""
        words = [line.split()[0] for line in self.shown if line.strip()]
        return [word for word in words if ABBREVIATED not in word]


def walkthrough_steps(markdown: str) -> list[Step]:
    """Every ``$`` line of the ``console`` blocks of ``markdown``, in order, with its output."""
    steps: list[Step] = []
    block: str | None = None
    for line in markdown.splitlines():
        if line.startswith("```"):
            block = line[3:].strip() if block is None else None
            continue
        if block != "console":
            continue
        if line.startswith("$ "):
            steps.append(Step(line[2:].strip()))
        elif steps:
            steps[-1].shown.append(line)
    return steps


def requested_model(command: str) -> str:
    """The model a walkthrough ``curl`` asks for (the ``model`` of its ``-d`` body)."""
    found = re.search(r'"model":"([^"]+)"', command)
    assert found is not None, command
    return found[1]


def test_the_walkthrough_has_the_steps_this_module_checks() -> None:
    """The page still holds what the e2e test below relies on (read only: no cluster needed)."""
    commands = [step.command for step in walkthrough_steps(WALKTHROUGH.read_text())]
    assert "make dev" not in commands  # the first terminal's blocks are `text`: the fixture runs it
    assert "kubectl apply -f manifests/samples/" in commands
    assert "kubectl get modelpool-all" in commands
    assert [c for c in commands if c.endswith(" -w")] == ["kubectl get mpool -w"]
    assert {m[1] for c in commands if (m := ASSIGNMENT.match(c))} >= set(COPIED)
    chats = [c for c in commands if "/v1/chat/completions" in c]
    assert [requested_model(c) for c in chats] == ["llama-3-8b", "qwen-2-7b"]
    assert any(c.startswith("kubectl describe mpool") for c in commands)
    assert any("/api/traces/" in c for c in commands)


class Walkthrough:
    """The walkthrough's commands, run as the reader runs them in the second terminal: in
    ``workdir`` (where ``make dev`` ran, the repository's ``manifests`` and ``hack`` beside it),
    each with ``bash -c``, in the environment the page's assignments built."""

    def __init__(self, workdir: Path, dev: DevProcess) -> None:
        self.workdir = workdir
        self.dev = dev
        # A proxy the environment names must not carry curl's requests to loopback.
        self.env = {**os.environ, "PWD": str(workdir), "no_proxy": "127.0.0.1,localhost"}
        self.env["NO_PROXY"] = self.env["no_proxy"]
        self.assigned: set[str] = set()
        self.watches: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    async def bash(self, command: str) -> str:
        """Run ``command``, which must succeed; return its stdout, then its stderr."""
        with anyio.fail_after(COMMAND_TIMEOUT):
            done = await anyio.run_process(
                ["bash", "-c", command], cwd=self.workdir, env=self.env, check=False
            )
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        assert done.returncode == 0, f"$ {command}\nexit {done.returncode}\n{out}\n{err}"
        if capture := os.environ.get(CAPTURE_ENV):  # what the page's outputs are taken from
            async with await anyio.open_file(capture, "a") as shown:
                await shown.write(f"$ {command}\n{out}{err}\n")
        return out + err

    async def assign(self, name: str, value: str) -> None:
        if name in COPIED:
            pattern = COPIED[name]
            assert re.fullmatch(r"http://\S+", value), f"{name}={value}: not an example address"
            found = await anyio.to_thread.run_sync(lambda: self.dev.wait_for(pattern, 60))
            self.env[name] = found[1]
        else:
            self.env[name] = await self.bash(f'{name}={value}; printf %s "${name}"')
        self.assigned.add(name)

    def watch(self, command: str) -> None:
        """Start a ``-w`` command in the background, its output into a file."""
        log = self.workdir / f"watch-{len(self.watches)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                ["bash", "-c", command],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.watches.append((command, popen, log))

    def watched(self, command: str) -> str:
        """What the background ``command`` has printed so far."""
        return next(log.read_text(errors="replace") for c, _, log in self.watches if c == command)

    def stop_watches(self) -> None:
        for _, popen, _ in self.watches:
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGTERM)
                try:
                    popen.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(popen.pid, signal.SIGKILL)
                    popen.wait()

    async def run(self, step: Step) -> None:
        """One step: an assignment, a background watch, or a command whose output must show
        what the page shows: the first word of each line (where the page shows it), and for a
        chat completion the model asked for; for the trace, every line shown in full, once its
        spans have arrived."""
        if assigned := ASSIGNMENT.match(step.command):
            await self.assign(assigned[1], assigned[2])
        elif step.command.endswith(" -w"):
            self.watch(step.command)
        elif "/api/traces/" in step.command:

            async def complete() -> bool:
                printed = {line.strip() for line in (await self.bash(step.command)).splitlines()}
                missing = [line for line in step.full_lines() if line not in printed]
                assert not missing, f"not in the trace (yet): {missing}"
                return True

            await eventually(complete, timeout=TRACE_TIMEOUT, interval=0.5, what="the trace")
        else:
            out = await self.bash(step.command)
            missing = [word for word in step.first_words() if word not in out]
            assert not missing, (
                f"$ {step.command}\nshown on the page, not printed: {missing}\n{out}"
            )
            if "/v1/chat/completions" in step.command:
                answer = json.loads(out.splitlines()[0])
                assert answer["model"] == requested_model(step.command), out


async def test_the_walkthrough_runs_as_written_on_make_dev(dev: DevProcess, tmp_path: Path) -> None:
    """docs/walkthrough.md on ``controlplane dev``, under the pool invariant monitor: the samples
    applied, the pool watched while a request for each member swaps it, its status and the swap's
    trace read; then Ctrl-C stops everything and the logs are where it said."""
    steps = walkthrough_steps(WALKTHROUGH.read_text())
    kubeconfig = Path(dev.wait_for(r"^kubeconfig: (\S+)", START_TIMEOUT)[1])
    logs = Path(dev.wait_for(r"^logs: (\S+)", 5)[1])
    assert kubeconfig.name == ".dev-kubeconfig"
    for name in ("manifests", "hack"):  # the reader runs the commands from the repository's root
        (tmp_path / name).symlink_to(REPO / name)
    walkthrough = Walkthrough(tmp_path, dev)
    monitor = PoolInvariantMonitor(ClientConfig.from_kubeconfig(kubeconfig), NAMESPACE).start()
    try:
        for step in steps:
            await walkthrough.run(step)
        assert walkthrough.assigned >= set(COPIED)
        async with KubeClient(ClientConfig.from_kubeconfig(kubeconfig)) as admin:
            pool = await admin.get(ModelPool.resource(), "gpu-0", NAMESPACE)
        status = pool.get("status") or {}
        assert status.get("residentMember") == "qwen-2-7b", status
        slots = {m["name"]: m.get("slot") for m in status.get("members") or []}
        assert slots == {"llama-3-8b": "Released", "qwen-2-7b": "Granted"}, status

        def swap_watched() -> bool:
            """The watch saw the pool Swapping, then qwen-2-7b its Ready resident."""
            lines = walkthrough.watched("kubectl get mpool -w").splitlines()
            return any("Swapping" in line.split() for line in lines) and any(
                '["qwen-2-7b"]' in line and "Ready" in line.split() for line in lines
            )

        await until(swap_watched, timeout=30, interval=0.2, what="the watch to show the swap")
        monitor.settle()
    finally:
        walkthrough.stop_watches()
        for command, _, log in walkthrough.watches:
            print(f"--- $ {command}\n{log.read_text(errors='replace')}")
        monitor.stop()
        print(monitor.report())
    monitor.check()
    assert dev.interrupt() == 0, dev.output()
    kept = Path(dev.wait_for(r"logs kept in (\S+)", 10)[1])
    assert kept == logs
    assert_logs_kept(logs)


def assert_logs_kept(logs: Path) -> None:
    """The stand-in's, the operator's, the proxies' and the control plane's logs are all there."""
    assert (logs / "sim-node.log").is_file()
    assert (logs / "operator-local.log").is_file()
    assert (logs / "controlplane" / "kube-apiserver.log").is_file()
    proxies = sorted(p.name for p in (logs / "simulators").glob("default_chat-proxy-*.log"))
    assert len(proxies) >= 2, proxies  # spec.proxy.replicas: 2
