"""The demo reads the shipped example jobs as a user writes them, and asks of the default
scheduler's plain pods what the operator asks of the job's workers (RDMA on by default)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tpfabric_cli.demo import CONTRAST_JOB, EXAMPLES, _Job
from tpfabric_core.rdma_default import NodeOffer

NODES = [
    NodeOffer(name=f"n{i}", labels={}, resources={"nvidia.com/gpu": 8, "rdma/ib": 8})
    for i in range(4)
]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_job_loads(path: Path) -> None:
    job = _Job.load(path)
    assert job.workers >= 1
    assert job.name == yaml.safe_load(path.read_text())["metadata"]["name"]


def test_a_job_that_names_no_rdma_asks_the_clusters_resource_as_the_nodes_offer_it() -> None:
    job = _Job.load(CONTRAST_JOB)
    assert not (job.manifest["spec"].get("rdma") or {}).get("resourceName")
    assert job.with_rdma("rdma/ib", NODES).rdma == ("rdma/ib", 8)


def test_a_half_node_worker_asks_half_the_nodes_devices() -> None:
    job = _Job.load(CONTRAST_JOB)
    spec = {**job.manifest["spec"], "gpusPerWorker": 4, "pipelineParallelSize": 2}
    manifest = {**job.manifest, "spec": spec}
    half = _Job(job.name, job.workers, 4, manifest)
    assert half.with_rdma("rdma/ib", NODES).rdma == ("rdma/ib", 4)


def test_what_the_manifest_names_wins_and_count_zero_is_tcp() -> None:
    job = _Job.load(CONTRAST_JOB)
    named = {
        **job.manifest,
        "spec": {**job.manifest["spec"], "rdma": {"resourceName": "x/y", "count": 2}},
    }
    assert _Job(job.name, job.workers, 8, named).with_rdma("rdma/ib", NODES).rdma == ("x/y", 2)
    tcp = {**job.manifest, "spec": {**job.manifest["spec"], "rdma": {"count": 0}}}
    assert _Job(job.name, job.workers, 8, tcp).with_rdma("rdma/ib", NODES).rdma is None
