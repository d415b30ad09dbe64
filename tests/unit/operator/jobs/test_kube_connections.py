"""The operator's writes keep their connections: a burst of creations over one kept-alive
connection, not a TLS handshake per pod (an unread answer never goes back to the pool)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from tpfabric_operator.jobs.kube import KubeAdapter


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    statuses: list[int]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the API server does
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        sent = json.loads(self.rfile.read(length))
        status = self.server.statuses.pop(0) if self.server.statuses else 201
        body = json.dumps(
            sent if status == 201 else {"kind": "Status", "reason": "AlreadyExists"}
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.statuses = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


def test_creations_one_after_another_reuse_one_connection(server: _Server) -> None:
    settings = client.Configuration()
    settings.host = f"http://127.0.0.1:{server.server_address[1]}"
    kube = KubeAdapter(client.ApiClient(settings))
    server.statuses = [201, 201, 409, 201, 201, 201]
    created = [kube.create(_pod(f"p{k}")) for k in range(6)]
    service = {"kind": "Service", "metadata": {"name": "s", "namespace": "ns"}, "spec": {}}
    assert kube.create(service)
    assert created == [True, True, False, True, True, True]  # the 409: "already exists"
    assert server.connections == 1
