"""Where a Service's ready backends are, read from its EndpointSlices.

Slices carry IPv4, IPv6 or FQDN addresses. One FQDN rule is applied here rather than left to a
resolver: names under the ``localhost.`` top-level domain are loopback by definition (RFC 6761,
section 6.3), so they map to 127.0.0.1 without a DNS query. The local node stand-in publishes its
simulators that way, because the API server refuses loopback IPs in IPv4 slices.

:func:`service_urls` finds a Service's slices in an informer's store by index (the
``kubernetes.io/service-name`` label and the namespace), never by scanning every slice: the store
decodes a fresh copy per read, so a scan costs one decode per slice in the namespace on every call.
:func:`member_urls` is where the router-proxy and the pool controller agree on a member's address.
:func:`pod_urls` finds one pod's address among a Service's endpoints, ready or not: the KV cache of
a member is restored into its pod *before* that pod is Ready, so it cannot wait to be listed ready
(the endpoint controller lists a not-ready pod with ``conditions.ready`` false and a ``targetRef``
naming it). :func:`starting_urls` finds the endpoints that are listed but not ready and not
terminating: a pod whose server may be answering before its readiness probe has said so, which
the swap's driver probes directly and the pool controller drains through its idle gate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from controlplane.runtime.cache import LABEL_INDEX, NAMESPACE_INDEX, Store

LOCALHOST_DOMAIN = ".localhost"
LOOPBACK = "127.0.0.1"
#: The label the endpoint controller (and the node stand-in) puts on a Service's slices.
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
#: A member (an InferenceService) is served by a Service of its own name whose port is named so.
MEMBER_PORT_NAME: Final = "http"


def connect_host(address: str, address_type: str) -> str:
    """The host to connect to for one slice address."""
    if address_type == "FQDN" and address.rstrip(".").endswith(LOCALHOST_DOMAIN):
        return LOOPBACK
    if address_type == "IPv6":
        return f"[{address}]"
    return address


def ready_urls(
    slices: Iterable[Mapping[str, Any]],
    port_name: str | None = None,
    scheme: str = "http",
    *,
    ready: bool = True,
) -> list[str]:
    """``scheme://host:port`` of every ready endpoint, on the named port (or the first); with
    ``ready=False``, of every endpoint that is *not* ready and not terminating instead."""
    urls: list[str] = []
    for slice_ in slices:
        ports = slice_.get("ports") or []
        port = next((p for p in ports if port_name is None or p.get("name") == port_name), None)
        if port is None or port.get("port") is None:
            continue
        for endpoint in slice_.get("endpoints") or ():
            conditions = endpoint.get("conditions") or {}
            if bool(conditions.get("ready")) != ready:
                continue
            if not ready and conditions.get("terminating"):
                continue
            for address in endpoint.get("addresses") or ():
                host = connect_host(address, str(slice_.get("addressType", "IPv4")))
                urls.append(f"{scheme}://{host}:{port['port']}")
    return urls


def endpoint_urls_by_pod(
    slices: Iterable[Mapping[str, Any]], port_name: str | None = None, scheme: str = "http"
) -> dict[str, str]:
    """``scheme://host:port`` of every endpoint whose ``targetRef`` is a Pod, ready or not, by
    the pod's name (its first address, on the named port or the first)."""
    urls: dict[str, str] = {}
    for slice_ in slices:
        ports = slice_.get("ports") or []
        port = next((p for p in ports if port_name is None or p.get("name") == port_name), None)
        if port is None or port.get("port") is None:
            continue
        for endpoint in slice_.get("endpoints") or ():
            ref = endpoint.get("targetRef") or {}
            addresses = endpoint.get("addresses") or ()
            if ref.get("kind") != "Pod" or not ref.get("name") or not addresses:
                continue
            host = connect_host(addresses[0], str(slice_.get("addressType", "IPv4")))
            urls.setdefault(str(ref["name"]), f"{scheme}://{host}:{port['port']}")
    return urls


def service_slice_keys(store: Store, namespace: str, service: str) -> list[str]:
    """Cache keys of ``service``'s EndpointSlices in ``namespace``: two index look-ups."""
    labelled = store.index_keys(LABEL_INDEX, f"{SERVICE_NAME_LABEL}={service}")
    if not labelled:
        return []
    in_namespace = set(store.index_keys(NAMESPACE_INDEX, namespace))
    return [key for key in labelled if key in in_namespace]


def service_urls(
    store: Store, namespace: str, service: str, port_name: str | None = None
) -> list[str]:
    """Sorted, distinct ``http://host:port`` of ``service``'s ready endpoints, read from an
    EndpointSlice informer's ``store`` by index; only that Service's slices are decoded."""
    slices = [s for key in service_slice_keys(store, namespace, service) if (s := store.get(key))]
    return sorted(set(ready_urls(slices, port_name)))


def member_urls(store: Store, namespace: str, member: str) -> list[str]:
    """Where member ``member`` (an InferenceService) answers: its Service's ready endpoints on
    :data:`MEMBER_PORT_NAME`. The router-proxy dispatches to the first; the pool controller
    probes them all. One function, so both agree."""
    return service_urls(store, namespace, member, MEMBER_PORT_NAME)


def starting_urls(store: Store, namespace: str, member: str) -> list[str]:
    """Where member ``member``'s pods that are listed but neither ready nor terminating answer,
    sorted: a starting server, perhaps up before its readiness probe says so."""
    slices = [s for key in service_slice_keys(store, namespace, member) if (s := store.get(key))]
    return sorted(set(ready_urls(slices, MEMBER_PORT_NAME, ready=False)))


def pod_urls(
    store: Store, namespace: str, service: str, port_name: str | None = None
) -> dict[str, str]:
    """Where each pod behind ``service`` answers, ready or not, by pod name (see
    :func:`endpoint_urls_by_pod`); read from an EndpointSlice informer's ``store`` by index."""
    slices = [s for key in service_slice_keys(store, namespace, service) if (s := store.get(key))]
    return endpoint_urls_by_pod(slices, port_name)
