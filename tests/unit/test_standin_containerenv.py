"""A container's environment, resolved as a kubelet does."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from controlplane.standin.containerenv import (
    CONFIG_MAP,
    SECRET,
    EnvError,
    decoded,
    expand,
    expand_args,
    resolve_env,
    sources_of,
)

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "a"}},
    "spec": {"nodeName": "n1"},
    "status": {"podIP": "127.0.0.1"},
}


def test_env_from_comes_first_and_env_overrides_it_in_order() -> None:
    container = {
        "envFrom": [
            {"configMapRef": {"name": "conf"}, "prefix": "C_"},
            {"secretRef": {"name": "creds"}},
        ],
        "env": [
            {"name": "TOKEN", "value": "literal"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "URL", "value": "$(C_HOST)/v1 $$(C_HOST) $(UNSET)"},
        ],
    }
    assert sources_of(container) == {(CONFIG_MAP, "conf"), (SECRET, "creds")}
    data = {(CONFIG_MAP, "conf"): {"HOST": "h", "bad=key": "x"},
            (SECRET, "creds"): {"TOKEN": "from-secret", "token": "t"}}  # fmt: skip
    assert resolve_env(POD, container, data) == {
        "C_HOST": "h",
        "TOKEN": "literal",
        "token": "t",
        "HF_TOKEN": "t",
        "URL": "h/v1 $(C_HOST) $(UNSET)",
    }


def test_field_refs_read_the_pod() -> None:
    def ref(path: str) -> dict[str, Any]:
        return {"name": path, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    paths = ["metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['app']",
             "spec.nodeName", "spec.serviceAccountName", "status.podIP"]  # fmt: skip
    env = resolve_env(POD, {"env": [ref(p) for p in paths]}, {})
    assert list(env.values()) == ["p", "ns", "u-1", "a", "n1", "default", "127.0.0.1"]


def test_a_missing_source_or_key_stops_the_container_unless_optional() -> None:
    missing = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    with pytest.raises(EnvError, match='secret "s" not found'):
        resolve_env(POD, missing, {(SECRET, "s"): None})
    with pytest.raises(EnvError, match="couldn't find key k in Secret ns/s"):
        resolve_env(POD, missing, {(SECRET, "s"): {"other": "v"}})
    optional = {
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k",
                                                                "optional": True}}}],
        "envFrom": [{"secretRef": {"name": "s", "optional": True}}],
    }  # fmt: skip
    assert resolve_env(POD, optional, {(CONFIG_MAP, "c"): None, (SECRET, "s"): None}) == {}
    with pytest.raises(EnvError, match='configmap "c" not found'):
        resolve_env(POD, {"envFrom": [{"configMapRef": {"name": "c"}}]}, {(CONFIG_MAP, "c"): None})


def test_arguments_expand_the_environment() -> None:
    assert expand_args(["--token", "$(T)", "$$(T)", "$(NOPE)"], {"T": "x"}) == [
        "--token", "x", "$(T)", "$(NOPE)"
    ]  # fmt: skip
    assert expand("$$", {}) == "$"


def test_secret_values_are_base64_and_config_map_values_are_text() -> None:
    secret = {"kind": "Secret", "data": {"k": base64.b64encode(b"v").decode()}}
    config = {"kind": "ConfigMap", "data": {"k": "v"},
              "binaryData": {"b": base64.b64encode(b"bin").decode()}}  # fmt: skip
    assert decoded(secret) == {"k": "v"}
    assert decoded(config) == {"k": "v", "b": "bin"}
