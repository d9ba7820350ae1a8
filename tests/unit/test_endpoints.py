"""Reading ready backends from EndpointSlices, including loopback names (RFC 6761)."""

from __future__ import annotations

from typing import Any

from controlplane.runtime.endpoints import connect_host, ready_urls


def _slice(address_type: str, *endpoints: tuple[str, bool], port: int = 8080) -> dict[str, Any]:
    return {
        "addressType": address_type,
        "ports": [{"name": "http", "port": port}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": r}} for a, r in endpoints],
    }


def test_localhost_names_are_loopback_without_dns() -> None:
    assert connect_host("pod-a.team.localhost", "FQDN") == "127.0.0.1"
    assert connect_host("pod-a.team.localhost.", "FQDN") == "127.0.0.1"
    assert connect_host("svc.example.internal", "FQDN") == "svc.example.internal"
    assert connect_host("10.1.2.3", "IPv4") == "10.1.2.3"
    assert connect_host("fd00::1", "IPv6") == "[fd00::1]"


def test_only_ready_endpoints_on_the_named_port() -> None:
    slices: list[dict[str, Any]] = [
        _slice("FQDN", ("a.ns.localhost", True), ("b.ns.localhost", False), port=41000),
        {"addressType": "IPv4", "ports": [{"name": "metrics", "port": 9090}],
         "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": True}}]},
    ]  # fmt: skip
    assert ready_urls(slices, "http") == ["http://127.0.0.1:41000"]
    assert ready_urls(slices) == ["http://127.0.0.1:41000", "http://10.0.0.9:9090"]
    assert ready_urls([]) == []
