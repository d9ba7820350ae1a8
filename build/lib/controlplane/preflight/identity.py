"""Who is asking, worked out offline from the credentials, for the verdict cache's key.

The API server can say who we are (a SelfSubjectReview), but that is one more call that fails in
exactly the stall the cache exists to ride through. RBAC decides by user name and groups, and the
credential already states them, so the key is derived locally:

- a client certificate: its subject (CN is the user, O the groups) and issuer, not its serial, so
  a renewed certificate for the same user keeps its cached verdicts;
- a JWT bearer token (ServiceAccount tokens, OIDC): the ``iss`` and ``sub`` claims (and
  ``groups`` when present), so a rotated projected token keeps the same key. The signature is not
  checked: this is a cache key for our own credential, not an authentication;
- any other bearer token: its SHA-256 (the token itself is never written anywhere);
- impersonation: the impersonated user and groups, on top of the above.

Only the digest goes into the cache file; the description is for log messages.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from cryptography import x509

from controlplane.runtime.config import ClientConfig


@dataclass(frozen=True, slots=True)
class Identity:
    """A stable digest of the credential's identity, and a human description of it."""

    key: str
    description: str


def _certificate_part(cert_file: str | None) -> tuple[dict[str, Any], str] | None:
    if not cert_file:
        return None
    try:
        certificate = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
    except (OSError, ValueError):
        return None
    subject = certificate.subject.rfc4514_string()
    issuer = certificate.issuer.rfc4514_string()
    return {"x509": {"subject": subject, "issuer": issuer}}, f"client certificate {subject}"


def _jwt_claims(token: str) -> dict[str, Any] | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = msgspec.json.decode(
            base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        )
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) and claims.get("sub") else None


def _token_part(headers: list[tuple[str, str]]) -> tuple[dict[str, Any], str] | None:
    values = [v for k, v in headers if k.lower() == "authorization"]
    if not values:
        return None
    scheme, _, token = values[-1].partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else values[-1]
    claims = _jwt_claims(token)
    if claims is not None:
        stable = {k: claims.get(k) for k in ("iss", "sub", "groups") if k in claims}
        return {"jwt": stable}, f"token of {claims['sub']}"
    digest = hashlib.sha256(token.encode()).hexdigest()
    return {"token-sha256": digest}, f"bearer token sha256:{digest[:12]}"


def identity_of(config: ClientConfig) -> Identity:
    """The identity ``config`` authenticates as, without asking the API server."""
    parts: dict[str, Any] = {}
    described: list[str] = []
    if config.upstream is not None:
        cert = _certificate_part(config.upstream.cert_file)
        if cert is not None:
            parts.update(cert[0])
            described.append(cert[1])
    # The same headers a request would carry (runs a token refresh hook when one is set).
    token_part = _token_part(config.auth_headers())
    if token_part is not None:
        parts.update(token_part[0])
        described.append(token_part[1])
    if config.impersonation is not None:
        parts["impersonate"] = {
            "user": config.impersonation.user,
            "groups": sorted(config.impersonation.groups),
        }
        described.append(f"impersonating {config.impersonation.user}")
    if not parts:
        parts["anonymous"] = True
        described.append("anonymous")
    key = hashlib.sha256(msgspec.json.encode(parts, order="sorted")).hexdigest()
    return Identity(key, ", ".join(described))
