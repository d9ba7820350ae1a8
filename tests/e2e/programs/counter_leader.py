"""A manager that, while it leads, appends to a shared counter with optimistic writes.

Run as a separate process by the leader-election test:
``python -m tests.e2e.programs.counter_leader KUBECONFIG NAMESPACE IDENTITY``.
Each write appends ``identity:term`` to the counter's history, where ``term`` is the Lease's
``leaseTransitions`` when this process became leader. Two leaders at once would show up in the
history as interleaved terms. A write the manager's fence refuses (``NotLeading``: this process
was paused past its Lease) is retried as a controller would after a failed reconcile, until the
renew loop ends the leadership.
"""

from __future__ import annotations

import contextlib
import logging
import sys

import anyio

from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.errors import Conflict, NotFound, NotLeading
from controlplane.runtime.leaderelection import LeaderElectionConfig, LeadershipLost
from controlplane.runtime.manager import Manager, ManagerOptions
from controlplane.runtime.resources import CONFIGMAPS, LEASES

LEASE = "counter-leader"
COUNTER = "counter"
#: Short timings so a 60 s test sees many handovers.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.5
WRITE_INTERVAL = 0.05


class CounterWriter:
    needs_leader_election = True

    def __init__(self, client: KubeClient, namespace: str, identity: str) -> None:
        self.client, self.namespace, self.identity = client, namespace, identity

    async def start(self) -> None:
        lease = await self.client.get(LEASES, LEASE, self.namespace)
        if lease["spec"].get("holderIdentity") != self.identity:
            return
        term = int(lease["spec"].get("leaseTransitions") or 0)
        while True:
            with contextlib.suppress(NotLeading):
                await self._append(f"{self.identity}:{term}")
            await anyio.sleep(WRITE_INTERVAL)

    async def _append(self, entry: str) -> None:
        while True:
            try:
                counter = await self.client.get(CONFIGMAPS, COUNTER, self.namespace)
            except NotFound:
                counter = {"metadata": {"name": COUNTER, "namespace": self.namespace}, "data": {}}
                with contextlib.suppress(Conflict):  # the other candidate made it first
                    await self.client.create(CONFIGMAPS, counter)
                continue
            data = counter.setdefault("data", {})
            history = data.get("history", "")
            data["history"] = f"{history} {entry}".strip()
            try:
                await self.client.update(CONFIGMAPS, counter)  # optimistic: carries resourceVersion
                return
            except Conflict:
                continue


async def main(kubeconfig: str, namespace: str, identity: str) -> int:
    config = ClientConfig.from_kubeconfig(kubeconfig)
    election = LeaderElectionConfig(
        LEASE, namespace, identity, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD
    )
    manager = Manager(
        config,
        ManagerOptions(
            name="counter", leader_election=election, probe_address=None, metrics_address=None
        ),
    )
    manager.add(CounterWriter(manager.client, namespace, identity))
    try:
        await manager.run_until_signal()
    except LeadershipLost as err:
        logging.error("%s", err)
        return 1
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {sys.argv[3]} %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    kubeconfig, namespace, identity = sys.argv[1:4]
    sys.exit(anyio.run(main, kubeconfig, namespace, identity))
