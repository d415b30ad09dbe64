"""The kind tier: e2e/kind/run.sh as a pytest test (marker ``e2e``; ``make test-e2e``).

A real kind cluster built without a registry, tpfabric's three images, the chart under the
"restricted" Pod Security profile, the fake RDMA device plugin under real kubelets and a
TensorParallelJob placed on one leaf, its rdma-init writing the NCCL config; then a
LeaderWorkerSet of two groups (the real LWS controller, image FROM scratch) taken in by the
chart's gang webhook, each group recorded as a Gang and placed whole on a leaf of its own, with
the same wiring, and rolled one group at a time: every new pod gated again, each group back on
the leaf it left (see run.sh).

Where no Docker engine answers, e2e/kind/docker-engine.sh installs and starts one (root, apt);
the test is skipped only when that is impossible, saying why. run.sh's output is not captured
by this test: pytest shows it on failure, and live with ``-s`` (as CI runs it).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

KIND = Path(__file__).resolve().parents[2] / "e2e" / "kind"
#: run.sh and docker-engine.sh exit with this when no Docker engine can be had.
NO_ENGINE = 3

pytestmark = pytest.mark.e2e


def _engine_or_skip() -> None:
    """Start a Docker engine if there is none (installing it if need be); skip if impossible."""
    done = subprocess.run(
        ["bash", str(KIND / "docker-engine.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode == NO_ENGINE:
        last = done.stderr.strip().splitlines()[-1:] or ["no reason given"]
        pytest.skip(f"kind e2e skipped: no Docker engine can be started here ({last[0]})")
    assert done.returncode == 0, f"e2e/kind/docker-engine.sh failed:\n{done.stderr[-4000:]}"


@pytest.mark.timeout(3600)
def test_a_job_lands_on_one_leaf_of_a_kind_cluster_with_its_nccl_config() -> None:
    _engine_or_skip()
    done = subprocess.run(["bash", str(KIND / "run.sh")], timeout=3500, check=False)
    if done.returncode == NO_ENGINE:
        pytest.skip("kind e2e skipped: no Docker engine can be started here (see the output)")
    assert done.returncode == 0, "e2e/kind/run.sh failed: its output above says where"
