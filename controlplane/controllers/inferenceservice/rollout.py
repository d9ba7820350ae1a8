"""When a change to a member's pod may reach its Deployment: the idle gate of day-2 edits.

The product's promise is that a serving member is never stopped while its ``/slots`` say busy, by
a swap or by anything else (docs/inferenceservice.md, "Changing a serving member"). The member
Deployments are ``Recreate`` (one GPU: the old pod goes before the new one starts), so applying a
new pod template to a Deployment with a pod stops that pod at once. These rules decide when a
template change is applied; the reconciler does the probing and the writing.

* **What counts as a pod change**: the wanted template's hash
  (:data:`TEMPLATE_HASH_ANNOTATION`, on the Deployment) differs from the cached Deployment's; a
  Deployment written before the annotation existed is compared field by field
  (:func:`~controlplane.controllers.children.covers`), so an operator upgrade to this version
  replaces nothing by itself. A change of ``spec.replicas`` alone is not a pod change.
* **At once** when no pod of the member exists (Terminating ones count: the old pod is still
  stopping), and when the Deployment goes to 0 anyway (a pool's release has already passed the
  pool's idle gate; a user's scale to 0 is an explicit stop).
* **A pool member waits for its pool** (``WaitingForPool``): the pool closes admission to it,
  drains it through its own ``/slots`` gate and grants it again
  (:mod:`~controlplane.controllers.modelpool.plan`); with the pods gone, the change goes in.
* **A member no pool lists waits for idle**: every ready endpoint's ``/slots`` must say idle
  (``WaitingForIdle`` while busy; ``IdleCheckFailed`` when the answer proves nothing: never
  applied on a guess); with no ready endpoint, nothing can be in flight through its Service and
  it goes in at once. No bound: the wait lasts as long as requests are in flight, and the
  ``UpdatePending`` condition says since when.
* **A pod on a cordoned node** (a node drain,
  :mod:`~controlplane.controllers.inferenceservice.disruption`) waits as a pod change does, by
  the same rules; once the gate opens, a member no pool lists has that pod deleted (its
  Deployment makes the next one elsewhere), and a pool member's pod goes with its pool's release.
* **The weights fetcher's image** (``--fetch-image``, by default the operator's own) is part of a
  downloaded member's pod, so every operator upgrade would change every such pod: a member with a
  pod keeps the fetcher image it was started with (:func:`running_fetch_image`); one without takes
  the operator's current one.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from controlplane.controllers.children import covers
from controlplane.controllers.inferenceservice.weights import FETCH_CONTAINER
from controlplane.probes.idle import IdleOutcome, IdleReport

#: The hash of the pod template a Deployment was last written with (its metadata).
TEMPLATE_HASH_ANNOTATION: Final = "inference.modelpool.dev/template-hash"

REASON_UP_TO_DATE: Final = "UpToDate"
REASON_WAITING_FOR_IDLE: Final = "WaitingForIdle"
REASON_IDLE_CHECK_FAILED: Final = "IdleCheckFailed"
REASON_WAITING_FOR_POOL: Final = "WaitingForPool"
#: The Event when a change that waited reaches the Deployment.
EVENT_UPDATE_APPLIED: Final = "UpdateApplied"


class Gate(enum.Enum):
    #: Write the wanted Deployment.
    APPLY = "apply"
    #: Ask every ready endpoint's ``/slots`` first, then decide again with the reports.
    PROBE = "probe"
    #: Leave the Deployment as it is; the change is pending.
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class RolloutVerdict:
    gate: Gate
    #: The ``UpdatePending`` condition's reason and message.
    reason: str = REASON_UP_TO_DATE
    message: str = "the running pod is what the spec asks for"

    @property
    def pending(self) -> bool:
        return self.gate is not Gate.APPLY


UP_TO_DATE: Final = RolloutVerdict(Gate.APPLY)


def template_hash(template: Mapping[str, Any]) -> str:
    """A short digest of a pod template, stable across key order."""
    return hashlib.sha256(msgspec.json.encode(template, order="sorted")).hexdigest()[:16]


def with_template_hash(deployment: dict[str, Any]) -> dict[str, Any]:
    """Stamp a wanted Deployment with its template's hash (after its spec hash, which replaces the
    annotations)."""
    annotations = deployment["metadata"].setdefault("annotations", {})
    annotations[TEMPLATE_HASH_ANNOTATION] = template_hash(deployment["spec"]["template"])
    return deployment


def _template(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    return (deployment.get("spec") or {}).get("template") or {}


def pod_change(cached: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether writing ``wanted`` would change the pod of the ``cached`` Deployment."""
    if cached is None:
        return False
    written = ((cached.get("metadata") or {}).get("annotations") or {}).get(
        TEMPLATE_HASH_ANNOTATION
    )
    if written is not None:
        wanted_hash = wanted["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
        return bool(written != wanted_hash)
    return not covers(_template(cached), _template(wanted))


def rollout_gate(
    *,
    changes_pod: bool,
    pods: int,
    wanted_replicas: int,
    pooled: bool,
    leaving: str | None = None,
    reports: Sequence[tuple[str, IdleReport]] | None = None,
) -> RolloutVerdict:
    """May the wanted Deployment be written, and a pod on a cordoned node (``leaving``: that
    node's name) be deleted, now (rules in the module docstring)? ``reports``: the ``/slots``
    answers of the member's ready endpoints, once asked (None: not asked yet)."""
    if not (changes_pod or leaving) or pods == 0 or wanted_replicas == 0:
        return UP_TO_DATE
    what = "the pod changes" if changes_pod else f"the pod leaves node {leaving} (drained)"
    if pooled:
        return RolloutVerdict(
            Gate.WAIT,
            REASON_WAITING_FOR_POOL,
            f"{what} once its pool has drained this member through its idle gate",
        )
    if reports is None:
        return RolloutVerdict(Gate.PROBE, REASON_WAITING_FOR_IDLE, f"{what}: asking /slots")
    failed = [f"{url}: {r.detail}" for url, r in reports if r.outcome is IdleOutcome.FAILED]
    busy = [f"{url}: {r.detail}" for url, r in reports if r.outcome is IdleOutcome.BUSY]
    if failed:
        return RolloutVerdict(
            Gate.WAIT,
            REASON_IDLE_CHECK_FAILED,
            f"{what} once /slots proves it idle; the check failed: " + "; ".join(failed),
        )
    if busy:
        return RolloutVerdict(
            Gate.WAIT,
            REASON_WAITING_FOR_IDLE,
            f"{what} once its requests in flight are done: " + "; ".join(busy),
        )
    return UP_TO_DATE


def running_fetch_image(deployment: Mapping[str, Any] | None, pods: int) -> str | None:
    """The image of the fetcher init container that the member's running pod was made with, while
    it has a pod; None when it has none (it takes the operator's current one)."""
    if deployment is None or pods == 0:
        return None
    spec = _template(deployment).get("spec") or {}
    for init in spec.get("initContainers") or ():
        if init.get("name") == FETCH_CONTAINER and init.get("image"):
            return str(init["image"])
    return None
