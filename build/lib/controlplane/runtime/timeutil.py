"""Kubernetes time formats, for the fields the framework writes itself."""

from __future__ import annotations

import datetime


def micro_time(moment: datetime.datetime | None = None) -> str:
    """A ``metav1.MicroTime`` string: RFC 3339 with microseconds, in UTC."""
    moment = moment or datetime.datetime.now(datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339(moment: datetime.datetime | None = None) -> str:
    """A ``metav1.Time`` string: RFC 3339 to the second, in UTC."""
    moment = moment or datetime.datetime.now(datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
