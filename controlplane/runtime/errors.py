"""Errors of the API client: a small hierarchy named after what the API server said.

Callers branch on the type (``except Conflict``), never on status numbers. Transport failures are
kept apart from API answers because they mean different things: an answer is the server's word, a
transport failure says nothing about the request's fate.
"""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """Base of everything the client raises."""


class TransportError(KubeError):
    """No answer from the API server: connection refused or reset, TLS failure, client timeout."""


class RequestTimeout(TransportError):
    """The client's own timeout elapsed before the server answered."""


class NotLeading(KubeError):
    """A write refused before it was sent: this process is not sure it still holds its leader
    Lease (:meth:`~controlplane.runtime.leaderelection.LeaderElector.write_refusal`)."""


class ApiError(KubeError):
    """The API server answered with an error status (a ``metav1.Status`` body when it could)."""

    status_code: int = 0

    def __init__(
        self,
        status_code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status_code} {reason}: {message}")
        self.status_code = status_code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.retry_after = retry_after


class BadRequest(ApiError):
    """400: the request itself is malformed."""


class Unauthorized(ApiError):
    """401: the credentials were not accepted."""


class Forbidden(ApiError):
    """403: authenticated but not allowed (RBAC, admission or escalation prevention)."""


class NamespaceTerminating(Forbidden):
    """403 from the namespace lifecycle admission: nothing new may be created in a namespace that
    is being deleted (the Status carries the cause ``NamespaceTerminating``). Not a permission
    problem, and nothing to retry: whatever the write was for is being deleted with it."""


class NotFound(ApiError):
    """404: the object or the resource type does not exist."""


class MethodNotAllowed(ApiError):
    """405: the resource does not support this verb."""


class Conflict(ApiError):
    """409: the object changed since it was read (stale ``resourceVersion``)."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: a create found an object of that name."""


class Gone(ApiError):
    """410: the requested ``resourceVersion`` is older than etcd keeps; relist."""


class Invalid(ApiError):
    """422: the object failed validation (schema, CEL rules, immutable fields)."""


class TooManyRequests(ApiError):
    """429: throttled by API priority and fairness; honour ``retry_after``."""


class InternalError(ApiError):
    """500: the server failed."""


class ServiceUnavailable(ApiError):
    """503: the server or an aggregated API is not available right now."""


class ServerTimeout(ApiError):
    """504 (or reason Timeout): the server gave up on the request."""


class ResourceVersionTooLarge(ServerTimeout):
    """The requested ``resourceVersion`` is newer than the server's cache; relist."""


_BY_REASON: dict[str, type[ApiError]] = {
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Expired": Gone,
    "Gone": Gone,
    "Invalid": Invalid,
    "Timeout": ServerTimeout,
}

_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: ServerTimeout,
}


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def api_error(
    status_code: int, status: dict[str, Any] | None, retry_after: str | None = None
) -> ApiError:
    """Build the typed error for an HTTP status and a decoded ``metav1.Status`` (if any)."""
    status = status or {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "") or f"HTTP {status_code}"
    details = status.get("details") or {}
    causes = details.get("causes") or []
    kinds = {c.get("reason") for c in causes if isinstance(c, dict)}  # StatusCause.Type is "reason"
    if "ResourceVersionTooLarge" in kinds:
        kind: type[ApiError] = ResourceVersionTooLarge
    elif status_code == 403 and "NamespaceTerminating" in kinds:
        kind = NamespaceTerminating
    else:
        kind = _BY_REASON.get(reason) or _BY_CODE.get(status_code) or ApiError
    return kind(
        status_code,
        reason or kind.__name__,
        message,
        details=details,
        retry_after=_retry_after(retry_after)
        or _retry_after(str(details.get("retryAfterSeconds") or "")),
    )
