"""The InferenceService controller: a Deployment, a Service and a NetworkPolicy per member.

An InferenceService serves one model with one llama.cpp-compatible server. The controller owns a
Deployment and a Service of the same name and sizes the Deployment from ``spec.replicas`` (0 or
1), or, for a pool member, from its pool's decision in the pool's status, raising a member only
when its pool has granted it the slot (:mod:`controlplane.controllers.modelpool.grant`). Split
along the seams its tests use:

* :mod:`~controlplane.controllers.inferenceservice.desired`: what is wanted, the children as
  server-side apply bodies (pure);
* :mod:`~controlplane.controllers.inferenceservice.network`: who may reach the member's port,
  its NetworkPolicy (pure);
* :mod:`~controlplane.controllers.inferenceservice.status`: what is observed, the phase table and
  the status to write (pure);
* :mod:`~controlplane.controllers.inferenceservice.reconciler`: the reconciler, which reads the
  caches and orders one reconcile's steps, and :func:`setup_inference_service_controller`, which
  wires it from a manager;
* the steps it orders, each with its own I/O: ``replicas`` (the grant), ``childwrites`` (the
  children's writes), ``kvsteps`` (the KV cache's save and restore), ``day2`` (the idle gate of a
  pod change or a drain), ``statuswrite`` (the status and its events), and ``watches`` (which
  InferenceService a watched object concerns, pure).

The reconciler imports the steps and the pure rules, the steps import the pure rules, never the
reverse, and no step imports another (import-linter contracts).
"""

from controlplane.controllers.inferenceservice.desired import ISVC_LABEL, PORT_NAME, endpoint
from controlplane.controllers.inferenceservice.reconciler import (
    CONTROLLER_NAME,
    InferenceServiceReconciler,
    setup_inference_service_controller,
)

__all__ = [
    "CONTROLLER_NAME",
    "ISVC_LABEL",
    "PORT_NAME",
    "InferenceServiceReconciler",
    "endpoint",
    "setup_inference_service_controller",
]
