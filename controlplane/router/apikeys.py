"""The router-proxy's API key check, pure: the accepted keys, and what one request presented.

A ModelRouter may name a Secret (``spec.auth.apiKeySecret``); every data key of it holds one
accepted key, so a key is rotated by adding the new one before removing the old. The proxy reads
them from the Secret's volume (:mod:`controlplane.router.apikeyfiles`) into an :class:`ApiKeys`
and checks each ``/v1/`` request with :func:`check` before it reads the body (docs/router.md,
"API keys").

* **Only ``Authorization: Bearer <key>``** is read: it is what openai-python and every
  OpenAI-compatible client send. ``api-key`` (Azure's) and ``x-api-key`` are not: a second place
  for the secret is a second thing to strip before forwarding and to keep out of logs, for
  clients that can all send the first. The scheme is case-insensitive (RFC 7235); more than one
  ``Authorization`` header is malformed (which one would count?).
* **Constant time**: only SHA-256 digests of the keys are kept (the keys are not in memory to be
  printed by accident), the presented key is hashed the same way, and
  :func:`hmac.compare_digest` compares it with *every* known digest, with no early exit: how long
  a check takes says neither which key nor how much of one matched. Hashing first also makes the
  compared lengths equal, which ``compare_digest`` alone would leak.
* **What a key may be**: the value with surrounding whitespace (a file's trailing newline)
  removed, of visible ASCII only (what an HTTP header value can carry unchanged); others are
  left out and named (never shown) by :func:`parse_keys`.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from controlplane.router.errors import InvalidApiKey

#: The request header the key comes in (ASGI header names are lower case).
AUTHORIZATION: Final = b"authorization"
SCHEME: Final = b"bearer"


class Verdict(enum.Enum):
    """What a request's credentials are worth."""

    ACCEPTED = "accepted"
    #: No ``Authorization`` header.
    MISSING = "missing"
    #: Not one ``Authorization: Bearer <key>`` header.
    MALFORMED = "malformed"
    #: A key none of the accepted ones is (or there are none).
    WRONG = "wrong"


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """The accepted keys, as digests, and the Secret's data keys they came from (for logs)."""

    names: tuple[str, ...] = ()
    digests: tuple[bytes, ...] = ()

    def accepts(self, key: bytes) -> bool:
        """Whether ``key`` is one of the accepted keys; every digest is compared, always."""
        presented = _digest(key)
        found = False
        for known in self.digests:
            found |= hmac.compare_digest(known, presented)
        return found


def _usable(value: bytes) -> bool:
    return bool(value) and all(0x21 <= byte <= 0x7E for byte in value)


def parse_keys(values: Mapping[str, bytes]) -> tuple[ApiKeys, list[str]]:
    """The accepted keys from the Secret's entries (data key → value), and the names of the
    entries left out: empty, or with bytes a header cannot carry (whitespace inside, control or
    non-ASCII bytes). The values are never part of what is returned."""
    names: list[str] = []
    digests: list[bytes] = []
    skipped: list[str] = []
    for name in sorted(values):
        value = values[name].strip()
        if _usable(value):
            names.append(name)
            digests.append(_digest(value))
        else:
            skipped.append(name)
    return ApiKeys(tuple(names), tuple(digests)), skipped


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes | Verdict:
    """The key a request's ASGI ``headers`` carry, or :attr:`Verdict.MISSING` /
    :attr:`Verdict.MALFORMED`."""
    found: bytes | None = None
    for name, value in headers:
        if name != AUTHORIZATION:
            continue
        if found is not None:
            return Verdict.MALFORMED
        found = value
    if found is None:
        return Verdict.MISSING
    scheme, _, token = found.strip().partition(b" ")
    token = token.strip()
    if scheme.lower() != SCHEME or not token:
        return Verdict.MALFORMED
    return token


def check(keys: ApiKeys, headers: Iterable[tuple[bytes, bytes]]) -> Verdict:
    """The verdict on a request's ``headers`` against ``keys``."""
    key = presented_key(headers)
    if isinstance(key, Verdict):
        return key
    return Verdict.ACCEPTED if keys.accepts(key) else Verdict.WRONG


#: The client's answer to each refusal: the message (which never repeats what was sent) and the
#: ``WWW-Authenticate`` challenge (RFC 6750: no ``error`` when no credentials came).
_REFUSALS: Final = {
    Verdict.MISSING: (
        "No API key was provided: send it as 'Authorization: Bearer <key>'",
        "Bearer",
    ),
    Verdict.MALFORMED: (
        "The API key must come as one 'Authorization: Bearer <key>' header",
        'Bearer error="invalid_request"',
    ),
    Verdict.WRONG: (
        "The API key provided is not accepted by this router",
        'Bearer error="invalid_token"',
    ),
}


def refusal(verdict: Verdict) -> InvalidApiKey:
    """The 401 for a verdict other than :attr:`Verdict.ACCEPTED`."""
    message, challenge = _REFUSALS[verdict]
    return InvalidApiKey(message, challenge=challenge)
