"""The init program's report names, for each GPU of the pod, the NIC port it paired and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rdma_host_builder import UNLIMITED_MEMLOCK, azure_nd_h100_v5, dgx_h100

from tpfabric_rdma_init.cli import main


def _run(root: Path, shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    argv = ["--root", str(root), "--shared-dir", str(shared_dir), "--annotations-file", ""]
    assert main([*argv, "--policy", "required"], UNLIMITED_MEMLOCK) == 0
    return capsys.readouterr().out


def test_every_gpu_names_its_port_path_numa_and_role(
    host_root: Path, shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _run(dgx_h100(host_root).root, shared_dir, capsys)
    assert "    0000:13:00.0 -> mlx5_0:1: PIX (same PCIe switch), same NUMA node 0, compute" in out
    assert "    0000:f3:00.0 -> mlx5_11:1: PIX (same PCIe switch), same NUMA node 1, compute" in out
    pairs = json.loads((shared_dir / "rdma-init-report.json").read_text())["fabric"]["pairs"]
    assert pairs[0] == {
        "gpu": "0000:13:00.0",
        "hca": "mlx5_0",
        "port": 1,
        "path": "PIX",
        "gpu_numa": 0,
        "nic_numa": 0,
        "role": "compute",
        "why": "PIX (same PCIe switch), same NUMA node 0, compute NIC",
    }


def test_vmbus_pairs_say_they_are_told_by_numa_node(
    host_root: Path, shared_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = azure_nd_h100_v5(host_root).root
    argv = ["--root", str(root), "--shared-dir", str(shared_dir), "--annotations-file", ""]
    main([*argv, "--nccl-overrides", '{"NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml"}'])
    out = capsys.readouterr().out
    assert "    0009:00:00.0 -> mlx5_ib4:1: PHB (Hyper-V VMBus: no PCIe switch visible" in out
