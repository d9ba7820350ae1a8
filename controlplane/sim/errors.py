"""The simulator's errors, each carrying the HTTP status and llama.cpp error type it answers with.

llama-server answers every failure with ``{"error": {"code", "message", "type"}}``, the type
naming the class of failure (``invalid_request_error`` 400, ``not_found_error`` 404,
``server_error`` 500, ``not_supported_error`` 501, ``unavailable_error`` 503). One exception per
class keeps the handlers free of status numbers: they raise, the app renders.
"""

from __future__ import annotations

from typing import ClassVar


class SimError(Exception):
    """Base of every error the simulator turns into an HTTP error response."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(SimError):
    """The request body is not something the endpoint accepts; the message names the field."""

    status = 400
    error_type = "invalid_request_error"


class MalformedJSON(SimError):
    """A request body that is not JSON: llama-server's parser throws, and it answers 500."""

    status = 500
    error_type = "server_error"


class RouteNotFound(SimError):
    """No endpoint at this path (llama-server says ``File Not Found``)."""

    status = 404
    error_type = "not_found_error"


class SimulatedServerError(SimError):
    """A failure the simulator was told to produce (``/slots`` in ``error500`` mode)."""

    status = 500
    error_type = "server_error"


class SlotsEndpointDisabled(SimError):
    """``/slots`` on a server started with ``--no-slots``."""

    status = 501
    error_type = "not_supported_error"


class MetricsEndpointDisabled(SimError):
    """``/metrics`` on a server started without ``--metrics``."""

    status = 501
    error_type = "not_supported_error"


class ModelLoading(SimError):
    """Any model endpoint while the model is still loading."""

    status = 503
    error_type = "unavailable_error"


class NoSlotAvailable(SimError):
    """``/slots?fail_on_no_slot=1`` while every slot is busy."""

    status = 503
    error_type = "unavailable_error"
