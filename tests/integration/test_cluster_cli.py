"""`tpfabric cluster up/status/down` as a user runs them, in their own processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from kubernetes import client

from tpfabric_core import labels
from tpfabric_localcluster.cluster import api_client

TPFABRIC = [sys.executable, "-m", "tpfabric_cli"]


def tpfabric(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TPFABRIC_STATE": str(state)}
    return subprocess.run(
        [*TPFABRIC, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """Return (state root, state.json) of a 64-node cluster brought up by the CLI."""
    state = tmp_path_factory.mktemp("cli-state")
    up = tpfabric(state, "cluster", "up", "--name", "cli", "--nodes", "64")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "64 fake GPU nodes Ready" in up.stdout
    saved = json.loads((state / "cli" / "state.json").read_text())
    yield state, saved
    tpfabric(state, "cluster", "down", "--name", "cli")


def test_up_creates_64_labelled_ready_nodes(cli_cluster: tuple[Path, dict]) -> None:
    state, _ = cli_cluster
    with api_client(state / "cli" / "kubeconfig") as api:
        nodes = client.CoreV1Api(api).list_node().items
    assert len(nodes) == 64
    assert len({n.metadata.labels[labels.LEAF] for n in nodes}) == 8
    assert all(n.status.allocatable["rdma/ib"] == "8" for n in nodes)


def test_status_reports_a_crashed_component_with_its_log_tail(
    cli_cluster: tuple[Path, dict],
) -> None:
    state, saved = cli_cluster
    ok = tpfabric(state, "cluster", "status", "--name", "cli")
    assert ok.returncode == 0, ok.stderr
    kwok = saved["components"]["kwok"]
    os.kill(kwok["pid"], signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        psutil.Process(kwok["pid"]).wait(timeout=10)
    crashed = tpfabric(state, "cluster", "status", "--name", "cli")
    assert crashed.returncode == 1
    assert f"kwok (pid {kwok['pid']}) is not running; log {kwok['log']}" in crashed.stderr


def test_down_leaves_no_process_and_no_listening_port(cli_cluster: tuple[Path, dict]) -> None:
    state, saved = cli_cluster
    pids = [c["pid"] for c in saved["components"].values()]
    ports = list(saved["ports"].values())
    assert any(listening(p) for p in ports)

    down = tpfabric(state, "cluster", "down", "--name", "cli")

    assert down.returncode == 0, down.stderr
    still = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert still == []
    assert [p for p in ports if listening(p)] == []
    assert not (state / "cli").exists()
