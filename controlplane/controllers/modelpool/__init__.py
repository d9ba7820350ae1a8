"""The ModelPool controller: one exclusive GPU slot shared by a pool's members (docs/modelpool.md).

Split along the seams its tests use:

* :mod:`~controlplane.controllers.modelpool.intent`: which member owns the slot, from the
  activation intent on the pool's Lease (:func:`choose_owner`, :class:`LeaseObserver`);
* :mod:`~controlplane.controllers.modelpool.plan`: what to do with one snapshot of the members
  and what to report, pure functions only (:func:`plan_actions`, :func:`pool_status`);
* :mod:`~controlplane.controllers.modelpool.grant`: the slot grant in the pool's status
  (``status.members[].slot``), the one module the InferenceService controller reads too, so both
  read the grant alike;
* :mod:`~controlplane.controllers.modelpool.reconciler`: the reconciler, which reads the caches
  and orders one reconcile's steps, and :func:`setup_model_pool_controller`, which wires it from a
  manager;
* the steps it orders that do I/O or keep state: ``checks`` (the idle probes before a drain, the
  live LIST before a grant), ``swaprecord`` (the swap's phases as spans, the events and log
  lines), ``gauges`` (the pool's series) and ``watches`` (which pools a watched object concerns).

The reconciler imports the others, never the reverse; intent, plan and grant do no I/O, and no
step imports another (import-linter contracts).
"""

from controlplane.api.v1alpha1.modelpool import member_slot
from controlplane.controllers.modelpool.grant import deployment_replicas
from controlplane.controllers.modelpool.intent import (
    Intent,
    LeaseObserver,
    Owner,
    OwnerReason,
    choose_owner,
)
from controlplane.controllers.modelpool.member import MemberState
from controlplane.controllers.modelpool.plan import Plan, plan_actions, pool_status
from controlplane.controllers.modelpool.reconciler import (
    CONTROLLER_NAME,
    ModelPoolReconciler,
    setup_model_pool_controller,
)
from controlplane.controllers.modelpool.watches import map_lease

__all__ = [
    "CONTROLLER_NAME",
    "Intent",
    "LeaseObserver",
    "MemberState",
    "ModelPoolReconciler",
    "Owner",
    "OwnerReason",
    "Plan",
    "choose_owner",
    "deployment_replicas",
    "map_lease",
    "member_slot",
    "plan_actions",
    "pool_status",
    "setup_model_pool_controller",
]
