"""``inference.modelpool.dev/v1alpha1``: InferenceService, ModelPool and ModelRouter."""

from controlplane.api.v1alpha1.conditions import Condition, find_condition, set_condition
from controlplane.api.v1alpha1.inferenceservice import (
    InferenceService,
    InferenceServiceSpec,
    InferenceServiceStatus,
    KvCacheOperation,
    KvCacheSpec,
    KvCacheStatus,
    ModelSource,
    ModelStatus,
    PoolDecisionSeen,
)
from controlplane.api.v1alpha1.meta import (
    API_VERSION,
    CATEGORY,
    GROUP,
    VERSION,
    CustomObject,
    LocalObjectReference,
    ObjectMeta,
    ResourceRequirements,
)
from controlplane.api.v1alpha1.modelpool import (
    MemberStatus,
    ModelPool,
    ModelPoolSpec,
    ModelPoolStatus,
    PoolMember,
)
from controlplane.api.v1alpha1.modelrouter import (
    Backend,
    ModelRouter,
    ModelRouterSpec,
    ModelRouterStatus,
    ProxySpec,
)

#: Every kind of this version, in the order the CRDs are rendered.
KINDS: tuple[type[CustomObject], ...] = (InferenceService, ModelPool, ModelRouter)

__all__ = [
    "API_VERSION",
    "CATEGORY",
    "GROUP",
    "KINDS",
    "VERSION",
    "Backend",
    "Condition",
    "CustomObject",
    "InferenceService",
    "InferenceServiceSpec",
    "InferenceServiceStatus",
    "KvCacheOperation",
    "KvCacheSpec",
    "KvCacheStatus",
    "LocalObjectReference",
    "MemberStatus",
    "ModelPool",
    "ModelPoolSpec",
    "ModelPoolStatus",
    "ModelRouter",
    "ModelRouterSpec",
    "ModelRouterStatus",
    "ModelSource",
    "ModelStatus",
    "ObjectMeta",
    "PoolDecisionSeen",
    "PoolMember",
    "ProxySpec",
    "ResourceRequirements",
    "find_condition",
    "set_condition",
]
