"""The tests' HTTP client: httpx's, on the process's one default TLS context.

Why: httpx builds an ``SSLContext`` (loading the CA bundle, about 23 ms of CPU) for every client
made without one, and the tests make one per poll or per request to plain-HTTP members and
proxies; :func:`controlplane.runtime.tls.default_tls_context` is the one they share.
"""

from __future__ import annotations

from typing import Any

import httpx

from controlplane.runtime.tls import default_tls_context


def http_client(**options: Any) -> httpx.AsyncClient:
    """``httpx.AsyncClient(**options)`` with the shared TLS context."""
    return httpx.AsyncClient(verify=default_tls_context(), **options)
