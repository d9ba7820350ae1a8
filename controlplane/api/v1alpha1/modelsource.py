"""Where a model's weights come from: the forms of ``spec.model.source``, parsed.

Pure (no I/O): the InferenceService controller reads a parsed source to build the server's pod
(which volume, which mount, which init container), the fetcher (``controlplane fetch-model``) to
know what to download and where it lands. The API server refuses a malformed source first, by the
CEL rules of :data:`SOURCE_RULES`; :func:`parse_source` refuses the same strings with the same
messages, so an object that got past an older schema is refused by name here too, never guessed.

The forms (docs/inferenceservice.md, "Model weights"):

* ``/abs/path``: a file already in the server's image; nothing is mounted. This is what a plain
  path always meant, so stored objects keep their meaning.
* ``file:///abs/path``: a file on the node, mounted read-only (a hostPath volume).
* ``pvc://CLAIM/path``: a file in a PersistentVolumeClaim of the namespace, mounted read-only.
* ``https://HOST/.../FILE``: downloaded once into the node's cache, then mounted read-only;
  ``http://`` too, but only with ``sha256`` (without TLS only the digest proves the bytes).
* ``hf://ORG/REPO/path/FILE[@REVISION]``: a file of a Hugging Face Hub repository (revision
  ``main`` when absent), downloaded into the node's cache as ``https://`` is.
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from typing import Final

from controlplane.api.fields import Rule


class SourceError(ValueError):
    """A ``spec.model.source`` that no form accepts; the message names what is wrong."""


class SourceKind(enum.StrEnum):
    IMAGE = "image"
    FILE = "file"
    PVC = "pvc"
    HTTPS = "https"
    HTTP = "http"
    HF = "hf"


#: Revision of an ``hf://`` source that names none (the Hub's default branch).
DEFAULT_HF_REVISION: Final = "main"
SHA256_PATTERN: Final = r"^[a-f0-9]{64}$"

_PATH = r"/[^?#\s]*[^/?#\s]"
_CLAIM = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_HF_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_HF_REVISION = r"[A-Za-z0-9][A-Za-z0-9._/-]*"

#: One regular expression per form, each anchored: what the CEL rules and the parser both test.
IMAGE_PATTERN: Final = rf"^{_PATH}$"
FILE_PATTERN: Final = rf"^file://{_PATH}$"
PVC_PATTERN: Final = rf"^pvc://{_CLAIM}{_PATH}$"
HTTPS_PATTERN: Final = rf"^https?://[^/?#\s@]+{_PATH}([?][^#\s]*)?$"
HF_PATTERN: Final = rf"^hf://{_HF_NAME}/{_HF_NAME}/[^@?#\s]*[^/@?#\s](@{_HF_REVISION})?$"
_DOT_SEGMENT: Final = r"(^|/)[.][.]?(/|$|@|[?])"

MSG_SCHEME: Final = (
    "source must be an absolute path (a file in the image) or a file://, pvc://, https://, "
    "http:// or hf:// URI"
)
MSG_DOTS: Final = "source must not contain '.' or '..' path segments"
MSG_IMAGE: Final = "a path source is /ABSOLUTE/PATH/FILE (a file in the server's image)"
MSG_FILE: Final = "a file:// source is file:///ABSOLUTE/PATH/FILE (three slashes: no host)"
MSG_PVC: Final = (
    "a pvc:// source is pvc://CLAIM/PATH/FILE: a claim name (lower-case DNS name), then the "
    "file's path inside the claim"
)
MSG_HTTPS: Final = "an https:// source is https://HOST/PATH/FILE (a file, not a folder)"
MSG_HTTP_DIGEST: Final = (
    "an http:// source needs sha256: without TLS only the digest proves the bytes"
)
MSG_HF: Final = "an hf:// source is hf://ORG/REPO/PATH/FILE or hf://ORG/REPO/PATH/FILE@REVISION"

_FORMS: Final = (
    ("/", IMAGE_PATTERN, MSG_IMAGE),
    ("file://", FILE_PATTERN, MSG_FILE),
    ("pvc://", PVC_PATTERN, MSG_PVC),
    ("https://", HTTPS_PATTERN, MSG_HTTPS),
    ("http://", HTTPS_PATTERN, MSG_HTTPS.replace("https", "http")),
    ("hf://", HF_PATTERN, MSG_HF),
)


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: The schema's side of the parser: one CEL rule per form, on ``spec.model`` (so the http rule
#: can read ``sha256``), each message naming the form that is malformed.
SOURCE_RULES: Final = (
    Rule(
        "self.source.matches(" + _cel_string(r"^(/|file://|pvc://|https://|http://|hf://)") + ")",
        MSG_SCHEME,
        field_path=".source",
    ),
    Rule(
        "!self.source.matches(" + _cel_string(_DOT_SEGMENT) + ")",
        MSG_DOTS,
        field_path=".source",
    ),
    *(
        Rule(
            f"!self.source.startsWith({_cel_string(prefix)}) || "
            f"self.source.matches({_cel_string(pattern)})",
            message,
            field_path=".source",
        )
        for prefix, pattern, message in _FORMS
    ),
    Rule(
        "!self.source.startsWith('http://') || has(self.sha256)",
        MSG_HTTP_DIGEST,
        field_path=".source",
    ),
)


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """One parsed ``spec.model.source``; which fields are set depends on :attr:`kind`."""

    kind: SourceKind
    raw: str
    #: image/file: the absolute path; pvc: the path inside the claim (no leading slash);
    #: http(s): the URL; hf: the file's path inside the repository.
    path: str
    claim: str | None = None
    #: hf: ``ORG/REPO``.
    repo: str | None = None
    #: hf: the revision (branch, tag or commit), :data:`DEFAULT_HF_REVISION` when absent.
    revision: str | None = None

    @property
    def filename(self) -> str:
        """The file's own name: the last segment of its path (of a URL, without the query)."""
        return self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]

    @property
    def fetched(self) -> bool:
        """Downloaded into the node's cache (rather than read where it is)."""
        return self.kind in (SourceKind.HTTPS, SourceKind.HTTP, SourceKind.HF)

    @property
    def cache_key(self) -> str:
        """This source's folder under the node cache, one per source and revision: two members
        (or two pods) naming the same file share it, two revisions never do."""
        if self.kind is SourceKind.HF:
            return f"hf/{self.repo}/{self.revision}"
        if self.kind in (SourceKind.HTTPS, SourceKind.HTTP):
            return f"{self.kind.value}/{hashlib.sha256(self.path.encode()).hexdigest()[:16]}"
        raise ValueError(f"a {self.kind.value} source is not fetched: it has no cache entry")

    @property
    def file_in_cache(self) -> str:
        """Where the file lands inside its cache folder: the repository path for hf (the Hub
        client keeps it), the file's name for http(s)."""
        if self.kind is SourceKind.HF:
            return self.path
        if self.kind in (SourceKind.HTTPS, SourceKind.HTTP):
            return self.filename
        raise ValueError(f"a {self.kind.value} source is not fetched: it has no cache entry")


def parse_source(raw: str, sha256: str | None = None) -> ParsedSource:
    """Parse ``raw`` as the schema would accept it, or raise :class:`SourceError` with the
    message the schema gives for it."""
    if re.search(_DOT_SEGMENT, raw):
        raise SourceError(f"{MSG_DOTS}: {raw!r}")
    for prefix, pattern, message in _FORMS:
        if raw.startswith(prefix) and not (prefix == "/" and raw.startswith("//")):
            if not re.match(pattern, raw):
                raise SourceError(f"{message}: {raw!r}")
            return _parsed(prefix, raw, sha256)
    raise SourceError(f"{MSG_SCHEME}: {raw!r}")


def _parsed(prefix: str, raw: str, sha256: str | None) -> ParsedSource:
    rest = raw[len(prefix) :]
    if prefix == "/":
        return ParsedSource(SourceKind.IMAGE, raw, raw)
    if prefix == "file://":
        return ParsedSource(SourceKind.FILE, raw, rest)
    if prefix == "pvc://":
        claim, path = rest.split("/", 1)
        return ParsedSource(SourceKind.PVC, raw, path.lstrip("/"), claim=claim)
    if prefix == "http://" and not sha256:
        raise SourceError(f"{MSG_HTTP_DIGEST}: {raw!r}")
    if prefix in ("https://", "http://"):
        kind = SourceKind.HTTPS if prefix == "https://" else SourceKind.HTTP
        return ParsedSource(kind, raw, raw)
    org, name, remainder = rest.split("/", 2)
    path, _, revision = remainder.partition("@")
    return ParsedSource(
        SourceKind.HF,
        raw,
        path,
        repo=f"{org}/{name}",
        revision=revision or DEFAULT_HF_REVISION,
    )
