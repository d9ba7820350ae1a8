"""The image a router's proxy runs when its ModelRouter names none: the operator's own.

The proxy is a subcommand of the operator's console script, so the image that runs the operator
runs the proxy too, and the image a user deployed (after kustomize ``images:``, a Helm value or a
locally built tag) is the one their proxies should run, not a release name compiled in. The
downward API cannot give a container its image, and an environment variable copied from the
image by kustomize ``replacements`` goes stale as soon as an outer overlay sets ``images:``; so
the operator reads its own Pod (``POD_NAMESPACE``/``POD_NAME``, with the pods ``get`` it already
holds) once, on the first reconcile that needs it. A failed read fails that reconcile, which the
workqueue retries with backoff; it never falls back to a guess while the Pod exists.

Order: ``--proxy-image`` (``$MODELPOOL_PROXY_IMAGE``), then the Pod's ``operator`` container
(or its only one), then, outside a Pod (no ``POD_NAME``, or no such Pod: a local run), the
release image :data:`DEFAULT_PROXY_IMAGE`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from controlplane.api.v1alpha1.modelrouter import DEFAULT_PROXY_IMAGE
from controlplane.runtime.client import KubeClient
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import PODS

log = logging.getLogger(__name__)

#: The operator Deployment's container (manifests/operator/deployment.yaml).
OPERATOR_CONTAINER: Final = "operator"


def container_image(pod: Mapping[str, Any], name: str = OPERATOR_CONTAINER) -> str:
    """The image of ``pod``'s container ``name``, or of its only container."""
    containers = (pod.get("spec") or {}).get("containers") or []
    named = [c for c in containers if c.get("name") == name]
    chosen = named or (containers if len(containers) == 1 else [])
    if not chosen or not chosen[0].get("image"):
        found = ", ".join(str(c.get("name")) for c in containers) or "none"
        raise ValueError(
            f"pod {pod['metadata']['name']} has no container {name!r} with an image, and not "
            f"exactly one container (found: {found}): set --proxy-image"
        )
    return str(chosen[0]["image"])


class ProxyImage:
    """Resolves the default proxy image once; see the module docstring for the order."""

    def __init__(
        self,
        client: KubeClient,
        *,
        configured: str = "",
        pod_namespace: str = "",
        pod_name: str = "",
        users: str = "proxies",
    ) -> None:
        self._client = client
        #: Who runs the image, for the log line ("proxies", "weights fetchers").
        self._users = users
        self._pod = (pod_namespace, pod_name) if pod_namespace and pod_name else None
        self._image = configured or None

    async def __call__(self) -> str:
        if self._image is None:
            self._image = await self._resolve()
        return self._image

    async def _resolve(self) -> str:
        if self._pod is None:
            return DEFAULT_PROXY_IMAGE
        namespace, name = self._pod
        try:
            pod = await self._client.get(PODS, name, namespace)
        except NotFound:
            log.warning(
                "pod %s/%s not found (not running in a pod?): %s default to %s",
                namespace,
                name,
                self._users,
                DEFAULT_PROXY_IMAGE,
            )
            return DEFAULT_PROXY_IMAGE
        image = container_image(pod)
        log.info("%s default to the operator's own image %s", self._users, image)
        return image
