"""The stand-in's Node, whether a pod fits it, and its kubelet API's log endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane.standin.builders import NODE_NAME
from controlplane.standin.kubeletapi import KubeletApi, LogTarget, UnknownContainer
from controlplane.standin.node import NODE_LABELS, node_body, node_fits


def test_the_node_points_the_api_server_at_its_kubelet_port() -> None:
    node = node_body(10250)
    status = node["status"]
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE_NAME
    assert node["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert {a["type"] for a in status["addresses"]} == {"InternalIP", "Hostname"}
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    ready = {c["type"]: c["status"] for c in status["conditions"]}
    assert ready == {"Ready": "True"}
    assert status["allocatable"] == status["capacity"]


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def term(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> Any:
    found: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields is not None:
        found["matchFields"] = fields
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [found]}}}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "fits"),
    [
        ({}, True),
        ({"nodeSelector": {"kubernetes.io/os": "linux"}}, True),
        ({"nodeSelector": {"kubernetes.io/hostname": NODE_NAME}}, True),
        ({"nodeSelector": {"kubernetes.io/hostname": "other"}}, False),
        ({"nodeSelector": {"gpu": "yes"}}, False),
        (
            {
                "affinity": term(
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}
                )
            },
            True,
        ),
        (
            {
                "affinity": term(
                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [NODE_NAME]}
                )
            },
            False,
        ),
        ({"affinity": term({"key": "gpu", "operator": "DoesNotExist"})}, True),
        ({"affinity": term({"key": "gpu", "operator": "Exists"})}, False),
        (
            {
                "affinity": term(
                    fields=[{"key": "metadata.name", "operator": "In", "values": [NODE_NAME]}]
                )
            },
            True,
        ),
        ({"affinity": term()}, False),
    ],
)
def test_a_pod_fits_by_its_node_selector_and_required_affinity(
    spec: dict[str, Any], fits: bool
) -> None:
    assert node_fits(pod(**spec), NODE_LABELS) is fits


@pytest.mark.anyio
async def test_the_log_endpoint_serves_tails_and_names_what_it_does_not_know(
    tmp_path: Path,
) -> None:
    log = tmp_path / "ns_p.log"
    log.write_bytes(b"one\ntwo\nthree\n")

    def locate(namespace: str, name: str, container: str) -> LogTarget:
        if (namespace, name, container) != ("ns", "p", "server"):
            raise UnknownContainer(f'container "{container}" not found in pod "{name}"')
        return LogTarget(log, lambda: False)

    api = KubeletApi(locate, tmp_path / "kubelet")
    try:
        assert api.port > 0
        assert api.cert_file.is_file()
        transport = httpx.ASGITransport(app=api.app)
        async with httpx.AsyncClient(transport=transport, base_url="https://node") as http:
            path = "/containerLogs/ns/p/server"
            assert (await http.get(path, params={"tailLines": 1})).text == "three\n"
            assert (await http.get(path)).text == "one\ntwo\nthree\n"
            limited = await http.get(path, params={"tailLines": 2, "limitBytes": 3})
            assert limited.text == "two"
            followed = await http.get(path, params={"follow": "true", "tailLines": 1})
            assert followed.text == "three\n", "follow ends with the container"
            missing = await http.get("/containerLogs/ns/p/other")
            assert (missing.status_code, missing.text) == (
                404, 'container "other" not found in pod "p"'
            )  # fmt: skip
            assert (await http.get(path, params={"previous": "true"})).status_code == 400
            assert (await http.get(path, params={"tailLines": "-1"})).status_code == 400
    finally:
        api.socket.close()
