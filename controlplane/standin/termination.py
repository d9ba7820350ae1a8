"""How a container's end is reported: exit code, reason and termination message, as a kubelet.

A kubelet gives each container a file at ``terminationMessagePath`` (default
``/dev/termination-log``) and, when the container ends, reports what it wrote there as
``state.terminated.message`` (at most :data:`MAX_MESSAGE_BYTES`). With
``terminationMessagePolicy: FallbackToLogsOnError``, a container that failed and wrote nothing
gets the end of its log instead: its last :data:`FALLBACK_LOG_LINES` lines, at most
:data:`FALLBACK_LOG_BYTES`. A local process cannot have ``/dev/termination-log``, so the stand-in
gives each container a file of the pod (:func:`termination_file`) and tells the process where it
is: see :mod:`controlplane.standin.commands`. Pure except :func:`termination_message`, which reads
the two files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from controlplane.standin.logfiles import tail

DEFAULT_TERMINATION_PATH: Final = "/dev/termination-log"
FALLBACK_TO_LOGS: Final = "FallbackToLogsOnError"
#: A kubelet's limits (``kubecontainer.MaxContainerTerminationMessage*``).
MAX_MESSAGE_BYTES: Final = 4096
FALLBACK_LOG_LINES: Final = 80
FALLBACK_LOG_BYTES: Final = 2048


def termination_path(container: Mapping[str, Any]) -> str:
    """The path the container writes its termination message to, as it sees it."""
    return str(container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH)


def termination_file(scratch: Path, container: str) -> Path:
    """The pod's local file that plays the container's termination message path."""
    return scratch / "termination" / container


def exit_code(returncode: int) -> int:
    """A process's return code as a container's exit code: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def exit_reason(code: int) -> str:
    """``Completed`` for 0, ``Error`` otherwise (no OOM killer plays here)."""
    return "Completed" if code == 0 else "Error"


def message_from(
    policy: str | None, code: int, written: bytes, log_tail: bytes | None = None
) -> str:
    """The reported message: what the container wrote, else (failed, fallback policy) the end of
    its log. ``log_tail`` is already cut to the fallback's limits."""
    text = written[:MAX_MESSAGE_BYTES]
    if not text.strip() and policy == FALLBACK_TO_LOGS and code != 0 and log_tail:
        text = log_tail
    return text.decode(errors="replace")


def termination_message(
    container: Mapping[str, Any], code: int, message_file: Path, log_file: Path
) -> str:
    """Read the container's message file (and its log, if the policy falls back to it)."""
    try:
        written = message_file.read_bytes()[:MAX_MESSAGE_BYTES]
    except OSError:
        written = b""
    policy = container.get("terminationMessagePolicy")
    fallback = None
    if not written.strip() and policy == FALLBACK_TO_LOGS and code != 0:
        fallback = tail(log_file, FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES)
    return message_from(policy, code, written, fallback)
