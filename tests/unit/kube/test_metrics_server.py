"""The metrics and health port over real HTTPS on loopback: /metrics behind the reviews (fakes
here; the API server's own: tests/integration/test_chart_identities.py), health paths open,
nothing else served, and no unchecked port off loopback."""

from __future__ import annotations

import argparse
import http.client
import socket
import ssl
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from test_delegated_auth import a_cluster, an_auth

from tpfabric_kube.metrics_server import (
    MetricsServer,
    _tls_context,
    add_metrics_flags,
    check_metrics_flags,
    is_loopback,
    start_metrics_server,
)


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Counter("tpfabric_test_things", "Things.", registry=registry).inc(3)
    running = MetricsServer(
        "127.0.0.1",
        0,
        [registry],
        auth=an_auth(a_cluster()),
        health={"/healthz": lambda: (True, "ok"), "/readyz": lambda: (False, "not synced")},
        tls=_tls_context(None),
    ).start()
    yield running
    running.stop()


def get(server: MetricsServer, path: str, token: str | None = None) -> tuple[int, str]:
    context = ssl._create_unverified_context()
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    return response.status, response.read().decode()


def test_metrics_need_a_token_the_api_server_authorizes(server: MetricsServer) -> None:
    assert get(server, "/metrics")[0] == 401
    assert get(server, "/metrics", "made-up")[0] == 401
    status, body = get(server, "/metrics", "other-token")
    assert (status, "may not get /metrics" in body) == (403, True)
    status, body = get(server, "/metrics", "prom-token")
    assert status == 200
    assert "tpfabric_test_things_total 3.0" in body


def test_health_is_open_to_the_kubelet_and_says_why(server: MetricsServer) -> None:
    assert get(server, "/healthz") == (200, "ok")
    assert get(server, "/readyz") == (503, "not synced")


def test_nothing_else_is_served(server: MetricsServer) -> None:
    for path in ("/", "/filter", "/debug/pprof", "/metrics/../filter"):
        assert get(server, path, "prom-token")[0] == 404, path


def test_the_port_speaks_only_tls(server: MetricsServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/metrics")
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        conn.getresponse()
    assert get(server, "/healthz")[0] == 200  # the failed handshake held no one else


def test_an_unchecked_metrics_port_listens_on_loopback_only() -> None:
    with pytest.raises(ValueError, match=r"loopback only, not 0\.0\.0\.0"):
        MetricsServer("0.0.0.0", 0, [], auth=None, health={}, tls=None)
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("10.0.0.1")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--metrics-auth=none"], "allowed only on a loopback --metrics-address (127.0.0.1)"),
        (["--metrics-port=70000"], "--metrics-port=70000: expected 0 (off) to 65535"),
    ],
)
def test_flags_that_would_expose_an_unchecked_port_are_refused(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    add_metrics_flags(parser, default_port=8443)
    with pytest.raises(SystemExit):
        check_metrics_flags(parser, parser.parse_args(flags))
    assert message in capsys.readouterr().err


def test_the_default_is_a_checked_port() -> None:
    parser = argparse.ArgumentParser()
    add_metrics_flags(parser, default_port=8443)
    args = parser.parse_args([])
    check_metrics_flags(parser, args)
    assert (args.metrics_address, args.metrics_port, args.metrics_auth) == (
        "0.0.0.0",
        8443,
        "kubernetes",
    )
    loopback = parser.parse_args(["--metrics-address=127.0.0.1", "--metrics-auth=none"])
    check_metrics_flags(parser, loopback)  # a local cluster's or a benchmark's scrape


def test_every_family_of_tpfabric_says_its_stability_in_its_help_and_others_do_not(
    server: MetricsServer,
) -> None:
    _, body = get(server, "/metrics", "prom-token")
    assert "# HELP tpfabric_test_things_total [ALPHA] Things." in body


def test_a_started_port_serves_the_build_info_and_the_process_metrics() -> None:
    with socket.socket() as probe:  # a free port for the flags
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = argparse.Namespace(
        metrics_port=port, metrics_address="127.0.0.1", metrics_auth="none", metrics_cert_dir=None
    )
    running = start_metrics_server(args, lambda: None, component="operator")  # type: ignore[arg-type,return-value]
    assert running is not None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    finally:
        running.stop()
    assert 'tpfabric_build_info{component="operator",python_version=' in body
    assert "# HELP tpfabric_build_info [ALPHA] " in body
    assert "# HELP process_resident_memory_bytes Resident memory size in bytes." in body
