"""The example jobs start with a plain ``torchrun train.py``: every flag comes from PET_*."""

from __future__ import annotations

import pytest

from tpfabric_core.api import TensorParallelJob
from tpfabric_operator.jobs.children import worker_pod
from tpj_examples import valid_jobs

#: torchrun flags that have no default a multi-node job can use
STATIC = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
ELASTIC = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT"}


@pytest.mark.parametrize("name", sorted(valid_jobs()))
def test_every_example_runs_with_plain_torchrun(name: str) -> None:
    manifest = valid_jobs()[name]
    job = TensorParallelJob.model_validate(manifest)
    pod = worker_pod(job, manifest["metadata"]["name"], "ns", 1, "init:1")
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["torchrun", "train.py"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    needed = ELASTIC if job.spec.launcher.rendezvous == "c10d" else STATIC
    assert needed <= set(env), needed - set(env)
    assert env["PET_NNODES"] == str(job.spec.workers)
    assert env["PET_NPROC_PER_NODE"] == str(job.spec.gpus_per_worker)
    assert env["WORLD_SIZE"] == str(job.spec.workers * job.spec.gpus_per_worker)
