"""API answers become typed errors; callers branch on types, not numbers."""

from __future__ import annotations

import pytest

from controlplane.runtime.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NamespaceTerminating,
    ResourceVersionTooLarge,
    ServerTimeout,
    TooManyRequests,
    api_error,
)


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Gone),
        (410, "", Gone),
        (422, "Invalid", Invalid),
        (403, "Forbidden", Forbidden),
        (500, "Timeout", ServerTimeout),
        (418, "Teapot", ApiError),
    ],
)
def test_status_maps_to_type(code: int, reason: str, expected: type[ApiError]) -> None:
    err = api_error(code, {"kind": "Status", "reason": reason, "message": "m", "code": code})
    assert type(err) is expected
    assert err.status_code == code


def test_already_exists_is_a_conflict_but_not_the_reverse() -> None:
    assert isinstance(api_error(409, {"reason": "AlreadyExists"}), Conflict)
    assert not isinstance(api_error(409, {"reason": "Conflict"}), AlreadyExists)


def test_too_large_resource_version_is_recognised_from_its_cause() -> None:
    status = {
        "reason": "Timeout",
        "message": "Too large resource version",
        "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large"}]},
    }
    assert isinstance(api_error(504, status), ResourceVersionTooLarge)


def test_a_write_into_a_terminating_namespace_is_told_from_a_refused_permission() -> None:
    """The namespace lifecycle admission's 403, as kube-apiserver 1.36 answers it."""
    status = {
        "reason": "Forbidden",
        "message": 'roles "r" is forbidden: unable to create new content in namespace x because '
        "it is being terminated",
        "details": {
            "name": "r",
            "kind": "roles",
            "causes": [
                {"reason": "NamespaceTerminating", "message": "namespace x is being terminated",
                 "field": "metadata.namespace"}
            ],
        },
    }  # fmt: skip
    assert type(api_error(403, status)) is NamespaceTerminating
    assert isinstance(api_error(403, status), Forbidden)
    assert type(api_error(403, {"reason": "Forbidden", "message": "rbac"})) is Forbidden


def test_retry_after_from_header_or_details() -> None:
    assert api_error(429, {"reason": "TooManyRequests"}, "3").retry_after == 3.0
    from_details = api_error(429, {"details": {"retryAfterSeconds": 7}})
    assert isinstance(from_details, TooManyRequests)
    assert from_details.retry_after == 7.0
    assert api_error(429, {}, "not-a-number").retry_after is None


def test_body_without_status_keeps_a_message() -> None:
    err = api_error(502, None)
    assert err.message == "HTTP 502"
    assert "502" in str(err)
