"""The launcher's pure parts: certificates, kubeconfigs and binary lookup (no process started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controlplane.envtest import BinaryNotFoundError, find_binaries
from controlplane.envtest.kubeconfig import write_kubeconfig
from controlplane.envtest.pki import CertificateAuthority
from controlplane.runtime.config import ClientConfig


def test_client_certificate_carries_user_and_groups() -> None:
    ca = CertificateAuthority()
    pair = ca.client_pair("system:serviceaccount:ns:proxy", ("team-a", "system:masters"))
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    assert (
        cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        == "system:serviceaccount:ns:proxy"
    )
    groups = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert groups == ["team-a", "system:masters"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert.verify_directly_issued_by(ca_cert)


def test_serving_certificate_names_loopback() -> None:
    pair = CertificateAuthority().serving_pair(("localhost", "127.0.0.1"))
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_kubeconfig_round_trips_through_the_kubernetes_loader(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    pair = ca.client_pair("alice")
    path = write_kubeconfig(
        tmp_path / "config",
        server="https://127.0.0.1:6443",
        ca_pem=ca.cert_pem,
        user="alice",
        client_cert_pem=pair.cert_pem,
        client_key_pem=pair.key_pem,
    )
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    config = ClientConfig.from_kubeconfig(path)
    assert config.server == "https://127.0.0.1:6443"
    assert config.auth_headers() == []  # certificate auth, no bearer header


def test_token_kubeconfig_sends_bearer_header(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    path = write_kubeconfig(
        tmp_path / "config",
        server="https://127.0.0.1:1",
        ca_pem=ca.cert_pem,
        user="sa",
        token="abc",
    )
    config = ClientConfig.from_kubeconfig(path).impersonating("bob", ("g1",))
    assert config.auth_headers() == [
        ("Authorization", "Bearer abc"),
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "g1"),
    ]


def test_kubeconfig_needs_credentials(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'nobody' needs a client certificate or a token"):
        write_kubeconfig(tmp_path / "c", server="https://x", ca_pem=b"", user="nobody")


@pytest.fixture
def no_assets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in (
        "KUBEBUILDER_ASSETS",
        "TEST_ASSET_ETCD",
        "TEST_ASSET_KUBE_APISERVER",
        "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
        "TEST_ASSET_KUBECTL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONTROLPLANE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_missing_binaries_say_how_to_get_them(no_assets: Path) -> None:
    with pytest.raises(BinaryNotFoundError, match=r"etcd, kube-apiserver.*make controlplane-bins"):
        find_binaries()


def test_explicit_asset_that_is_not_executable_is_named(
    no_assets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_ASSET_ETCD", str(no_assets / "nope"))
    with pytest.raises(BinaryNotFoundError, match="TEST_ASSET_ETCD="):
        find_binaries()


def test_assets_folder_and_explicit_override(
    no_assets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = no_assets / "assets"
    for name in ("etcd", "kube-apiserver", "kubectl"):
        _executable(folder / name)
    other_etcd = _executable(no_assets / "elsewhere" / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(folder))
    monkeypatch.setenv("TEST_ASSET_ETCD", str(other_etcd))
    found = find_binaries()
    assert found.etcd == other_etcd
    assert found.kube_apiserver == folder / "kube-apiserver"
    assert found.kubectl == folder / "kubectl"
    assert found.kube_controller_manager is None


def test_newest_cache_build_wins(no_assets: Path) -> None:
    old = no_assets / "cache" / "bin" / "kube-old"
    new = no_assets / "cache" / "bin" / "kube-new"
    for folder in (old, new):
        for name in ("etcd", "kube-apiserver"):
            _executable(folder / name)
    os.utime(old, (1, 1))
    assert find_binaries().kube_apiserver == new / "kube-apiserver"
