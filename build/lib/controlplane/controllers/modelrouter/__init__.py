"""The ModelRouter controller: one router-proxy Deployment, its Service, and its activation RBAC.

For each ModelRouter ``R`` the controller keeps five children (ServiceAccount ``R-proxy``, Role and
RoleBinding ``R-activation``, Deployment ``R-proxy``, Service ``R``) and reports a phase and the
``Available`` and ``BackendsReady`` conditions. Split along the seams its tests use:

* :mod:`~controlplane.controllers.modelrouter.desired`: what is wanted, the children as server-side
  apply bodies (pure);
* :mod:`~controlplane.controllers.modelrouter.status`: what is observed, the phase and conditions
  (pure);
* :mod:`~controlplane.controllers.modelrouter.reconciler`: the reconciler, which reads the caches
  and writes, and :func:`setup_model_router_controller`, which wires it from a manager.

The reconciler imports the other two, never the reverse (an import-linter contract).
"""

from controlplane.controllers.modelrouter.desired import (
    ROUTER_LABEL,
    activation_name,
    endpoint,
    proxy_name,
)
from controlplane.controllers.modelrouter.reconciler import (
    CONTROLLER_NAME,
    ModelRouterReconciler,
    setup_model_router_controller,
)

__all__ = [
    "CONTROLLER_NAME",
    "ROUTER_LABEL",
    "ModelRouterReconciler",
    "activation_name",
    "endpoint",
    "proxy_name",
    "setup_model_router_controller",
]
