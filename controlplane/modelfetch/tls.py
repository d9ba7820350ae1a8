"""The certificates a download trusts: ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set, else certifi.

A model server behind a private CA (a company's mirror, the tests' file server) is trusted the
way every TLS client of a container is told to: ``SSL_CERT_FILE`` (a PEM bundle) or
``SSL_CERT_DIR`` (a hashed folder); the operator sets ``SSL_CERT_FILE`` to the bundle of
``spec.model.caBundle`` (a ConfigMap key mounted in the fetch container only). Read here
explicitly, for both downloaders, rather than left to each HTTP library's own reading of the
environment: ``httpx`` and ``huggingface_hub``'s client read it differently (one falls back to
certifi, the other to the system store), and a shared client built before the variable was set
would not see it. When a variable is set it *replaces* the default roots, as in OpenSSL; put the
public roots in the bundle too when the same pod also downloads from public hosts.
"""

from __future__ import annotations

import os
import ssl


def ssl_context() -> ssl.SSLContext:
    """A client context verifying servers against the roots the environment names."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile or capath:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi comes with httpx
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())
