"""Our framework as a benchmark peer: informer → workqueue → one worker → a trivial reconciler.

It follows the protocol in ``bench/README.md`` (see :mod:`bench.peers.protocol`): the reconciler
reads the object from the informer's cache, as a real one would, and counts it; one worker, as
controller-runtime's default ``MaxConcurrentReconciles``.
"""

from __future__ import annotations

import argparse

import anyio

from bench.peers import protocol
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.controller import Request, Result
from controlplane.runtime.informer import Informer
from controlplane.runtime.manager import Manager, ManagerOptions
from controlplane.runtime.resources import Resource


class CountingReconciler:
    def __init__(self, informer: Informer, tally: protocol.Tally) -> None:
        self.informer = informer
        self.tally = tally

    async def reconcile(self, request: Request) -> Result:
        key = str(request)
        obj = self.informer.store.get(key)
        if obj is not None:
            self.tally.reconciled(key, (obj.get("spec") or {}).get("round"))
        return Result()


async def run(args: argparse.Namespace) -> None:
    tally = protocol.Tally(args.expect, args.target, args.replay_target)
    manager = Manager(
        ClientConfig.load(),
        ManagerOptions(name="bench", probe_address=None, metrics_address=None),
    )
    resource = Resource(args.group, args.version, args.plural, args.kind)
    informer = manager.informer(resource, args.namespace)
    controller = manager.new_controller("bench", CountingReconciler(informer, tally))
    controller.for_(informer)

    async def report_sync() -> None:
        await informer.wait_for_sync()
        tally.mark_synced(len(informer.store))

    async def progress() -> None:
        while True:
            await anyio.sleep(1.0)
            tally.progress()

    async with anyio.create_task_group() as group:
        group.start_soon(manager.run)
        group.start_soon(report_sync)
        group.start_soon(progress)
        await protocol.stdin_closed()
        group.cancel_scope.cancel()


def main() -> None:
    args = protocol.parse_args(description=__doc__)
    protocol.emit("ready")
    anyio.run(run, args)


if __name__ == "__main__":
    main()
