"""The cache's identity key is worked out offline, stable for one identity, distinct between two."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import msgspec
from kubernetes import client as k8s_client

from controlplane.envtest.pki import CertificateAuthority
from controlplane.preflight.identity import identity_of
from controlplane.runtime.config import ClientConfig, Impersonation

SERVER = "https://a:6443"


def jwt(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(msgspec.json.encode(value)).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def with_token(token: str) -> ClientConfig:
    context = ssl.create_default_context()
    return ClientConfig(SERVER, context, extra_headers={"Authorization": f"Bearer {token}"})


def with_certificate(
    tmp_path: Path, ca: CertificateAuthority, user: str, name: str
) -> ClientConfig:
    pair = ca.client_pair(user, ("team",))
    cert = tmp_path / f"{name}.crt"
    cert.write_bytes(pair.cert_pem)
    upstream = k8s_client.Configuration()
    upstream.cert_file = str(cert)
    return ClientConfig(SERVER, ssl.create_default_context(), upstream)


def test_a_rotated_service_account_token_keeps_its_identity() -> None:
    sub = "system:serviceaccount:team-a:router"
    first = identity_of(with_token(jwt({"iss": "k8s", "sub": sub, "exp": 1})))
    rotated = identity_of(with_token(jwt({"iss": "k8s", "sub": sub, "exp": 2})))
    other = identity_of(with_token(jwt({"iss": "k8s", "sub": "system:serviceaccount:b:x"})))
    assert first.key == rotated.key
    assert first.key != other.key
    assert sub in first.description


def test_opaque_tokens_are_keyed_by_digest_and_never_described_in_clear() -> None:
    one = identity_of(with_token("s3cret-one"))
    two = identity_of(with_token("s3cret-two"))
    assert one.key != two.key
    assert "s3cret" not in one.description + one.key


def test_a_renewed_certificate_for_the_same_user_keeps_its_identity(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    first = identity_of(with_certificate(tmp_path, ca, "alice", "a1"))
    renewed = identity_of(with_certificate(tmp_path, ca, "alice", "a2"))
    bob = identity_of(with_certificate(tmp_path, ca, "bob", "b"))
    assert first.key == renewed.key
    assert first.key != bob.key
    assert "alice" in first.description


def test_impersonation_is_part_of_the_identity() -> None:
    base = with_token("token")
    as_alice = base.impersonating("alice", ("g1",))
    as_alice_other_groups = base.impersonating("alice", ("g2",))
    keys = {identity_of(c).key for c in (base, as_alice, as_alice_other_groups)}
    assert len(keys) == 3
    same = ClientConfig(
        SERVER, base.ssl_context, None, Impersonation("alice", ("g1",)), dict(base.extra_headers)
    )
    assert identity_of(same).key == identity_of(as_alice).key
