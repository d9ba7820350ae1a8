"""Where the API server is and how to authenticate: delegated to the ``kubernetes`` package.

Kubeconfig parsing, in-cluster files, exec credential plugins and token refresh are subtle and
well kept upstream, so they are not rewritten here. This module only turns the upstream
``Configuration`` into what our own HTTP client needs: a base URL, a TLS context and, per request,
a fresh ``Authorization`` header.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config


@dataclass
class Impersonation:
    """Act as another identity (``Impersonate-User`` / ``Impersonate-Group`` headers)."""

    user: str
    groups: tuple[str, ...] = ()

    def headers(self) -> list[tuple[str, str]]:
        return [("Impersonate-User", self.user)] + [("Impersonate-Group", g) for g in self.groups]


@dataclass
class ClientConfig:
    """Connection settings for one API server and one identity."""

    server: str
    ssl_context: ssl.SSLContext
    upstream: k8s_client.Configuration | None = None
    impersonation: Impersonation | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)

    def auth_headers(self) -> list[tuple[str, str]]:
        """Headers for the next request; re-reads the token so rotated or refreshed tokens apply."""
        headers = list(self.extra_headers.items())
        if self.upstream is not None:
            # Runs the refresh hook (exec plugins, in-cluster projected tokens) when one is set.
            token = self.upstream.get_api_key_with_prefix("BearerToken", alias="authorization")
            if token:
                headers.append(("Authorization", token))
        if self.impersonation is not None:
            headers += self.impersonation.headers()
        return headers

    def impersonating(self, user: str, groups: tuple[str, ...] = ()) -> ClientConfig:
        """The same connection acting as ``user`` (the caller needs the ``impersonate`` verb)."""
        return ClientConfig(
            self.server,
            self.ssl_context,
            self.upstream,
            Impersonation(user, groups),
            dict(self.extra_headers),
        )

    def with_bearer_token(self, token: str) -> ClientConfig:
        """The same server and trust, authenticating only with ``token`` (no client certificate)."""
        cafile = self.upstream.ssl_ca_cert if self.upstream is not None else None
        context = ssl.create_default_context(cafile=cafile)
        if self.upstream is not None and not self.upstream.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return ClientConfig(
            self.server, context, extra_headers={"Authorization": f"Bearer {token}"}
        )

    @classmethod
    def from_upstream(cls, upstream: k8s_client.Configuration) -> ClientConfig:
        if upstream.verify_ssl:
            context = ssl.create_default_context(cafile=upstream.ssl_ca_cert)
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if upstream.cert_file:
            context.load_cert_chain(upstream.cert_file, upstream.key_file)
        return cls(server=upstream.host.rstrip("/"), ssl_context=context, upstream=upstream)

    @classmethod
    def from_kubeconfig(
        cls, path: str | Path | None = None, context: str | None = None
    ) -> ClientConfig:
        """Load a kubeconfig (``$KUBECONFIG`` or ``~/.kube/config`` when ``path`` is None)."""
        upstream = k8s_client.Configuration()
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(path) if path is not None else None,
            context=context,
            client_configuration=upstream,
            persist_config=False,
        )
        return cls.from_upstream(upstream)

    @classmethod
    def in_cluster(cls) -> ClientConfig:
        """The pod's ServiceAccount; the projected token is re-read as the kubelet rotates it."""
        upstream = k8s_client.Configuration()
        k8s_config.load_incluster_config(client_configuration=upstream)  # type: ignore[no-untyped-call]
        return cls.from_upstream(upstream)

    @classmethod
    def load(cls, kubeconfig: str | Path | None = None, context: str | None = None) -> ClientConfig:
        """An explicit kubeconfig, else ``$KUBECONFIG``, else in-cluster, else the default file."""
        if (
            kubeconfig is None
            and "KUBECONFIG" not in os.environ
            and "KUBERNETES_SERVICE_HOST" in os.environ
        ):
            return cls.in_cluster()
        return cls.from_kubeconfig(kubeconfig, context)
