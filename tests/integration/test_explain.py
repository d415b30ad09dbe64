"""`tpfabric explain` as a user runs it, in its own process, against a job the real placer placed
on the local control plane (64 kwok nodes of the small fabric)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from control_plane_fixtures import Jobs, clear_jobs_and_pods
from tpfabric_localcluster.cluster import LocalCluster

pytestmark = pytest.mark.integration


def explain(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """Return the finished ``tpfabric explain ARGS`` run against ``cluster``."""
    command = [sys.executable, "-m", "tpfabric_cli", "explain", *args]
    return subprocess.run(
        [*command, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def jobs(api: client.ApiClient, namespace: str, scheduling: LocalCluster) -> Iterator[Jobs]:
    yield Jobs(api, namespace)
    clear_jobs_and_pods(api, namespace)


def test_explain_names_the_domain_and_the_node_of_every_rank(
    jobs: Jobs, namespace: str, scheduling: LocalCluster, tmp_path: Path
) -> None:
    jobs.create("explained", 4)
    pods = jobs.wait_running("explained")
    placement = jobs.placement("explained")

    shown = explain(scheduling, "explained", "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert f"TensorParallelJob {namespace}/explained" in shown.stdout
    assert "found a TensorParallelJob, no Gang of that name" in shown.stderr
    assert f"placement Planned: {placement['message']}" in shown.stdout
    assert f"domain {placement['domain']}" in shown.stdout
    for rank, pod in enumerate(pods):
        node = placement["nodes"][rank]
        row = next(line for line in shown.stdout.splitlines() if pod.metadata.name in line)
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        assert cells[:4] == [str(rank), pod.metadata.name, node, node], row
    assert "off plan" not in shown.stdout

    picture = tmp_path / "explained.svg"
    as_json = explain(scheduling, "explained", "-n", namespace, "--kind", "tpj", "--json",
                      "--picture", str(picture))  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert {k: document["placement"][k] for k in ("state", "message", "domain", "nodes")} == {
        k: placement[k] for k in ("state", "message", "domain", "nodes")
    }
    assert [row["boundNode"] for row in document["ranks"]] == placement["nodes"]
    assert f"TensorParallelJob {namespace}/explained" in picture.read_text()


def test_a_job_that_does_not_exist_is_one_line_naming_namespace_and_name(
    namespace: str, scheduling: LocalCluster
) -> None:
    missing = explain(scheduling, "no-such-job", "-n", namespace)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"error: no TensorParallelJob or Gang named 'no-such-job' in namespace '{namespace}'"
    )
    assert missing.stdout == ""
