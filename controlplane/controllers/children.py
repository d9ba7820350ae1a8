"""Children a controller owns: apply bodies stamped with a hash of themselves, and the test that
decides whether one must be applied at all.

Controllers write their children with server-side apply, and only when the cached child differs
from what is wanted (:func:`needs_apply`). "Differs" means: a field wanted is missing or has
another value in the cache (server defaults are extra fields and do not count). A field no longer
wanted would never show up that way, so every wanted body carries a hash of itself in
:data:`SPEC_HASH_ANNOTATION` (:func:`with_spec_hash`): dropping a field changes the hash, and the
hash differs from the cached one. Fields the API server rewrites canonically (``resources``:
``0.5`` becomes ``500m``) are compared through the hash only.

Shared by the InferenceService and ModelRouter controllers; nothing here knows either kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import msgspec

#: Label on everything the operator creates (informers of owned kinds may filter on it).
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "modelpool-operator"
SPEC_HASH_ANNOTATION: Final = "inference.modelpool.dev/spec-hash"

#: Compared through the spec hash only (the API server rewrites quantities canonically).
HASH_ONLY_KEYS: Final = frozenset({"resources"})


def quantities(values: Mapping[str, int | str]) -> dict[str, str]:
    """Quantities as strings, as the API server stores them, so comparisons stay exact."""
    return {key: str(value) for key, value in values.items()}


def with_spec_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """Stamp ``obj`` with a hash of itself, so a field dropped from what is wanted is noticed."""
    digest = hashlib.sha256(msgspec.json.encode(obj, order="sorted")).hexdigest()[:16]
    obj["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: digest}
    return obj


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
