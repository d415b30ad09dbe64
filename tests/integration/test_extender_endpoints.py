"""The extender as the chart runs it: its functional port is never reachable off loopback.

The extender's command is taken from ``helm template`` (metrics on, as by default), given free
ports and the local cluster's kubeconfig, and started; the sockets it listens on are read from
the kernel (psutil). ``/filter`` and ``/prioritize`` take no credentials, so they must listen on
127.0.0.1 alone; ``/metrics`` and the probes listen on every address, behind the API server's
authentication. A connection to the functional port through the host's own non-loopback address
is refused. A ``--host`` off loopback stops the extender at start with the reason.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from control_plane_fixtures import render_chart, wait_for
from tpfabric_localcluster.cluster import LocalCluster, free_ports


def chart_extender_command(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Return the extender's command (``python -m tpfabric_scheduler ...``) of the chart."""
    deployment = next(
        d
        for d in render_chart(tmp_path_factory)
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "tpfabric-scheduler"
    )
    containers = deployment["spec"]["template"]["spec"]["containers"]
    command: list[str] = next(c["command"] for c in containers if c["name"] == "extender")
    return command


def host_address() -> str:
    """Return an IPv4 address of this host that is not loopback."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family.name == "AF_INET" and not address.address.startswith("127."):
                return str(address.address)
    pytest.skip("this host has no IPv4 address besides loopback")


def listening(pid: int) -> set[tuple[str, int]]:
    """Return the (address, port) the process ``pid`` listens on (TCP)."""
    connections = psutil.Process(pid).net_connections(kind="tcp")
    return {(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN}


def test_the_charts_extender_serves_filter_on_loopback_only(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    command = chart_extender_command(tmp_path_factory)
    port, metrics_port = free_ports(2)
    flags = [
        f"--port={port}" if a.startswith("--port=") else a
        for a in command[command.index("tpfabric_scheduler") + 1 :]
        if not a.startswith(("--metrics-port=", "--lease-namespace=", "--leader-elect="))
    ]
    assert "--host=127.0.0.1" in flags
    argv = [
        sys.executable,
        "-m",
        "tpfabric_scheduler",
        *flags,
        f"--metrics-port={metrics_port}",
        "--leader-elect=false",
        f"--kubeconfig={local_cluster.kubeconfig}",
    ]
    log = (tmp_path / "extender.log").open("w")
    extender = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        sockets = wait_for(
            lambda: (
                {p for _, p in listening(extender.pid)} >= {port, metrics_port}
                and listening(extender.pid)
            ),
            timeout=30,
            what="the extender listening on both its ports",
            explain=(tmp_path / "extender.log").read_text,
        )
        assert {a for a, p in sockets if p == port} == {"127.0.0.1"}, sockets
        assert {a for a, p in sockets if p == metrics_port} == {"0.0.0.0"}, sockets
        outside = host_address()
        with pytest.raises(urllib.error.URLError, match="Connection refused"):
            urllib.request.urlopen(f"http://{outside}:{port}/filter", timeout=5)
        # the metrics port answers from outside, and only with the API server's consent
        context = ssl._create_unverified_context()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(
                f"https://{outside}:{metrics_port}/metrics", timeout=5, context=context
            )
        assert refused.value.code == 401
    finally:
        extender.terminate()
        extender.wait(timeout=30)
        log.close()


def test_an_extender_told_to_listen_off_loopback_does_not_start(
    local_cluster: LocalCluster,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpfabric_scheduler",
            "--host=0.0.0.0",
            f"--kubeconfig={local_cluster.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--host=0.0.0.0: /filter and /prioritize take no credentials" in done.stderr
