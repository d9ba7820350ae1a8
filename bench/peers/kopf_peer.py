"""The kopf peer of the controller benchmark (protocol in bench/README.md).

kopf runs as its documentation recommends for a single operator without peers: standalone (no
peering objects), no Kubernetes events posted, warnings-only logging, one namespace, logging in
from the kubeconfig. The reconciler is an ``@kopf.on.event`` handler: kopf calls it for every
watch event and for every object of its initial listing, and it writes nothing back.
``@kopf.on.update`` would be the more usual handler, but kopf stores its progress and the
last-handled state in annotations for it, so every update would cost a PATCH and a second watch
event: that measures kopf's bookkeeping rather than its event path, so the lighter handler is the
one fairest to kopf.

kopf keeps no cache of objects by itself, only a little state per object. With ``--with-index``
(the benchmark's peer ``kopf-index``) an ``@kopf.index`` also keeps each object's latest body by
``namespace/name``, kopf's own way for a handler to look other objects up, so that kopf holds what
the other peers hold; kopf then runs no handler until every listed object is indexed.

kopf's handlers are coroutines on one event loop (a task per object, one thread), so a single
worker is kopf's normal shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import kopf

from bench.peers import protocol


async def run(args: Any, with_index: bool) -> None:
    tally = protocol.Tally(args.expect, args.target, args.replay_target)
    registry = kopf.OperatorRegistry()
    selector = {"group": args.group, "version": args.version, "plural": args.plural}

    def index_objects(
        namespace: str | None, name: str | None, body: kopf.Body, **_: Any
    ) -> dict[str, dict[str, Any]]:
        return {f"{namespace}/{name}": dict(body)}

    async def reconcile(
        type: str | None, namespace: str | None, name: str | None, spec: kopf.Spec, **_: Any
    ) -> None:
        if type == "DELETED":
            return
        tally.reconciled(f"{namespace}/{name}", spec.get("round"))
        # kopf has no "cache synced" signal: its handler having seen every object is the closest.
        if not tally.synced and len(tally.seen) >= tally.expect:
            tally.mark_synced(len(tally.seen))

    kopf.on.login(registry=registry)(kopf.login_with_kubeconfig)
    if with_index:
        kopf.index(**selector, id="objects", registry=registry)(index_objects)
    kopf.on.event(**selector, id="reconcile", registry=registry)(reconcile)

    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.peering.standalone = True
    stop = asyncio.Event()

    async def progress() -> None:
        while True:
            await asyncio.sleep(1.0)
            tally.progress()

    async def stop_on_stdin_close() -> None:
        await protocol.stdin_closed()
        stop.set()

    helpers = [asyncio.create_task(progress()), asyncio.create_task(stop_on_stdin_close())]
    try:
        await kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            clusterwide=False,
            namespaces=[args.namespace],
            stop_flag=stop,
        )
    finally:
        for helper in helpers:
            helper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await helper


def main() -> None:
    args = protocol.parse_args(description=__doc__)
    with_index = "--with-index" in sys.argv[1:]
    kopf.configure(quiet=True)  # what `kopf run --quiet` does: warnings and errors only
    protocol.emit("ready")
    asyncio.run(run(args, with_index))


if __name__ == "__main__":
    main()
