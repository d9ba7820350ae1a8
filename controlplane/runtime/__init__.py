"""A small controller-runtime-style framework on raw watches. It knows nothing of pools.

This package's face is what a controller author uses, as controller-runtime's ``alias.go``: the
:class:`Manager` that runs everything, a :class:`Controller` wired with ``for_``/``owns``/
``watches`` to :class:`Informer` caches, the :class:`Reconciler` protocol with its
:class:`Request`, :class:`Result` and :class:`TerminalError`, the :class:`KubeClient` and its
errors, and the :data:`Object` a reconciler reads (docs/framework.md). Everything else stays in
its module (``runtime.workqueue``, ``runtime.metrics``, ...).

The names load lazily (PEP 562): ``import controlplane.runtime.logs`` from the CLI must not
import the manager, the HTTP server and OpenTelemetry, and a submodule importing a sibling must
not go through a half-initialised package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controlplane.clock import (
        Clock,
        TimeSource,
    )
    from controlplane.runtime.client import (
        KubeClient,
    )
    from controlplane.runtime.config import (
        ClientConfig,
    )
    from controlplane.runtime.controller import (
        Controller,
        GenerationChanged,
        MapFunc,
        Predicate,
        Reconciler,
        Request,
        Result,
        TerminalError,
        enqueue_controller_owner,
        enqueue_object,
    )
    from controlplane.runtime.discovery import (
        ResourceMapper,
    )
    from controlplane.runtime.errors import (
        AlreadyExists,
        ApiError,
        BadRequest,
        Conflict,
        Forbidden,
        Gone,
        InternalError,
        Invalid,
        KubeError,
        MethodNotAllowed,
        NamespaceTerminating,
        NotFound,
        RequestTimeout,
        ResourceVersionTooLarge,
        ServerTimeout,
        ServiceUnavailable,
        TooManyRequests,
        TransportError,
        Unauthorized,
    )
    from controlplane.runtime.events import (
        EventRecorder,
    )
    from controlplane.runtime.informer import (
        DeletedFinalStateUnknown,
        EventHandler,
        Informer,
    )
    from controlplane.runtime.leaderelection import (
        LeaderElectionConfig,
        LeadershipLost,
    )
    from controlplane.runtime.manager import (
        Manager,
        ManagerOptions,
        Runnable,
    )
    from controlplane.runtime.objects import (
        Object,
        ObjectView,
    )
    from controlplane.runtime.resources import (
        Resource,
    )

#: Each public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    "Controller": "controlplane.runtime.controller",
    "GenerationChanged": "controlplane.runtime.controller",
    "MapFunc": "controlplane.runtime.controller",
    "Predicate": "controlplane.runtime.controller",
    "Reconciler": "controlplane.runtime.controller",
    "Request": "controlplane.runtime.controller",
    "Result": "controlplane.runtime.controller",
    "TerminalError": "controlplane.runtime.controller",
    "enqueue_controller_owner": "controlplane.runtime.controller",
    "enqueue_object": "controlplane.runtime.controller",
    "Manager": "controlplane.runtime.manager",
    "ManagerOptions": "controlplane.runtime.manager",
    "Runnable": "controlplane.runtime.manager",
    "DeletedFinalStateUnknown": "controlplane.runtime.informer",
    "EventHandler": "controlplane.runtime.informer",
    "Informer": "controlplane.runtime.informer",
    "KubeClient": "controlplane.runtime.client",
    "ClientConfig": "controlplane.runtime.config",
    "Resource": "controlplane.runtime.resources",
    "ResourceMapper": "controlplane.runtime.discovery",
    "Object": "controlplane.runtime.objects",
    "ObjectView": "controlplane.runtime.objects",
    "EventRecorder": "controlplane.runtime.events",
    "LeaderElectionConfig": "controlplane.runtime.leaderelection",
    "LeadershipLost": "controlplane.runtime.leaderelection",
    "AlreadyExists": "controlplane.runtime.errors",
    "ApiError": "controlplane.runtime.errors",
    "BadRequest": "controlplane.runtime.errors",
    "Conflict": "controlplane.runtime.errors",
    "Forbidden": "controlplane.runtime.errors",
    "Gone": "controlplane.runtime.errors",
    "InternalError": "controlplane.runtime.errors",
    "Invalid": "controlplane.runtime.errors",
    "KubeError": "controlplane.runtime.errors",
    "MethodNotAllowed": "controlplane.runtime.errors",
    "NamespaceTerminating": "controlplane.runtime.errors",
    "NotFound": "controlplane.runtime.errors",
    "RequestTimeout": "controlplane.runtime.errors",
    "ResourceVersionTooLarge": "controlplane.runtime.errors",
    "ServerTimeout": "controlplane.runtime.errors",
    "ServiceUnavailable": "controlplane.runtime.errors",
    "TooManyRequests": "controlplane.runtime.errors",
    "TransportError": "controlplane.runtime.errors",
    "Unauthorized": "controlplane.runtime.errors",
    "Clock": "controlplane.clock",
    "TimeSource": "controlplane.clock",
}

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "ClientConfig",
    "Clock",
    "Conflict",
    "Controller",
    "DeletedFinalStateUnknown",
    "EventHandler",
    "EventRecorder",
    "Forbidden",
    "GenerationChanged",
    "Gone",
    "Informer",
    "InternalError",
    "Invalid",
    "KubeClient",
    "KubeError",
    "LeaderElectionConfig",
    "LeadershipLost",
    "Manager",
    "ManagerOptions",
    "MapFunc",
    "MethodNotAllowed",
    "NamespaceTerminating",
    "NotFound",
    "Object",
    "ObjectView",
    "Predicate",
    "Reconciler",
    "Request",
    "RequestTimeout",
    "Resource",
    "ResourceMapper",
    "ResourceVersionTooLarge",
    "Result",
    "Runnable",
    "ServerTimeout",
    "ServiceUnavailable",
    "TerminalError",
    "TimeSource",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "enqueue_controller_owner",
    "enqueue_object",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
