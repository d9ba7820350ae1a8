"""Named proxy errors, each with its HTTP status and OpenAI-style body (DESIGN 4.5).

Every failure the client can see is one of these; :meth:`ProxyError.body` renders
``{"error": {"message", "type", "code"}}`` and the app adds ``Retry-After`` when one is set. The
``code`` is also the outcome reason in the proxy's audit line and its request metric.

A 503 always carries ``Retry-After``: the activator computes it from the swap times it measured
(:mod:`controlplane.router.retryafter`); :data:`MIN_RETRY_AFTER_SECONDS` is only the floor.
"""

from __future__ import annotations

from typing import Any, ClassVar

#: The least a client is told to wait after a 503 (``Retry-After`` is whole seconds).
MIN_RETRY_AFTER_SECONDS = 1


class ProxyError(Exception):
    """A failure with an HTTP status, an OpenAI error type and a machine-readable code."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    code: ClassVar[str] = "internal_error"
    #: Whether ``Retry-After`` is sent with this error.
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, retry_after: int = MIN_RETRY_AFTER_SECONDS) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after: int | None = (
            max(MIN_RETRY_AFTER_SECONDS, retry_after) if self.retryable else None
        )

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code}}

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ModelNotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class RequestTooLarge(ProxyError):
    """The body is larger than the proxy accepts (``--max-body-bytes``)."""

    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class _Unavailable(ProxyError):
    status = 503
    type = "server_error"
    retryable = True


class ActivationTimeout(_Unavailable):
    """The swap budget elapsed before the member was ready."""

    code = "pool_activation_timeout"


class PoolBusy(_Unavailable):
    """The incumbent kept in-flight requests on this replica for the whole budget."""

    code = "pool_busy"


class LeaseUnavailable(_Unavailable):
    """The pool's Lease could not be read or written."""

    code = "pool_lease_unavailable"


class ProxyStopping(_Unavailable):
    """This replica is shutting down: a held request is answered, and nothing new is started."""

    code = "proxy_stopping"


class ProxyNotReady(_Unavailable):
    """The proxy's caches have not synced yet."""

    code = "proxy_not_ready"


class BackendUnavailable(_Unavailable):
    """A non-pooled backend has no ready endpoint."""

    code = "backend_unavailable"


class ActivationFailed(ProxyError):
    """The swap failed: the target Failed, or it never became Ready after the Lease was lost."""

    status = 502
    type = "server_error"
    code = "pool_activation_failed"


class UpstreamError(ProxyError):
    """The member could not be reached."""

    status = 502
    type = "server_error"
    code = "upstream_error"
