"""The kind end-to-end test: e2e/kind/run.sh on a machine with a Docker engine.

It builds and loads the images, labels four kind workers with a two-leaf fabric, deploys the fake
RDMA device plugin, installs the chart, applies a TensorParallelJob and checks its placement and
the NCCL config its workers got. Skipped where no Docker engine answers; the files it applies are
validated on the local control plane by tests/integration/test_helm.py either way.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RUN_SH = Path(__file__).resolve().parents[2] / "e2e" / "kind" / "run.sh"


def _docker_engine() -> str | None:
    """Return why no Docker engine can be used, or None when one answers."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker CLI on PATH"
    try:
        done = subprocess.run(
            [docker, "info"], capture_output=True, text=True, timeout=20, check=False
        )
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer in 20 s"
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:]
        return f"`docker info` failed: {last[0] if last else f'exit {done.returncode}'}"
    return None


@pytest.mark.timeout(3600)
def test_a_job_lands_on_one_leaf_of_a_kind_cluster_with_its_nccl_config() -> None:
    reason = _docker_engine()
    if reason is not None:
        pytest.skip(
            f"kind e2e needs a Docker engine ({reason}); run `make e2e-kind` where one runs"
        )
    done = subprocess.run(
        ["bash", str(RUN_SH)], capture_output=True, text=True, timeout=3500, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    assert "PASS:" in done.stdout
