"""Every tunable of the operator process in one frozen tree, each default a named constant.

:mod:`controlplane.operator.command` builds an :class:`OperatorSettings` from the flags; tests
build one directly. Nothing here imports the controllers or the manager, so the CLI can parse
arguments without loading them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controlplane.controllers.inferenceservice.network import DEFAULT_OPERATOR_POD_LABELS
from controlplane.controllers.inferenceservice.weights import DEFAULT_MODEL_CACHE_PATH
from controlplane.controllers.modelcache.desired import (
    DEFAULT_INTERVAL as DEFAULT_MODEL_CACHE_COLLECT_INTERVAL,
)
from controlplane.controllers.modelcache.desired import (
    DEFAULT_MAX_BYTES as DEFAULT_MODEL_CACHE_MAX_BYTES,
)
from controlplane.controllers.modelcache.desired import (
    DEFAULT_NAMESPACE as DEFAULT_MODEL_CACHE_COLLECT_NAMESPACE,
)
from controlplane.controllers.modelcache.desired import (
    DEFAULT_RETENTION_SECONDS as DEFAULT_MODEL_CACHE_RETENTION,
)
from controlplane.controllers.modelpool.slotruntime import (
    DEFAULT_POLL_SECONDS as DEFAULT_SLOT_SERVER_POLL_SECONDS,
)
from controlplane.controllers.modelpool.slotruntime import (
    DEFAULT_WAIT_SECONDS as DEFAULT_SLOT_SERVER_WAIT_SECONDS,
)
from controlplane.controllers.rbac import OPERATOR_NAMESPACE

#: The operator's leader-election Lease, in its own namespace.
LEADER_ELECTION_ID = "modelpool-operator"
DEFAULT_PROBE_ADDRESS = ("0.0.0.0", 8081)
DEFAULT_METRICS_ADDRESS = ("0.0.0.0", 8080)
#: Leader election's timing, client-go's defaults (the framework's own, restated here so that
#: parsing flags does not import the framework; a unit test keeps them equal).
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0


@dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator process is told at start (flags and environment)."""

    #: The operator's own namespace: its Lease and its preflight scope.
    namespace: str = OPERATOR_NAMESPACE
    kubeconfig: Path | None = None
    #: Leader-election identity; empty means :func:`controlplane.process.default_identity`.
    identity: str = ""
    leader_elect: bool = True
    leader_election_id: str = LEADER_ELECTION_ID
    #: Leader election's timing in seconds (client-go's 15 / 10 / 2); the renew deadline is also
    #: the fence on the leader's writes (docs/faults.md, "Fencing").
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD
    #: ``/healthz`` and ``/readyz``; None turns them off.
    probe_address: tuple[str, int] | None = DEFAULT_PROBE_ADDRESS
    #: ``/metrics``; None turns it off.
    metrics_address: tuple[str, int] | None = DEFAULT_METRICS_ADDRESS
    #: Where the preflight keeps its verdict (in a pod, an emptyDir).
    preflight_cache_dir: Path | None = None
    #: The image of a proxy whose ModelRouter names none; empty means the operator's own
    #: (:mod:`controlplane.operator.proxyimage`).
    proxy_image: str = ""
    #: The operator's own Pod ($POD_NAME), read for its image when ``proxy_image`` is empty.
    pod_name: str = ""
    #: The node folder downloaded weights are cached in (a hostPath on every node).
    model_cache_path: str = DEFAULT_MODEL_CACHE_PATH
    #: Every how many seconds each node's cache is collected; 0 turns the collection off.
    model_cache_collect_interval: float = DEFAULT_MODEL_CACHE_COLLECT_INTERVAL
    #: How long a cached file no InferenceService names may stay unused.
    model_cache_retention: float = DEFAULT_MODEL_CACHE_RETENTION
    #: Each node cache's size cap in bytes (unnamed files over it go, oldest use first); 0: none.
    model_cache_max_bytes: int = DEFAULT_MODEL_CACHE_MAX_BYTES
    #: Where the collection Jobs run (a namespace admitting privileged pods); empty: ``namespace``.
    model_cache_collect_namespace: str = DEFAULT_MODEL_CACHE_COLLECT_NAMESPACE
    #: How often a pool with a slot server reads it while it waits on a load or an unload.
    slot_server_poll_seconds: float = DEFAULT_SLOT_SERVER_POLL_SECONDS
    #: How long a pool that sent its slot server an order watches for its effect.
    slot_server_wait_seconds: float = DEFAULT_SLOT_SERVER_WAIT_SECONDS
    #: The image of the weights' fetcher (``controlplane fetch-model``); empty means the
    #: operator's own, as for the proxy.
    fetch_image: str = ""
    #: ``NAME=VALUE`` pairs every fetcher gets (``--fetch-env``), e.g. a Hub mirror's endpoint.
    fetch_env: tuple[tuple[str, str], ...] = ()
    #: Whether each InferenceService gets a NetworkPolicy (docs/network.md); False deletes them.
    member_network_policies: bool = True
    #: The labels of the operator's pods, which members' policies admit from :attr:`namespace`.
    member_network_policy_operator_labels: tuple[tuple[str, str], ...] = DEFAULT_OPERATOR_POD_LABELS
    #: Namespaces every pod of which members' policies admit (a metrics scraper's).
    member_network_policy_allow_namespaces: tuple[str, ...] = ()
