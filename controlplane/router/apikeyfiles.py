"""The router-proxy's API keys from a folder: the Secret's volume, read at start and re-read.

``--api-keys-dir DIR`` is where the operator mounts the ModelRouter's ``spec.auth.apiKeySecret``
(docs/modelrouter.md). Each file of it is one Secret data key, its content one accepted key
(:func:`~controlplane.router.apikeys.parse_keys`). The kubelet's own entries (``..data``, the
timestamped folder it points at) start with ``..`` and are skipped; the data keys are symlinks
into ``..data``, followed.

The kubelet updates a Secret volume in place when the Secret changes (it writes a new
timestamped folder and swaps the ``..data`` symlink), so :class:`ApiKeyFiles` re-reads the folder
every ``--api-keys-reload-interval`` seconds and swaps in the new keys when they differ: rotation
needs no restart. Reading a handful of small files every few seconds costs nothing the data path
sees; the request path only reads :meth:`ApiKeyFiles.current`. A read that fails (the folder
gone, a file unreadable) keeps the keys read last and says so: the kubelet never removes a
mounted volume under a running container, so such a failure is a fault to report, not a revocation.
Logs name the Secret's data keys, never their values.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

import anyio

from controlplane.router.apikeys import ApiKeys, parse_keys

log = logging.getLogger(__name__)

#: Seconds between two reads of the folder (``--api-keys-reload-interval``): a few seconds on top
#: of the kubelet's own delay in updating the volume (its sync period, about a minute).
DEFAULT_RELOAD_INTERVAL_SECONDS: Final = 5.0
#: The kubelet's own entries in a Secret volume start with this.
KUBELET_PREFIX: Final = ".."


class ApiKeyDirError(Exception):
    """The keys' folder cannot be read; the message names it and why."""


def read_key_dir(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` (symlinks followed, the kubelet's ``..`` entries and folders
    skipped): its name and content. Raises :class:`ApiKeyDirError`."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as err:
        raise ApiKeyDirError(f"cannot read the API keys' folder {folder}: {err}") from err
    values: dict[str, bytes] = {}
    for entry in entries:
        if entry.name.startswith(KUBELET_PREFIX) or not entry.is_file():
            continue
        try:
            values[entry.name] = entry.read_bytes()
        except OSError as err:
            raise ApiKeyDirError(f"cannot read the API key file {entry}: {err}") from err
    return values


def load_keys(folder: Path) -> tuple[ApiKeys, list[str]]:
    """The accepted keys in ``folder``, and the names of the entries left out (empty, or not
    visible ASCII). Raises :class:`ApiKeyDirError`."""
    return parse_keys(read_key_dir(folder))


class ApiKeyFiles:
    """The keys read from ``folder``, re-read every ``interval`` seconds (a manager runnable).
    Each change is logged once: how many keys and their names, the entries left out, and a
    warning when none is left (every ``/v1/`` request is then refused)."""

    needs_leader_election = False

    def __init__(self, folder: Path, interval: float = DEFAULT_RELOAD_INTERVAL_SECONDS) -> None:
        self.folder = folder
        self.interval = interval
        # A folder that cannot be read stops the proxy's start (ApiKeyDirError).
        self._read = load_keys(folder)
        self._keys = self._read[0]
        self._report("API keys required on /v1/")

    def current(self) -> ApiKeys:
        """The keys accepted now (one attribute read: the request path calls it)."""
        return self._keys

    async def start(self) -> None:
        while True:
            await anyio.sleep(self.interval)
            await self.reload()

    async def reload(self) -> bool:
        """Read the folder again; True when what it holds changed."""
        try:
            read = await anyio.to_thread.run_sync(load_keys, self.folder)
        except ApiKeyDirError as err:
            log.warning("%s; the keys read before stay accepted", err)
            return False
        if read == self._read:
            return False
        self._read = read
        self._keys = read[0]
        self._report("API keys reloaded")
        return True

    def _report(self, what: str) -> None:
        keys, skipped = self._read
        names = ", ".join(keys.names) or "none"
        log.info("%s: %d from %s (%s)", what, len(keys.digests), self.folder, names)
        if skipped:
            log.warning(
                "API keys in %s left out (empty, or not visible ASCII): %s",
                self.folder,
                ", ".join(skipped),
            )
        if not keys.digests:
            log.warning("no API key in %s: every request to /v1/ is refused with 401", self.folder)
