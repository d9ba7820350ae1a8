"""Where a Service's ready backends are, read from its EndpointSlices.

Slices carry IPv4, IPv6 or FQDN addresses. One FQDN rule is applied here rather than left to a
resolver: names under the ``localhost.`` top-level domain are loopback by definition (RFC 6761,
section 6.3), so they map to 127.0.0.1 without a DNS query. The local node stand-in publishes its
simulators that way, because the API server refuses loopback IPs in IPv4 slices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LOCALHOST_DOMAIN = ".localhost"
LOOPBACK = "127.0.0.1"


def connect_host(address: str, address_type: str) -> str:
    """The host to connect to for one slice address."""
    if address_type == "FQDN" and address.rstrip(".").endswith(LOCALHOST_DOMAIN):
        return LOOPBACK
    if address_type == "IPv6":
        return f"[{address}]"
    return address


def ready_urls(
    slices: Iterable[Mapping[str, Any]], port_name: str | None = None, scheme: str = "http"
) -> list[str]:
    """``scheme://host:port`` of every ready endpoint, on the named port (or the first)."""
    urls: list[str] = []
    for slice_ in slices:
        ports = slice_.get("ports") or []
        port = next((p for p in ports if port_name is None or p.get("name") == port_name), None)
        if port is None or port.get("port") is None:
            continue
        for endpoint in slice_.get("endpoints") or ():
            if not (endpoint.get("conditions") or {}).get("ready"):
                continue
            for address in endpoint.get("addresses") or ():
                host = connect_host(address, str(slice_.get("addressType", "IPv4")))
                urls.append(f"{scheme}://{host}:{port['port']}")
    return urls
