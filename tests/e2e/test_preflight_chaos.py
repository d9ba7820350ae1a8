"""Chaos: 20 preflights while kube-apiserver is frozen (SIGSTOP) for 25 s, then resumed.

A dedicated control plane (never the session's: other tests use that one) logs every
SelfSubjectAccessReview to an audit log. While the process is stopped the kernel still completes
TCP handshakes into the listen backlog, so clients see timeouts, not refused connections: a hung
server, as in production. Audit events carry ``requestReceivedTimestamp``, stamped when the API
server actually reads the request, so nothing is stamped during the freeze; we time the resume
ourselves (``SIGCONT`` sent at a wall-clock instant) and count the reviews whose timestamp falls
in the first second after it, and in the busiest one-second window after it.

The same 20 preflights run twice: with equal jitter (each its own random source), and with a
source that always answers the top of the range (the fixed schedule a naive retry loop has).
Three more, with a retry budget too short for the stall, show the two other endings: ALLOWED from
a stale cache (with a warning) and INCONCLUSIVE (saying it is not a denial).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest

from controlplane.controllers import rbac
from controlplane.envtest import ControlPlane
from controlplane.preflight import (
    DEFAULT_POLICY,
    BackoffPolicy,
    Component,
    Outcome,
    Preflight,
    Source,
    Verdict,
    VerdictCache,
)
from controlplane.preflight.backoff import RandomSource, no_jitter
from controlplane.preflight.verdict import NOT_A_DENIAL
from controlplane.runtime.config import ClientConfig

NAMESPACE = "chaos"
FLEET = 20
STALL_SECONDS = 25.0
#: The impatient extras give up long before the API server resumes.
IMPATIENT = BackoffPolicy(budget=6.0)
#: Upper bound for one whole run; the stall plus the default policy's worst case after it.
RUN_TIMEOUT = 70.0

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources:
      - group: authorization.k8s.io
        resources: ["selfsubjectaccessreviews"]
  - level: None
"""
USERS = ("chaos-jitter", "chaos-fixed", "chaos-impatient")


@dataclass
class ChaosPlane:
    plane: ControlPlane
    audit_log: Path

    def config_for(self, user: str) -> ClientConfig:
        return ClientConfig.from_kubeconfig(self.plane.kubeconfig_for_user(user))

    def dead_handshakes(self) -> int:
        """TLS handshakes the API server failed (clients that had given up), from its metrics."""
        with self.plane.admin_http() as http:
            text = http.get("/metrics").text
        for line in text.splitlines():
            if line.startswith("apiserver_tls_handshake_errors_total "):
                return int(float(line.split()[1]))
        return 0

    def received(self, user: str) -> list[float]:
        """Wall-clock receive times of every review ``user`` sent, one per request."""
        times: dict[str, float] = {}
        for line in self.audit_log.read_bytes().splitlines():
            event = msgspec.json.decode(line)
            if event.get("user", {}).get("username") != user:
                continue
            stamp = datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
            times[event["auditID"]] = stamp
        return sorted(times.values())


def _grant(http: httpx.Client) -> None:
    """The router-proxy's declared rules in NAMESPACE, for every chaos user."""
    base = "/apis/rbac.authorization.k8s.io/v1/namespaces"
    documents = [
        (
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        ),
        (
            f"{base}/{NAMESPACE}/roles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "router-proxy"},
                "rules": [r.to_manifest() for r in rbac.ROUTER_PROXY_RULES],
            },
        ),
        (
            f"{base}/{NAMESPACE}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "router-proxy"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "router-proxy",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}
                    for u in USERS
                ],
            },
        ),
    ]
    for path, document in documents:
        http.post(path, json=document).raise_for_status()


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosPlane]:
    folder = tmp_path_factory.mktemp("chaos-audit")
    policy = folder / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit_log = folder / "audit.log"
    plane = ControlPlane(
        extra_apiserver_args=(f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}")
    ).start()
    try:
        with plane.admin_http() as http:
            _grant(http)
        yield ChaosPlane(plane, audit_log)
    finally:
        plane.stop()


@dataclass
class Figures:
    """What reached the API server after it resumed, for one identity."""

    first_second: int
    busiest_second: int
    after_resume: int
    during_stall: int
    spread_seconds: float
    #: Reviews per half second after the resume, for the first eight seconds.
    per_half_second: list[int]

    def __str__(self) -> str:
        return (
            f"{self.first_second} reviews in the first second after resume, "
            f"{self.busiest_second} in the busiest second, {self.after_resume} in all after "
            f"resume over {self.spread_seconds:.1f} s, {self.during_stall} stamped during the "
            f"stall; per 0.5 s after resume: {self.per_half_second}"
        )


def figures(received: list[float], stopped_at: float, resumed_at: float) -> Figures:
    after = [t for t in received if t >= resumed_at]
    busiest = max((sum(1 for u in after if t <= u < t + 1.0) for t in after), default=0)
    return Figures(
        first_second=sum(1 for t in after if t < resumed_at + 1.0),
        busiest_second=busiest,
        after_resume=len(after),
        during_stall=sum(1 for t in received if stopped_at <= t < resumed_at),
        spread_seconds=(after[-1] - after[0]) if after else 0.0,
        per_half_second=[
            sum(1 for t in after if step / 2 <= t - resumed_at < (step + 1) / 2)
            for step in range(16)
        ],
    )


async def freeze_and_run(
    chaos: ChaosPlane, preflights: list[Preflight]
) -> tuple[list[Verdict], float, float]:
    """Stop kube-apiserver, start every preflight, resume it after STALL_SECONDS."""
    apiserver = chaos.plane.processes["kube-apiserver"]
    verdicts: list[Verdict | None] = [None] * len(preflights)
    dead_before = chaos.dead_handshakes()

    async def run(index: int, preflight: Preflight) -> None:
        verdicts[index] = await preflight.run()

    apiserver.signal(signal.SIGSTOP)
    stopped_at = time.time()
    resumed_at = float("inf")
    try:
        with anyio.fail_after(RUN_TIMEOUT):
            async with anyio.create_task_group() as group:
                for index, preflight in enumerate(preflights):
                    group.start_soon(run, index, preflight)
                await anyio.sleep(STALL_SECONDS)
                resumed_at = time.time()
                apiserver.signal(signal.SIGCONT)
    finally:
        apiserver.signal(signal.SIGCONT)
    assert all(v is not None for v in verdicts)
    dead = chaos.dead_handshakes() - dead_before
    print(f"\nabandoned connections the API server handshook after the resume: {dead}")
    return [v for v in verdicts if v is not None], stopped_at, resumed_at


def fleet(
    chaos: ChaosPlane, user: str, cache_root: Path, uniform: list[RandomSource]
) -> list[Preflight]:
    config = chaos.config_for(user)
    return [
        Preflight(
            config,
            Component.ROUTER_PROXY,
            NAMESPACE,
            cache=VerdictCache(cache_root / f"{user}-{index}"),
            policy=DEFAULT_POLICY,
            uniform=uniform[index],
        )
        for index in range(FLEET)
    ]


def assert_rode_through(verdicts: list[Verdict]) -> None:
    for verdict in verdicts:
        assert verdict.outcome is not Outcome.DENIED, verdict.message
        if verdict.outcome is Outcome.INCONCLUSIVE:
            assert NOT_A_DENIAL in verdict.message
    # The default budget covers the stall with room to spare: every one ends ALLOWED, live.
    assert [(v.outcome, v.source) for v in verdicts] == [(Outcome.ALLOWED, Source.LIVE)] * FLEET


async def test_fleet_with_jitter_rides_through_a_frozen_apiserver(
    chaos: ChaosPlane, tmp_path: Path
) -> None:
    started = time.monotonic()
    preflights = fleet(
        chaos, "chaos-jitter", tmp_path, [random.Random(seed).uniform for seed in range(FLEET)]
    )
    impatient_config = chaos.config_for("chaos-impatient")
    impatient = [
        Preflight(
            impatient_config,
            Component.ROUTER_PROXY,
            NAMESPACE,
            cache=VerdictCache(tmp_path / f"impatient-{index}"),
            policy=IMPATIENT,
        )
        for index in range(3)
    ]
    # One of them was ALLOWED two hours ago: past fresh, within grace.
    impatient[0].cache.store(impatient[0].key, time.time() - 2 * 3600)

    verdicts, stopped_at, resumed_at = await freeze_and_run(chaos, preflights + impatient)

    assert_rode_through(verdicts[:FLEET])
    cached, *unlucky = verdicts[FLEET:]
    assert (cached.outcome, cached.source) == (Outcome.ALLOWED, Source.STALE_CACHE)
    assert any("2.0 h old" in w for w in cached.warnings)
    for verdict in unlucky:
        assert verdict.outcome is Outcome.INCONCLUSIVE
        assert "This is NOT a permissions denial" in verdict.message
        assert "DENIED" not in verdict.message

    measured = figures(chaos.received("chaos-jitter"), stopped_at, resumed_at)
    assert measured.during_stall == 0  # nothing is stamped while the process is frozen
    assert measured.after_resume >= FLEET * len(preflights[0].permissions)
    print(f"\nwith jitter: {measured}; test took {time.monotonic() - started:.1f} s")


async def test_fleet_without_jitter_rides_through_but_in_lockstep(
    chaos: ChaosPlane, tmp_path: Path
) -> None:
    started = time.monotonic()
    preflights = fleet(chaos, "chaos-fixed", tmp_path, [no_jitter] * FLEET)

    verdicts, stopped_at, resumed_at = await freeze_and_run(chaos, preflights)

    assert_rode_through(verdicts)
    measured = figures(chaos.received("chaos-fixed"), stopped_at, resumed_at)
    assert measured.during_stall == 0
    assert measured.after_resume >= FLEET * len(preflights[0].permissions)
    print(f"\nwithout jitter: {measured}; test took {time.monotonic() - started:.1f} s")
