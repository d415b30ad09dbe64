"""The metrics and health port of every tpfabric component (extender, operator, gang webhook,
fabric agent), served as kube-scheduler serves its own: HTTPS, ``/metrics`` only to a caller the
API server authenticates and authorizes (:mod:`.delegated_auth`), health paths open to the
kubelet's probes, nothing else. It never serves a component's working endpoints (the extender's
``/filter``, the webhook's ``/mutate-pods``): those stay on their own ports.

The certificate is the component's own, made at start (self-signed, like kube-scheduler's and
controller-runtime's default), unless ``--metrics-cert-dir`` holds ``tls.crt`` and ``tls.key``.
``--metrics-auth=none`` serves plain HTTP with no check at all and is refused on any address but
loopback: a local cluster's or a benchmark's scrape, never a pod's port.

Every family of tpfabric's own is served with its stability at the start of its HELP text
(:mod:`.metric_stability`), and every port serves ``tpfabric_build_info`` (:mod:`.build_info`)
and prometheus_client's process and runtime metrics (``process_*``, ``python_*``) beside the
component's own.

The server runs in threads of its own (one per connection, each with a read timeout): a slow
scrape or review never holds a component's event loop.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import logging
import shutil
import socket
import ssl
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from tpfabric_kube.build_info import build_info
from tpfabric_kube.metric_stability import WithStability

if TYPE_CHECKING:  # the kubernetes client only when a port is started: importing it reads
    # $KUBECONFIG once, and the operator sets that from its flags after parsing them here
    from kubernetes import client

    from tpfabric_kube.delegated_auth import Decision, DelegatedAuth

__all__ = [
    "AUTH_KUBERNETES",
    "AUTH_NONE",
    "HealthCheck",
    "MetricsServer",
    "add_metrics_flags",
    "check_metrics_flags",
    "is_loopback",
    "start_metrics_server",
]

log = logging.getLogger("tpfabric.metrics")
AUTH_KUBERNETES = "kubernetes"
AUTH_NONE = "none"
METRICS_PATH = "/metrics"
#: seconds a connection may take to send its request (a slow client holds one thread only)
READ_TIMEOUT_SECONDS = 10.0
#: a health check: (healthy, a line saying why)
HealthCheck = Callable[[], tuple[bool, str]]


def is_loopback(address: str) -> bool:
    """Return whether ``address`` (an IP or ``localhost``) is a loopback address."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def add_metrics_flags(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    """Add ``--metrics-address``, ``--metrics-port``, ``--metrics-auth`` and
    ``--metrics-cert-dir`` to ``parser``."""
    group = parser.add_argument_group(
        "metrics and health (HTTPS; /metrics only to a caller the API server authenticates "
        "and authorizes for the non-resource URL /metrics; /healthz and /readyz open)"
    )
    group.add_argument(
        "--metrics-address",
        default="0.0.0.0",  # noqa: S104 - a pod's port, reached by Prometheus and the kubelet
        help="address of the metrics and health port (default 0.0.0.0)",
    )
    group.add_argument(
        "--metrics-port",
        type=int,
        default=default_port,
        help=f"port of /metrics, /healthz and /readyz; 0 serves none (default {default_port})",
    )
    group.add_argument(
        "--metrics-auth",
        choices=(AUTH_KUBERNETES, AUTH_NONE),
        default=AUTH_KUBERNETES,
        help="kubernetes (default): TokenReview + SubjectAccessReview for every scrape; none: "
        "plain HTTP without any check, on a loopback --metrics-address only",
    )
    group.add_argument(
        "--metrics-cert-dir",
        type=Path,
        help="folder with tls.crt and tls.key (default: a self-signed certificate made at start)",
    )


def check_metrics_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit through ``parser`` when the metrics flags would expose an unchecked port."""
    if not 0 <= args.metrics_port <= 65535:
        parser.error(f"--metrics-port={args.metrics_port}: expected 0 (off) to 65535")
    if args.metrics_auth == AUTH_NONE and not is_loopback(args.metrics_address):
        parser.error(
            f"--metrics-auth=none serves /metrics to anyone: it is allowed only on a loopback "
            f"--metrics-address (127.0.0.1), not {args.metrics_address}; drop --metrics-auth "
            "to have the API server check every scrape"
        )


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """Write a self-signed serving certificate and its key into ``folder``; return their paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tpfabric-metrics")])
    host = socket.gethostname()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.DNSName(host)]), False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "tls.crt", folder / "tls.key"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def _tls_context(cert_dir: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if cert_dir is not None:
        context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
        return context
    folder = Path(tempfile.mkdtemp(prefix="tpfabric-metrics-"))
    try:  # the context keeps the pair in memory; nothing of it stays on disk
        context.load_cert_chain(*_self_signed(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return context


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # a port scan, a plain-HTTP probe of the HTTPS port, a client gone mid-answer: not
        # worth socketserver's traceback on stderr
        log.debug("metrics connection from %s failed: %s", client_address, sys.exc_info()[1])


class MetricsServer:
    """Serves ``/metrics`` (every registry of ``registries``, behind ``auth``; ``None``: no
    check) and the health paths of ``health`` on ``address``:``port`` in threads of its own."""

    def __init__(
        self,
        address: str,
        port: int,
        registries: Sequence[CollectorRegistry],
        *,
        auth: DelegatedAuth | None,
        health: Mapping[str, HealthCheck],
        tls: ssl.SSLContext | None,
    ) -> None:
        if auth is None and not is_loopback(address):
            raise ValueError(f"an unchecked /metrics may listen on loopback only, not {address}")
        self._registries = tuple(registries)
        self._auth = auth
        self._health = dict(health)
        self._server = _Server((address, port), self._handler())
        if tls is not None:
            # the handshake happens in the connection's own thread (Handler.setup), under its
            # read timeout: a client that never completes it holds no one else
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-server", daemon=True
        )

    @property
    def port(self) -> int:
        """Return the port it listens on (the one the OS chose for port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        """Start serving in a thread; return this server."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port."""
        self._server.shutdown()
        self._server.server_close()

    def _metrics(self) -> bytes:
        return b"".join(generate_latest(WithStability(registry)) for registry in self._registries)

    def _decide(self, authorization: str | None) -> tuple[int, str]:
        if self._auth is None:
            return 200, "no check (loopback)"
        decision: Decision = self._auth.decide(authorization, METRICS_PATH)
        return decision.status, decision.reason

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT_SECONDS
            server_version = "tpfabric"
            sys_version = ""

            def setup(self) -> None:
                super().setup()  # sets the read timeout on the connection
                if isinstance(self.connection, ssl.SSLSocket):
                    self.connection.do_handshake()

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                check = server._health.get(path)
                if check is not None:
                    healthy, why = check()
                    self._answer(200 if healthy else 503, why.encode(), "text/plain")
                elif path == METRICS_PATH:
                    status, why = server._decide(self.headers.get("Authorization"))
                    if status == 200:
                        self._answer(200, server._metrics(), CONTENT_TYPE_LATEST)
                    else:
                        self._answer(status, why.encode(), "text/plain")
                else:
                    self._answer(404, b"not found", "text/plain")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                log.debug("%s %s", self.address_string(), format % args)

        return Handler


def start_metrics_server(
    args: argparse.Namespace,
    api: Callable[[], client.ApiClient],
    *,
    component: str,
    registries: Sequence[CollectorRegistry] = (),
    health: Mapping[str, HealthCheck] | None = None,
) -> MetricsServer | None:
    """Start the metrics and health port the flags of :func:`add_metrics_flags` ask for (None
    with ``--metrics-port=0``). ``registries`` are served with ``component``'s build info and the
    process's default registry (where counters every component shares, such as malformed
    objects, and the process metrics live); ``api`` makes the client that reviews tokens (called
    only with ``--metrics-auth=kubernetes``)."""
    if not args.metrics_port:
        return None
    built = CollectorRegistry()
    build_info(component, built)
    from tpfabric_kube.delegated_auth import DelegatedAuth  # noqa: PLC0415 - see the imports

    checked = args.metrics_auth == AUTH_KUBERNETES
    server = MetricsServer(
        args.metrics_address,
        args.metrics_port,
        [*registries, built, REGISTRY],
        auth=DelegatedAuth.of(api()) if checked else None,
        health=health or {"/healthz": lambda: (True, "ok")},
        tls=_tls_context(args.metrics_cert_dir) if checked else None,
    ).start()
    scheme = "https" if checked else "http"
    log.info(
        "metrics on %s://%s:%d/metrics (%s)",
        scheme,
        args.metrics_address,
        server.port,
        "API server authentication and authorization" if checked else "no check, loopback",
    )
    return server
