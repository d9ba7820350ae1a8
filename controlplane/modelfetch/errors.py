"""Why a fetch failed: one reason per kind of failure, its exit code, its termination message.

The operator reads a failed fetch container's ``state.terminated``: the exit code tells the
prefetch Job whether retrying can help (its ``podFailurePolicy`` fails the Job at once on 3), and
the message, ``REASON: message``, is what the InferenceService's condition shows. So the reasons
are a closed set, each permanent (exit 3: the spec must change) or not (exit 1: the Job's backoff
retries, after this process's own retries of transient errors ran out).
"""

from __future__ import annotations

import enum
import errno
import shutil
import sys
from pathlib import Path
from typing import Final

#: Kubernetes keeps at most 4 KiB of a termination message.
TERMINATION_MESSAGE_LIMIT: Final = 4096
DEFAULT_TERMINATION_LOG: Final = Path("/dev/termination-log")
EXIT_OK: Final = 0
EXIT_RETRYABLE: Final = 1
EXIT_PERMANENT: Final = 3


class Reason(enum.StrEnum):
    NOT_FOUND = "NotFound"
    UNAUTHORIZED = "Unauthorized"
    FORBIDDEN = "Forbidden"
    DIGEST_MISMATCH = "DigestMismatch"
    DISK_FULL = "DiskFull"
    UNREACHABLE = "Unreachable"
    SERVER_ERROR = "ServerError"
    INVALID = "Invalid"


#: Failures no retry can mend: the source, the token or the digest of the spec must change.
PERMANENT: Final = frozenset(
    {
        Reason.NOT_FOUND,
        Reason.UNAUTHORIZED,
        Reason.FORBIDDEN,
        Reason.DIGEST_MISMATCH,
        Reason.INVALID,
    }
)
#: Failures this process retries itself (with backoff, resuming) before giving up. A full disk
#: is neither: not permanent (space can be freed) but not worth retrying within seconds.
TRANSIENT: Final = frozenset({Reason.UNREACHABLE, Reason.SERVER_ERROR})


class FetchError(Exception):
    """A failed fetch, with the reason the operator reads."""

    def __init__(self, reason: Reason, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        #: Seconds the server asked to wait (``Retry-After``), when it did.
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        return self.reason in TRANSIENT

    @property
    def exit_code(self) -> int:
        return EXIT_PERMANENT if self.reason in PERMANENT else EXIT_RETRYABLE

    @property
    def termination_message(self) -> str:
        """``REASON: message``, cut to what Kubernetes keeps (4 KiB, whole characters)."""
        text = f"{self.reason.value}: {self.message}".encode()
        return text[:TERMINATION_MESSAGE_LIMIT].decode(errors="ignore")

    def __str__(self) -> str:
        return self.termination_message


def is_disk_full(err: OSError) -> bool:
    """ENOSPC, or a quota's EDQUOT: the same to whoever must free space."""
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


def free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def digest_mismatch(actual: str, expected: str) -> FetchError:
    return FetchError(
        Reason.DIGEST_MISMATCH,
        f"sha256 of the download is {actual}, spec.model.sha256 is {expected}",
    )


def disk_full(folder: Path, needed: int | None, free: int | None) -> FetchError:
    """A full disk, naming how many bytes the rest of the file needs and how many are free."""
    need = f"{needed} more bytes" if needed is not None else "more space"
    have = f"{free} bytes are free" if free is not None else "the free space is unknown"
    return FetchError(Reason.DISK_FULL, f"the file needs {need} in {folder}, {have}")


def for_status(status: int, what: str, retry_after: float | None = None) -> FetchError:
    """The reason an HTTP status answered for ``what`` (a URL or a Hub file) stands for."""
    if status in (404, 410):
        return FetchError(Reason.NOT_FOUND, f"{what} answered {status}: no such file")
    if status == 401:
        return FetchError(
            Reason.UNAUTHORIZED,
            f"{what} answered 401: a token is needed, or the one given (HF_TOKEN, "
            "spec.model.tokenSecret) is not valid",
        )
    if status == 403:
        return FetchError(
            Reason.FORBIDDEN, f"{what} answered 403: the token given may not read this file"
        )
    if status in (408, 429) or status >= 500:
        return FetchError(Reason.SERVER_ERROR, f"{what} answered {status}", retry_after=retry_after)
    return FetchError(Reason.INVALID, f"{what} answered {status}")


def write_termination_message(path: Path, text: str) -> None:
    """Write the termination message; outside a pod there is none to write.

    A folder that does not exist means no pod; the default path is written only when it is
    there (the kubelet mounts it into every container), so a run on a workstation does not
    create a file in its ``/dev``.
    """
    if not path.parent.is_dir() or (path == DEFAULT_TERMINATION_LOG and not path.exists()):
        return
    try:
        path.write_text(text)
    except OSError as err:
        print(f"warning: cannot write the termination message to {path}: {err}", file=sys.stderr)


def report(err: FetchError, termination_log: Path) -> int:
    """Say why the fetch failed (termination message and stderr); the exit code it earns."""
    text = err.termination_message
    write_termination_message(termination_log, text)
    print(text, file=sys.stderr)
    return err.exit_code
