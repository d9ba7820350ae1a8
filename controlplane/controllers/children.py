"""Children a controller owns: apply bodies stamped with a hash of themselves, and the test that
decides whether one must be applied at all.

Controllers write their children with server-side apply, and only when the cached child differs
from what is wanted (:func:`needs_apply`). "Differs" means: a field wanted is missing or has
another value in the cache (server defaults are extra fields and do not count). A field no longer
wanted would never show up that way, so every wanted body carries a hash of itself in
:data:`SPEC_HASH_ANNOTATION` (:func:`with_spec_hash`): dropping a field changes the hash, and the
hash differs from the cached one. Fields the API server rewrites canonically (``resources``:
``0.5`` becomes ``500m``) are compared through the hash only.

Also the few readings of a child both controllers make: its Deployment's conditions, whether a
child of the wanted name belongs to someone else. Shared by the InferenceService and ModelRouter
controllers; nothing here knows either kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from controlplane.runtime.objects import status_condition

#: Label on everything the operator creates (informers of owned kinds may filter on it).
#: The recommended labels on everything the controllers create.
NAME_LABEL: Final = "app.kubernetes.io/name"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
#: What a child is in the system, whatever it serves or runs: ``member`` for every member's pods
#: (any runtime), ``router-proxy`` for every router's. Monitors and policies select by it (with
#: :data:`MANAGED_BY_LABEL`), so it must never change for an existing kind of child.
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
MANAGED_BY: Final = "modelpool-operator"
#: The ``app.kubernetes.io/name`` of router-proxy pods (``PROXY_NAME`` of the ModelRouter
#: controller), by which each member's NetworkPolicy admits them: the two controllers import
#: nothing of each other, and ``tests/unit/test_inferenceservice_network.py`` keeps them equal.
ROUTER_PROXY_NAME: Final = "router-proxy"
#: Server-side apply's field manager for everything the controllers write.
FIELD_MANAGER: Final = MANAGED_BY
#: Condition reasons every controller with a Deployment child reports alike.
REASON_NOT_OWNED: Final = "NotOwned"
REASON_DEPLOYMENT_CREATING: Final = "DeploymentCreating"
REASON_DEPLOYMENT_NOT_OBSERVED: Final = "DeploymentNotObserved"
SPEC_HASH_ANNOTATION: Final = "inference.modelpool.dev/spec-hash"

#: The reason a Deployment's ``Progressing`` condition gives once its deadline has passed.
PROGRESS_DEADLINE_EXCEEDED: Final = "ProgressDeadlineExceeded"

#: Compared through the spec hash only (the API server rewrites quantities canonically).
HASH_ONLY_KEYS: Final = frozenset({"resources"})


def quantities(values: Mapping[str, int | str]) -> dict[str, str]:
    """Quantities as strings, as the API server stores them, so comparisons stay exact."""
    return {key: str(value) for key, value in values.items()}


def resource_requirements(
    limits: Mapping[str, int | str] | None, requests: Mapping[str, int | str] | None
) -> dict[str, Any]:
    """A container's ``resources``, with only the parts that are set."""
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = quantities(limits)
    if requests:
        out["requests"] = quantities(requests)
    return out


def with_spec_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """Stamp ``obj`` with a hash of itself, so a field dropped from what is wanted is noticed."""
    digest = hashlib.sha256(msgspec.json.encode(obj, order="sorted")).hexdigest()[:16]
    obj["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: digest}
    return obj


#: Not Ready pods may be evicted whatever a budget says (Kubernetes 1.27 and later).
UNHEALTHY_POD_EVICTION_POLICY: Final = "AlwaysAllow"


def idle_gated_budget(metadata: Mapping[str, Any], selector: Mapping[str, str]) -> dict[str, Any]:
    """A PodDisruptionBudget, as a server-side apply body, that refuses every eviction of a
    Ready pod it selects (``maxUnavailable: 0``): an eviction cannot ask ``/slots``, so the
    operator moves a serving pod itself, through the idle gate. A pod that is not Ready serves
    nothing and may go at once (``AlwaysAllow``), so a broken server never blocks a drain."""
    return with_spec_hash(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": dict(metadata),
            "spec": {
                "selector": {"matchLabels": dict(selector)},
                "maxUnavailable": 0,
                "unhealthyPodEvictionPolicy": UNHEALTHY_POD_EVICTION_POLICY,
            },
        }
    )


def covers(actual: Any, wanted: Any) -> bool:
    """Whether ``actual`` holds every field of ``wanted`` with the same value.

    Maps may have extra keys (server defaults); lists must match item by item. An absent value
    and an empty one are the same (the API server omits empty fields).
    """
    if isinstance(wanted, Mapping):
        if actual is None:
            actual = {}
        if not isinstance(actual, Mapping):
            return False
        return all(
            key in HASH_ONLY_KEYS or covers(actual.get(key), value) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        if actual is None:
            actual = []
        if not isinstance(actual, list) or len(actual) != len(wanted):
            return False
        return all(covers(a, w) for a, w in zip(actual, wanted, strict=True))
    return bool(actual == wanted)


def needs_apply(cached: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether ``wanted`` must be applied: absent from the cache, or the cache differs from it."""
    if cached is None:
        return True
    return not covers({k: v for k, v in cached.items() if k != "status"}, wanted)


def is_controlled_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    """Whether ``obj`` carries a controller reference to the object with this uid."""
    refs = obj.get("metadata", {}).get("ownerReferences") or ()
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


def foreign_child(
    owner_kind: str, owner_uid: str | None, children: Iterable[tuple[str, Mapping[str, Any] | None]]
) -> str | None:
    """Why a child of the wanted name cannot be taken over (another controller owns it), or None.

    ``children`` are ``(kind, cached object or None)`` pairs.
    """
    for kind, child in children:
        if child is not None and not is_controlled_by(child, owner_uid):
            name = child["metadata"]["name"]
            return f"a {kind} named {name} exists and is not controlled by this {owner_kind}"
    return None


def progress_deadline_exceeded(deployment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``Progressing`` condition when it says the rollout's deadline passed, else None."""
    progressing = status_condition(deployment, "Progressing")
    if (
        progressing is not None
        and progressing.get("status") == "False"
        and progressing.get("reason") == PROGRESS_DEADLINE_EXCEEDED
    ):
        return progressing
    return None
