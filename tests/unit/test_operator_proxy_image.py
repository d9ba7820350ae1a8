"""The default proxy image: the flag, else the operator Pod's own container, else the release."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.api.v1alpha1.modelrouter import DEFAULT_PROXY_IMAGE
from controlplane.operator.proxyimage import ProxyImage, container_image
from controlplane.runtime.errors import NotFound
from controlplane.runtime.resources import PODS, Resource

pytestmark = pytest.mark.anyio


def pod(*containers: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "modelpool-operator-7d9", "namespace": "modelpool-system"},
        "spec": {"containers": [{"name": n, "image": i} for n, i in containers]},
    }


class Pods:
    """Answers GET pods as the API server would: the object, or 404 when absent."""

    def __init__(self, *found: dict[str, Any]) -> None:
        self.found = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in found}
        self.gets = 0

    async def get(self, resource: Resource, name: str, namespace: str) -> dict[str, Any]:
        assert resource == PODS
        self.gets += 1
        try:
            return self.found[(namespace, name)]
        except KeyError:
            raise NotFound(404, "NotFound", f'pods "{name}" not found') from None


def in_the_operator_pod(
    pods: Pods, configured: str = "", pod_name: str = "modelpool-operator-7d9"
) -> ProxyImage:
    """The resolver as the operator builds it in its Pod (modelpool-system/``pod_name``)."""
    return ProxyImage(
        pods,  # type: ignore[arg-type]
        configured=configured,
        pod_namespace="modelpool-system",
        pod_name=pod_name,
    )


def test_the_operator_container_is_chosen_among_several() -> None:
    found = pod(("sidecar", "example.test/sidecar:1"), ("operator", "kind.local/cp:abc"))
    assert container_image(found) == "kind.local/cp:abc"
    assert container_image(pod(("manager", "kind.local/cp:abc"))) == "kind.local/cp:abc"


def test_an_unknown_container_layout_is_an_error_naming_the_flag() -> None:
    with pytest.raises(ValueError, match=r"no container 'operator'.*a, b.*--proxy-image"):
        container_image(pod(("a", "x:1"), ("b", "y:1")))


async def test_the_flag_wins_and_nothing_is_read() -> None:
    pods = Pods(pod(("operator", "kind.local/cp:abc")))
    image = in_the_operator_pod(pods, configured="example.test/proxy:2")
    assert await image() == "example.test/proxy:2"
    assert pods.gets == 0


async def test_in_a_pod_its_own_image_is_read_once() -> None:
    pods = Pods(pod(("operator", "kind.local/cp:abc")))
    image = in_the_operator_pod(pods)
    assert await image() == "kind.local/cp:abc"
    assert await image() == "kind.local/cp:abc"
    assert pods.gets == 1


@pytest.mark.parametrize("pod_name", ["", "not-a-pod"])
async def test_outside_a_pod_the_release_image(pod_name: str) -> None:
    pods = Pods(pod(("operator", "kind.local/cp:abc")))
    image = in_the_operator_pod(pods, pod_name=pod_name)
    assert await image() == DEFAULT_PROXY_IMAGE
