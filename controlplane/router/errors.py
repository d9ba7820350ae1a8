"""Named proxy errors, each with its HTTP status and OpenAI-style body (docs/router.md).

Every failure the client can see is one of these; :meth:`ProxyError.body` renders
``{"error": {"message", "type", "code"}}`` and the app adds ``Retry-After`` when one is set. The
``code`` is a string, and also the outcome reason in the proxy's audit line and request metric.

A member's own error answers reach the client in the same shape: llama.cpp's body has an integer
``code`` (the HTTP status again), so :func:`member_error_body` rewrites it, keeping the member's
message, type and any further fields.

A 503 always carries ``Retry-After``: the activator computes it from the swap times it measured
(:mod:`controlplane.router.retryafter`); :data:`MIN_RETRY_AFTER_SECONDS` is only the floor.
"""

from __future__ import annotations

import json
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
        """``Retry-After`` in seconds, and ``retry-after-ms`` beside it: openai-python reads the
        latter first and ignores a ``Retry-After`` above 60 s."""
        if self.retry_after is None:
            return {}
        return {
            "Retry-After": str(self.retry_after),
            "retry-after-ms": str(self.retry_after * 1000),
        }


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class PathNotFound(ProxyError):
    """No route serves the path."""

    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(ProxyError):
    """The path exists, but not for this method; ``Allow`` names the ones it takes."""

    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"

    def __init__(self, message: str, *, allow: str = "") -> None:
        super().__init__(message)
        self.allow = allow

    def headers(self) -> dict[str, str]:
        return {"Allow": self.allow} if self.allow else {}


class InvalidApiKey(ProxyError):
    """The router asks for an API key and the request has none that it accepts (401, as
    OpenAI answers). The message says whether the key was missing, malformed or wrong, and never
    repeats what was sent; ``WWW-Authenticate`` names the scheme (RFC 6750's ``error`` when
    credentials came but were refused)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"

    def __init__(self, message: str, *, challenge: str = "Bearer") -> None:
        super().__init__(message)
        self.challenge = challenge

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.challenge}


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


class HoldFull(_Unavailable):
    """This replica already holds as many requests as it may (``--max-held-requests``)."""

    code = "proxy_hold_full"


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


class UpstreamTimeout(UpstreamError):
    """The member sent nothing for longer than ``--upstream-read-timeout``."""

    status = 504
    code = "upstream_timeout"


class UpstreamDisconnected(UpstreamError):
    """The member closed the connection before its answer was complete."""

    code = "upstream_disconnected"


class UpstreamBadAnswer(UpstreamError):
    """The member's answer is not valid HTTP."""

    code = "upstream_bad_answer"


class UpstreamAnswerTooLarge(UpstreamError):
    """The member's answer is longer than the proxy passes on (``--max-answer-bytes``)."""

    code = "upstream_answer_too_large"


#: The error a client gets for each kind of member failure
#: (:attr:`controlplane.router.upstream.UpstreamFailure.kind`); any other kind is
#: :class:`UpstreamError`.
UPSTREAM_ERRORS: dict[str, type[UpstreamError]] = {
    "timeout": UpstreamTimeout,
    "disconnected": UpstreamDisconnected,
    "bad_answer": UpstreamBadAnswer,
    "too_large": UpstreamAnswerTooLarge,
}


def upstream_error(member: str, url: str, kind: str, what: str) -> UpstreamError:
    """The client's error for a member failure of ``kind``, naming the member and its address."""
    return UPSTREAM_ERRORS.get(kind, UpstreamError)(f"{member} at {url}: {what}")


#: ``code`` of a member's error whose own code is not a string (llama.cpp sends the HTTP status).
MEMBER_ERROR_CODE = "member_error"
#: The most of a member's error body that is read to rewrite it; a longer one passes as it is.
MEMBER_ERROR_MAX_BYTES = 64 * 1024
#: The most of a member's non-JSON error text kept as the message.
MEMBER_MESSAGE_MAX_CHARS = 1000


def member_error_body(raw: bytes, status: int) -> dict[str, Any]:
    """A member's 4xx/5xx answer in the proxy's error shape.

    ``{"error": {...}}`` keeps the member's ``message``, ``type`` and other fields (llama.cpp's
    ``n_ctx``, say) and gets a string ``code``: the member's own if it is a string, else
    :data:`MEMBER_ERROR_CODE`. Any other body (``{"error": "text"}``, plain text, HTML) becomes
    the message. A missing type is ``invalid_request_error`` for 4xx, ``server_error`` for 5xx.
    """
    default_type = "invalid_request_error" if status < 500 else "server_error"
    try:
        document: Any = json.loads(raw)
    except ValueError:
        document = None
    error: dict[str, Any] = {}
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        error = dict(document["error"])
        message = error.get("message")
    elif isinstance(document, dict) and isinstance(document.get("error"), str):
        message = document["error"]
    else:
        message = raw.decode("utf-8", "replace").strip()[:MEMBER_MESSAGE_MAX_CHARS]
    code = error.get("code")
    error_type = error.get("type")
    error["message"] = (
        message if isinstance(message, str) and message else f"the member answered {status}"
    )
    error["type"] = error_type if isinstance(error_type, str) and error_type else default_type
    error["code"] = code if isinstance(code, str) and code else MEMBER_ERROR_CODE
    return {"error": error}


def request_refusal(status: int, what: str) -> tuple[bytes, bytes]:
    """The answer to a request over a limit of how it arrives
    (:mod:`controlplane.runtime.requestlimits`), in the proxy's error shape: 400
    ``invalid_request`` (a head that is not HTTP), 431
    ``request_header_fields_too_large``, 408 ``request_timeout`` or 503
    ``proxy_connections_full``."""
    kinds = {
        400: ("invalid_request", "invalid_request_error"),
        431: ("request_header_fields_too_large", "invalid_request_error"),
        408: ("request_timeout", "invalid_request_error"),
        503: ("proxy_connections_full", "server_error"),
    }
    code, kind = kinds.get(status, ("request_refused", "invalid_request_error"))
    message = f"The request was refused: {what}"
    body = {"error": {"message": message, "type": kind, "code": code}}
    return b"application/json", json.dumps(body, separators=(",", ":")).encode()
