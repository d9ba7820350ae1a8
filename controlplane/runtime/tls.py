"""One default TLS context per process, shared by every HTTP client that does not bring its own.

Why: httpx builds a fresh ``SSLContext`` for each client made with its default ``verify=True``,
loading the whole CA bundle every time (about 23 ms of CPU on this project's 2-core machine).
The probes, the node stand-in and the simulators make a client per member they watch, and most of
them only ever speak plain HTTP to a pod, so that work was thrown away once per member and process
start (about 100 s of CPU in one e2e run, docs/testing.md). The context is the one httpx would
build, so verification is unchanged for any https URL; ``SSLContext`` is safe to share between
clients and threads.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def default_tls_context() -> ssl.SSLContext:
    """httpx's own default (verify on, its CA bundle), built on first use and then reused."""
    return httpx.create_ssl_context()
