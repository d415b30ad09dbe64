"""Certificates and keys of the local control plane: one CA, serving and client certs, SA keys.

Everything is made fresh for each cluster (EC P-256 keys, one-year validity) and lives in the
cluster's state folder; nothing is reused between clusters.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ClientCert", "Pki", "create_pki"]

_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class ClientCert:
    """Paths of a client certificate and its key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of everything create_pki wrote."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_private_key: Path
    sa_public_key: Path
    clients: dict[str, ClientCert]


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def create_pki(folder: Path, clients: dict[str, tuple[str, str | None]]) -> Pki:
    """Write a CA, an API-server serving cert for 127.0.0.1, SA keys and client certs.

    ``clients`` maps a file stem to (common name, organization); e.g. ``"admin": ("admin",
    "system:masters")``. Returns the paths.
    """
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("tpfabric-local-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def issue(
        stem: str, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> ClientCert:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return ClientCert(
            cert=_write(folder / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            key=_write(folder / f"{stem}.key", _key_pem(key)),
        )

    serving = issue(
        "apiserver",
        _name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.DNSName("kubernetes.default.svc.cluster.local"),
        ],
    )
    issued = {
        stem: issue(stem, _name(cn, org), ExtendedKeyUsageOID.CLIENT_AUTH, [])
        for stem, (cn, org) in clients.items()
    }
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_public = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return Pki(
        ca_cert=_write(folder / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM)),
        ca_key=_write(folder / "ca.key", _key_pem(ca_key)),
        serving_cert=serving.cert,
        serving_key=serving.key,
        sa_private_key=_write(folder / "sa.key", _key_pem(sa_key)),
        sa_public_key=_write(folder / "sa.pub", sa_public),
        clients=issued,
    )
