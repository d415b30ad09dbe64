"""The gang webhook's own certificate: made, kept in a Secret, rotated, and trusted by the API
server, without cert-manager.

As Kueue's and JobSet's internal certificate management (open-policy-agent/cert-controller):
one CA (ten years) and one serving certificate for the webhook's Service (one year, renewed a
month before it ends, or when the Service's names change), both in one Secret; the CA goes into
every webhook of the MutatingWebhookConfiguration (``caBundle``). Every replica runs this: the
first one to write the Secret wins (a conflict means another replica rotated it, and the Secret
is read again), and each writes the Secret's pair into its own ``--cert-dir``, which the server
reloads. The pure part (:func:`issue_ca`, :func:`issue_serving`, :func:`renewal_due`) takes a
clock; :class:`CertKeeper` talks to the API server.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.rest import ApiException

__all__ = [
    "CertKeeper",
    "KeyPair",
    "issue_ca",
    "issue_serving",
    "renewal_due",
    "service_names",
]

log = logging.getLogger("tpfabric.webhook.certs")
CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
_FORBIDDEN, _NOT_FOUND, _CONFLICT = 403, 404, 409


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its key, PEM."""

    cert: bytes
    key: bytes


def service_names(service: str, namespace: str) -> list[str]:
    """Return the DNS names the API server may use to reach ``service`` in ``namespace``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _key() -> tuple[ec.EllipticCurvePrivateKey, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key, pem


def issue_ca(now: dt.datetime) -> KeyPair:
    """Return a new CA (ten years) that signs the serving certificates."""
    key, pem = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpfabric-gang-webhook-ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), pem)


def issue_serving(ca: KeyPair, names: list[str], now: dt.datetime) -> KeyPair:
    """Return a serving certificate for ``names`` (one year), signed by ``ca``."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the webhook CA's key is not an EC key")
    key, pem = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + SERVING_VALIDITY, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), pem)


def renewal_due(
    ca: KeyPair | None, serving: KeyPair | None, names: list[str], now: dt.datetime
) -> str:
    """Return why the pair must be made again ("" when it is good)."""
    if ca is None or serving is None:
        return "no certificate yet"
    try:
        ca_cert = x509.load_pem_x509_certificate(ca.cert)
        cert = x509.load_pem_x509_certificate(serving.cert)
    except ValueError as err:
        return f"the Secret holds no valid certificate ({err})"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    reasons = (
        (ca_cert.not_valid_after_utc - now < RENEW_BEFORE, "the CA ends within 30 days"),
        (cert.not_valid_after_utc - now < RENEW_BEFORE, "the serving certificate ends soon"),
        (not _signed_by(cert, ca_cert), "the serving certificate is not the CA's"),
        (
            sorted(san.get_values_for_type(x509.DNSName)) != sorted(names),
            "the Service's names changed",
        ),
    )
    return next((why for due, why in reasons if due), "")


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")


class CertKeeper:
    """Keeps the Secret, the ``caBundle`` and the files of ``cert_dir`` in step."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        secret: str,
        service: str,
        configuration: str,
        cert_dir: Path,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.registrations = client.AdmissionregistrationV1Api(api)
        self.namespace, self.secret, self.configuration = namespace, secret, configuration
        self.names = service_names(service, namespace)
        self.cert_dir = cert_dir
        self.clock = clock

    def _read(self) -> tuple[dict[str, bytes], str | None, dict[str, Any]]:
        """Return the Secret's pairs (decoded), its resourceVersion (None: no Secret) and the
        labels and annotations a rewrite keeps (the chart makes the Secret: Helm's own)."""
        try:
            secret = self.core.read_namespaced_secret(self.secret, self.namespace)
        except ApiException as err:
            if err.status != _NOT_FOUND:
                raise
            return {}, None, {}
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items() if k in _KEYS}
        meta = secret.metadata
        kept = {"labels": meta.labels or {}, "annotations": meta.annotations or {}}
        return data, meta.resource_version, kept

    def _write(
        self, data: dict[str, bytes], version: str | None, kept: dict[str, Any] | None = None
    ) -> bool:
        """Write the Secret (``kept``: its labels and annotations); return False when another
        replica wrote it first."""
        body: dict[str, Any] = {
            "metadata": {"name": self.secret, "namespace": self.namespace, **(kept or {})},
            "type": "Opaque",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            if version is None:
                self._create(body)
            else:
                body["metadata"]["resourceVersion"] = version
                self.core.replace_namespaced_secret(self.secret, self.namespace, body)
        except ApiException as err:
            if err.status == _CONFLICT:
                return False
            raise
        return True

    def _create(self, body: dict[str, Any]) -> None:
        """Create the Secret; the chart's account may not (the chart makes it, empty): say so."""
        try:
            self.core.create_namespaced_secret(self.namespace, body)
        except ApiException as err:
            if err.status != _FORBIDDEN:
                raise
            raise RuntimeError(
                f"the Secret {self.namespace}/{self.secret} is missing and this account may not "
                "create one: the chart makes it (empty) with the release; `helm upgrade` makes it "
                "again"
            ) from err

    def ensure(self) -> bool:
        """Bring everything in step once; return whether the serving pair changed on disk."""
        for _ in range(3):
            data, version, kept = self._read()
            ca = KeyPair(data["ca.crt"], data["ca.key"]) if "ca.key" in data else None
            serving = KeyPair(data["tls.crt"], data["tls.key"]) if "tls.key" in data else None
            now = self.clock()
            why = renewal_due(ca, serving, self.names, now)
            if not why:
                break
            if ca is None or "CA" in why or "no valid" in why:
                ca = issue_ca(now)
            serving = issue_serving(ca, self.names, now)
            fresh = {"ca.crt": ca.cert, "ca.key": ca.key, "tls.crt": serving.cert}
            fresh["tls.key"] = serving.key
            if self._write(fresh, version, kept):
                log.info("webhook certificate made: %s", why)
                break
        else:
            raise RuntimeError(f"the Secret {self.namespace}/{self.secret} kept changing")
        if ca is None or serving is None:  # the loop read both or made both
            raise RuntimeError("no webhook certificate")
        self._trust(ca.cert)
        return self._files(serving)

    def _trust(self, ca_pem: bytes) -> None:
        """Put the CA into every webhook of the configuration (one patch, when it differs)."""
        bundle = base64.b64encode(ca_pem).decode()
        try:
            config = self.registrations.read_mutating_webhook_configuration(self.configuration)
        except ApiException as err:
            if err.status != _NOT_FOUND:
                raise
            log.warning("no MutatingWebhookConfiguration %s to trust the CA", self.configuration)
            return
        ops = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i, hook in enumerate(config.webhooks or [])
            if hook.client_config.ca_bundle != bundle
        ]
        if ops:
            self.registrations.patch_mutating_webhook_configuration(
                self.configuration, ops, _content_type="application/json-patch+json"
            )
            log.info("caBundle set on %d webhook(s) of %s", len(ops), self.configuration)

    def _files(self, serving: KeyPair) -> bool:
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        cert, key = self.cert_dir / "tls.crt", self.cert_dir / "tls.key"
        if cert.exists() and key.exists() and cert.read_bytes() == serving.cert:
            return False
        partial = self.cert_dir / "tls.key.partial"
        partial.write_bytes(serving.key)
        partial.chmod(0o600)
        partial.replace(key)
        cert.write_bytes(serving.cert)
        return True
