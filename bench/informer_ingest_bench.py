"""Informer ingest rate and cache memory, no network: watch bytes → decoded → cached → indexed.

Run: ``.venv/bin/python -m bench.informer_ingest_bench [--events 30000]``.

The input is a stream of watch lines for realistic Pods (about 1.9 KB each, as in
``shared/notes/performance.md``), fed in 64 KiB chunks through the client's own line splitter and
decoder and the informer's event path (transform, store, three indexes). No handler is attached,
so this is the cost an informer adds per event before any controller sees it. The reference is
the decode ceiling measured in the same process: ``msgspec.json.decode`` alone over the same lines.

Memory: ``tracemalloc`` measures what the store holds for N distinct Pods, against the Pods' raw
JSON size as the API server sends them (``managedFields`` included, since that is what arrives).
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec

from controlplane.runtime.client import _events
from controlplane.runtime.informer import Informer
from controlplane.runtime.resources import PODS

CHUNK = 64 * 1024


def realistic_pod(i: int, version: int) -> dict[str, Any]:
    """A Pod shaped like a Deployment's replica, about 1.9 KB of JSON."""
    name = f"web-7d4b9c6f8-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": f"team-{i % 10}",
            "uid": f"5f0c1c2e-8a4b-4c1d-9e2f-{i:012d}",
            "resourceVersion": str(version),
            "generateName": "web-7d4b9c6f8-",
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c6f8", "tier": "frontend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T07:59:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d4b9c6f8",
                    "uid": "0a1b2c3d-4e5f-6789-abcd-ef0123456789",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-30T08:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "registry.example/web:1.4.2",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "MODE", "value": "production"}],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets",
                            "readOnly": True,
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": f"node-{i % 4}",
            "schedulerName": "default-scheduler",
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-30T08:00:05Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.4",
            "podIP": f"10.244.{i % 250}.{i % 200}",
            "startTime": "2026-11-30T08:00:01Z",
            "containerStatuses": [
                {
                    "name": "web",
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example/web:1.4.2",
                    "started": True,
                    "state": {"running": {"startedAt": "2026-11-30T08:00:04Z"}},
                }
            ],
        },
    }


def watch_lines(events: int, distinct: int) -> list[bytes]:
    """``events`` watch lines over ``distinct`` Pods: first ADDED, then MODIFIED."""
    lines = []
    for n in range(events):
        kind = "ADDED" if n < distinct else "MODIFIED"
        lines.append(
            msgspec.json.encode({"type": kind, "object": realistic_pod(n % distinct, n + 1)})
        )
    return lines


class _Stream:
    """What ``_events`` reads from an HTTP response: the body in chunks."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), CHUNK):
            yield self.body[start : start + CHUNK]


async def ingest(lines: list[bytes]) -> tuple[float, Informer]:
    informer = Informer(None, PODS)  # type: ignore[arg-type]  # no client: events are fed in
    body = b"\n".join(lines) + b"\n"
    started = time.perf_counter()
    async for event in _events(_Stream(body)):  # type: ignore[arg-type]
        informer._apply(event.type, event.object)
    return time.perf_counter() - started, informer


def decode_ceiling(lines: list[bytes]) -> float:
    started = time.perf_counter()
    for line in lines:
        msgspec.json.decode(line)
    return time.perf_counter() - started


def cache_memory(distinct: int) -> tuple[int, int]:
    """(bytes the store holds, raw JSON bytes of the same Pods)."""
    lines = watch_lines(distinct, distinct)
    raw = sum(len(msgspec.json.encode(realistic_pod(i, i + 1))) for i in range(distinct))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _, informer = anyio.run(ingest, lines)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(informer.store) == distinct
    del informer
    return held, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--distinct", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lines = watch_lines(args.events, args.distinct)
    size = sum(len(line) for line in lines) / len(lines)
    best_ingest = min(anyio.run(ingest, lines)[0] for _ in range(args.rounds))
    best_decode = min(decode_ceiling(lines) for _ in range(args.rounds))
    ingest_rate = args.events / best_ingest
    decode_rate = args.events / best_decode
    held, raw = cache_memory(args.distinct)
    print(f"watch line size: {size:.0f} B average over {args.events} events")
    print(f"decode ceiling (msgspec.json.decode only): {decode_rate:,.0f} events/s")
    print(
        f"informer ingest (split, decode, transform, cache, 3 indexes): {ingest_rate:,.0f} "
        f"events/s = {ingest_rate / decode_rate:.0%} of the ceiling, "
        f"{1e6 / ingest_rate:.1f} µs/event"
    )
    print(
        f"cache memory for {args.distinct} Pods: {held / args.distinct:,.0f} B/object vs raw JSON "
        f"{raw / args.distinct:,.0f} B/object = {held / raw:.2f}x"
    )


if __name__ == "__main__":
    main()
