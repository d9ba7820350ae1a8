"""The KV cache carried across a swap, over the local tier with real llama-server members: the
prompt the first request after a swap back processes, with and without ``spec.kvCache``, and the
time the save and the restore add to the swap.

Two runs of the same sequence (:func:`bench.real_pool.alternate`: ``tiny-a``, then ``--switches``
requests alternating ``tiny-b`` and ``tiny-a`` through the router, each followed by a second
request to the same model), each on a fresh local system (:func:`bench.real_pool.real_pool`):
``spec.kvCache`` off on both members, then on on both. Every request carries the same prompt of
about 420 tokens. The first switch (to ``b``, which has served nothing yet) is not a swap *back*
and is left out of the figures.

* prompt tokens processed: the server's ``timings.prompt_n`` (and ``cache_n``) of the request
  that caused the swap, as answered through the router;
* the save and the restore: ``status.kvCache.lastSave`` / ``lastRestore``
  ``durationMilliseconds`` as the InferenceService controller recorded them for that swap (the
  drained member's save, the target's restore; all slots, HTTP included). The save runs before
  the drained member's Deployment is lowered and the restore before the target counts Ready, so
  each adds its duration to the swap;
* the swap as the client sees it: the time of the request that caused it (held by the proxy,
  then answered), and of the next request (nothing to swap) for scale.

    KUBEBUILDER_ASSETS=$(hack/build-controlplane.sh 2>/dev/null | tail -1) \\
      .venv/bin/python -m bench.kv_cache_swap \\
      --server $(hack/build-llama-server.sh 2>/dev/null | tail -1) [--switches 10]

or ``make bench-kv-swap`` (``BENCH_ARGS="--switches 20"``).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.real_pool import MEMBERS, RealPool, Switch, alternate, real_pool


@dataclass(frozen=True)
class SwapRecord:
    """One switch: what the client saw, and what the operator recorded of its save and restore."""

    switch: Switch
    save_ms: int | None
    restore_ms: int | None


class KvRecords:
    """Reads the members' ``status.kvCache`` after each switch and keeps the records that are
    new since the last look (a record is its pod and time)."""

    def __init__(self, pool: RealPool) -> None:
        self.pool = pool
        self.seen: set[tuple[str, str, str, str]] = set()
        self.records: list[SwapRecord] = []

    def __call__(self, switch: Switch) -> None:
        target = switch.cold.model.removeprefix("tiny-")
        drained = next(m for m in MEMBERS if m != target)
        save = self._new(drained, "lastSave")
        restore = self._new(target, "lastRestore")
        self.records.append(SwapRecord(switch, save, restore))

    def _new(self, member: str, field: str) -> int | None:
        status = self.pool.get("isvc", member).get("status") or {}
        record = (status.get("kvCache") or {}).get(field) or {}
        key = (member, field, str(record.get("pod")), str(record.get("time")))
        if not record or key in self.seen:
            return None
        self.seen.add(key)
        if record.get("outcome") != "Succeeded":
            raise SystemExit(f"{member} {field}: {record.get('outcome')}: {record.get('message')}")
        duration: int = record["durationMilliseconds"]
        return duration


def run(server: Path, *, kv_cache: bool, switches: int) -> list[SwapRecord]:
    with real_pool(server, kv_cache=kv_cache) as pool:
        records = KvRecords(pool)
        alternate(pool.url, switches, after_switch=records)
        return records.records


def _median(values: Sequence[float | None]) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    low, high, mid = min(present), max(present), statistics.median(present)
    return f"{mid:g} ({low:g} to {high:g})"


def report(runs: dict[str, list[SwapRecord]]) -> None:
    backs = {name: records[1:] for name, records in runs.items()}  # the swaps *back*
    print(f"swaps back per run: {', '.join(f'{k} {len(v)}' for k, v in backs.items())}; "
          "median (min to max)")  # fmt: skip
    print("| measure | " + " | ".join(backs) + " |")
    print("|---" * (len(backs) + 1) + "|")

    def cold(r: SwapRecord) -> dict[str, Any]:
        return r.switch.cold.timings

    rows: list[tuple[str, Callable[[SwapRecord], float | None]]] = [
        ("prompt tokens processed (prompt_n), first request after the swap back",
         lambda r: cold(r)["prompt_n"]),
        ("prompt tokens from the cache (cache_n)", lambda r: cold(r).get("cache_n", 0)),
        ("prompt processing on the server, ms", lambda r: round(cold(r)["prompt_ms"], 2)),
        ("the request that swapped, through the router, ms",
         lambda r: round(r.switch.cold.seconds * 1000)),
        ("the next request (no swap), ms", lambda r: round(r.switch.warm.seconds * 1000)),
        ("save of the drained member (lastSave), ms", lambda r: r.save_ms),
        ("restore into the target (lastRestore), ms", lambda r: r.restore_ms),
    ]  # fmt: skip
    for label, value in rows:
        cells = [_median([value(r) for r in records]) for records in backs.values()]
        print(f"| {label} | " + " | ".join(cells) + " |")
    for name, records in runs.items():
        print(f"\n{name}, every switch (target: prompt_n/cache_n, request ms, save ms, restore ms)")
        for r in records:
            t = r.switch.cold.timings
            print(f"  {r.switch.cold.model}: {t['prompt_n']}/{t.get('cache_n', 0)}, "
                  f"{r.switch.cold.seconds * 1000:.0f}, {r.save_ms}, {r.restore_ms}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, required=True, help="the llama-server binary")
    parser.add_argument("--switches", type=int, default=10, help="switches per run (>= 2)")
    args = parser.parse_args()
    if args.switches < 2:
        parser.error("--switches must be at least 2: the first switch is not a swap back")
    runs = {
        "kvCache off": run(args.server, kv_cache=False, switches=args.switches),
        "kvCache on": run(args.server, kv_cache=True, switches=args.switches),
    }
    report(runs)


if __name__ == "__main__":
    main()
