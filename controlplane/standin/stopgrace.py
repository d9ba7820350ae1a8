"""How long a Terminating pod's processes may take to stop, as a kubelet reads it.

A kubelet sends SIGTERM when a pod is marked for deletion and SIGKILL once the pod's grace period
has passed: ``metadata.deletionGracePeriodSeconds`` (what the deletion asked for: ``kubectl delete
--grace-period``, an eviction's, else the pod's own), else ``spec.terminationGracePeriodSeconds``,
else the API's default of 30 s. The stand-in used a fixed 10 s of its own, so under ``make dev`` a
router-proxy rollout cut a stream the proxy was relaying within its 600 s (issue 46).

Pure: a pod in, seconds out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: The API server's default ``terminationGracePeriodSeconds``.
DEFAULT_GRACE_SECONDS: Final = 30.0


def grace_seconds(pod: Mapping[str, Any]) -> float:
    """Seconds between SIGTERM and SIGKILL for ``pod`` (the module docstring says which field)."""
    for value in (
        (pod.get("metadata") or {}).get("deletionGracePeriodSeconds"),
        (pod.get("spec") or {}).get("terminationGracePeriodSeconds"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return DEFAULT_GRACE_SECONDS
