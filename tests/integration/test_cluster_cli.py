"""`tpfabric cluster up/status/down` as a user runs them, in their own processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from kubernetes import client

from tpfabric_core import labels
from tpfabric_core.api import GROUP, VERSION
from tpfabric_core.api.gang import GANG_PLURAL
from tpfabric_core.gangs import GANG_LABEL
from tpfabric_localcluster.cluster import api_client
from tpfabric_localcluster.toolchain import find_toolchain

TPFABRIC = [sys.executable, "-m", "tpfabric_cli"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "gangs"


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
    """Return (state root, state.json) of a 64-node cluster brought up by the CLI, with gangs of
    other controllers (tpfabric, its gang webhook, LWS and JobSet)."""
    state = tmp_path_factory.mktemp("cli-state")
    up = tpfabric(state, "cluster", "up", "--name", "cli", "--nodes", "64", "--gangs")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "64 fake GPU nodes Ready" in up.stdout
    assert "kubectl apply -f examples/gangs/" in up.stdout
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


def test_the_gang_examples_run_as_docs_gangs_md_shows(cli_cluster: tuple[Path, dict]) -> None:
    """`kubectl apply -f examples/gangs/` on `cluster up --gangs`: every gang of the shipped
    LeaderWorkerSets and JobSet gets a Gang record, is placed whole in one leaf and runs."""
    state, saved = cli_cluster
    assert {
        "tpfabric-operator",
        "tpfabric-gang-webhook",
        "lws-controller",
        "jobset-controller",
    } <= set(saved["components"])
    kubeconfig = state / "cli" / "kubeconfig"
    kubectl = str(find_toolchain(("kubectl",)).path("kubectl"))
    applied = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "apply", "-f", str(EXAMPLES)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr
    # the LeaderWorkerSets' groups run on; the JobSet's Jobs complete (kwok ends a Job's pods)
    serving = {"vllm-405b-0", "vllm-405b-1", "vllm-prefill-0", "vllm-decode-0"}
    with api_client(kubeconfig) as api:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

        def phases() -> dict[str, str]:
            gangs = custom.list_namespaced_custom_object(GROUP, VERSION, "serving", GANG_PLURAL)
            return {
                g["metadata"]["name"]: (g.get("status") or {}).get("phase", "")
                for g in gangs["items"]
            }

        def done() -> bool:
            found = phases()
            jobset = custom.get_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", "serving", "jobsets", "train-70b"
            )
            finished = (jobset.get("status") or {}).get("terminalState") == "Completed"
            return all(found.get(name) == "Running" for name in serving) and finished

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not done():
            time.sleep(1)
        assert done(), phases()
        leaves: dict[str, set[str]] = {}
        nodes = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
        pods = core.list_namespaced_pod("serving").items
        for pod in pods:
            assert pod.spec.scheduler_name == "tpfabric-scheduler", pod.metadata.name
            gang = pod.metadata.labels[GANG_LABEL]
            leaves.setdefault(gang, set()).add(nodes[pod.spec.node_name][labels.LEAF])
        assert set(leaves) == {*serving, "train-70b"}
        assert all(len(found) == 1 for found in leaves.values()), leaves


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
