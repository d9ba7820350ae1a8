"""The operator process: one leader-elected manager, gated by the RBAC preflight.

Its command line is :mod:`controlplane.operator.command`; the identity and the preflight gate
it shares with the router-proxy are in :mod:`controlplane.process`.

Start-up, in order: probes and metrics serve at once (``/readyz`` says why it is not ready yet);
the preflight checks every permission the operator's controllers declare, so a missing grant
stops the process at start with a message naming it (exit 77), and a control plane that does not
answer leaves it not-ready while the preflight keeps retrying in the background; only an ALLOWED
verdict lets the manager campaign for leadership and start controllers.

The controllers (InferenceService, ModelPool, ModelRouter, and the node cache's collection unless
``--model-cache-collect-interval 0``) register in :func:`build_manager`.
"""

from __future__ import annotations

import logging

from controlplane.controllers.inferenceservice import setup_inference_service_controller
from controlplane.controllers.inferenceservice.network import MemberNetworkPolicy
from controlplane.controllers.inferenceservice.weights import WeightsPlacement
from controlplane.controllers.modelcache import CollectionSettings, setup_model_cache_controller
from controlplane.controllers.modelpool import setup_model_pool_controller
from controlplane.controllers.modelrouter import setup_model_router_controller
from controlplane.operator.proxyimage import ProxyImage
from controlplane.operator.settings import OperatorSettings
from controlplane.preflight import Component, PreflightGate
from controlplane.process import default_identity, gate_on_preflight
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.leaderelection import LeaderElectionConfig
from controlplane.runtime.manager import Manager, ManagerOptions
from controlplane.runtime.tracing import configure_tracing

log = logging.getLogger(__name__)


def build_manager(settings: OperatorSettings) -> tuple[Manager, PreflightGate]:
    config = ClientConfig.load(settings.kubeconfig)
    identity = settings.identity or default_identity()
    election = (
        LeaderElectionConfig(
            settings.leader_election_id,
            settings.namespace,
            identity,
            lease_duration=settings.lease_duration,
            renew_deadline=settings.renew_deadline,
            retry_period=settings.retry_period,
        )
        if settings.leader_elect
        else None
    )
    manager = Manager(
        config,
        ManagerOptions(
            name="modelpool-operator",
            leader_election=election,
            probe_address=settings.probe_address,
            metrics_address=settings.metrics_address,
        ),
    )

    gate = gate_on_preflight(
        manager,
        config,
        Component.OPERATOR,
        settings.namespace,
        cache_dir=settings.preflight_cache_dir,
        hold_start=True,
    )
    # Controllers register here, each with the informers it reads.
    fetch_image = ProxyImage(
        manager.client,
        configured=settings.fetch_image,
        pod_namespace=settings.namespace,
        pod_name=settings.pod_name,
        users="weights fetchers",
    )

    async def placement() -> WeightsPlacement:
        return WeightsPlacement(
            settings.model_cache_path, await fetch_image(), fetch_env=settings.fetch_env
        )

    network = MemberNetworkPolicy(
        enabled=settings.member_network_policies,
        operator_namespace=settings.namespace,
        operator_pod_labels=settings.member_network_policy_operator_labels,
        allow_namespaces=settings.member_network_policy_allow_namespaces,
    )
    setup_inference_service_controller(manager, identity, placement=placement, network=network)
    if settings.model_cache_collect_interval > 0:
        collection = CollectionSettings(
            namespace=settings.model_cache_collect_namespace,
            interval=settings.model_cache_collect_interval,
            retention=settings.model_cache_retention,
            max_bytes=settings.model_cache_max_bytes,
        )
        setup_model_cache_controller(manager, collection, placement)
    setup_model_pool_controller(
        manager,
        identity,
        placement=WeightsPlacement(settings.model_cache_path),
        slot_server_poll_seconds=settings.slot_server_poll_seconds,
        slot_server_wait_seconds=settings.slot_server_wait_seconds,
    )
    proxy_image = ProxyImage(
        manager.client,
        configured=settings.proxy_image,
        pod_namespace=settings.namespace,
        pod_name=settings.pod_name,
    )
    setup_model_router_controller(manager, identity, proxy_image)
    return manager, gate


async def run_operator(settings: OperatorSettings) -> None:
    """Run until SIGTERM; raises ``PreflightDenied`` or ``LeadershipLost`` (inside groups)."""
    configure_tracing("modelpool-operator")
    manager, _ = build_manager(settings)
    log.info("operator starting in namespace %s", settings.namespace)
    await manager.run_until_signal()
