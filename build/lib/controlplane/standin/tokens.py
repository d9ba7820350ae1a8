"""ServiceAccount credentials for the processes the stand-in plays pods with.

A kubelet mounts a pod's ServiceAccount token (a TokenRequest it makes as the node); the stand-in
does the same as the admin it runs as, and hands the token to the process in a kubeconfig, since
a local process has no ``/var/run/secrets``. Also used by :mod:`controlplane.local.system` for the
operator's and the demo proxy's identities.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import yaml

from controlplane.runtime.client import KubeClient
from controlplane.runtime.config import ClientConfig
from controlplane.runtime.resources import SERVICE_ACCOUNTS
from controlplane.standin.builders import token_kubeconfig

#: Lifetime asked for a token: longer than any local run (nothing here refreshes a token, where
#: a kubelet would rotate the projected one).
TOKEN_SECONDS: Final = 7 * 24 * 3600


async def service_account_token(
    admin: KubeClient, namespace: str, account: str, seconds: int = TOKEN_SECONDS
) -> str:
    """A token for ``namespace/account`` (TokenRequest, as the kubelet would mount)."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": account},
        "spec": {"expirationSeconds": seconds},
    }
    answer = await admin.create(SERVICE_ACCOUNTS, request, namespace, subresource="token")
    return str(answer["status"]["token"])


def write_token_kubeconfig(config: ClientConfig, token: str, path: Path) -> Path:
    """A kubeconfig at ``path`` (mode 0600) for ``config``'s server and trust, as ``token``."""
    upstream = config.upstream
    ca_file = upstream.ssl_ca_cert if upstream is not None and upstream.verify_ssl else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(token_kubeconfig(config.server, ca_file, token)))
    return path
