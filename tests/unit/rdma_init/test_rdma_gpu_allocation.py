"""Which GPUs are the pod's: CDI's ``void``, host indices against a masked procfs listing."""

from __future__ import annotations

from pathlib import Path

from rdma_host_builder import (
    DGX_IB_HCA,
    UNLIMITED_MEMLOCK,
    dgx_h100,
    gpu_uuid,
    mask_gpu_procfs,
)

from tpfabric_rdma_init.discovery import discover_host
from tpfabric_rdma_init.prepare import InitOptions, prepare_pod


def _options(root: Path, shared_dir: Path, visible: str, policy: str) -> InitOptions:
    return InitOptions(
        shared_dir=shared_dir,
        root=root,
        policy=policy,
        visible_devices=visible,
        nccl_library="image",
    )


def test_cdi_void_tells_the_pods_gpus_from_its_dev_nvidia_nodes(
    host_root: Path, shared_dir: Path
) -> None:
    # CDI mode: the device plugin sets NVIDIA_VISIBLE_DEVICES=void and injects /dev/nvidiaN.
    root = dgx_h100(host_root).gpu_device_nodes((0, 1, 2, 3, 4, 5, 6, 7)).root
    result = prepare_pod(_options(root, shared_dir, "void", "required"), UNLIMITED_MEMLOCK)
    assert result.report["host"]["gpu_allocation"] == "dev/nvidia*"
    assert len(result.report["host"]["gpus"]) == 8
    assert result.settings["NCCL_IB_HCA"] == DGX_IB_HCA  # compute NICs only, no storage HCA


def test_cdi_void_without_peermem_fails_required(host_root: Path, shared_dir: Path) -> None:
    root = dgx_h100(host_root, peermem=False).gpu_device_nodes((0, 1)).root
    result = prepare_pod(_options(root, shared_dir, "void", "required"), UNLIMITED_MEMLOCK)
    assert result.exit_code == 1
    assert [p.code for p in result.problems] == ["no-peermem"]


def test_cdi_none_and_empty_are_unknown_not_no_gpus(host_root: Path) -> None:
    dgx_h100(host_root).gpu_device_nodes((6, 7))
    for value in ("none", "", " "):
        inventory = discover_host(host_root, UNLIMITED_MEMLOCK, visible_devices=value)
        assert [g.minor for g in inventory.gpus] == [6, 7], value


def test_host_indices_match_a_masked_procfs_listing_by_bus_id(
    host_root: Path, shared_dir: Path
) -> None:
    # The pod's procfs lists only its GPUs (host GPUs 1 and 2); the indices are the host's.
    root = mask_gpu_procfs(dgx_h100(host_root), (1, 2)).root
    result = prepare_pod(_options(root, shared_dir, "1,2", "required"), UNLIMITED_MEMLOCK)
    host = result.report["host"]
    assert [g["minor"] for g in host["gpus"]] == [1, 2]
    assert host["gpus_on_node"] == 8
    assert result.settings["NCCL_IB_HCA"] == "=mlx5_3:1,mlx5_4:1"


def test_uuids_match_a_masked_procfs_listing(host_root: Path) -> None:
    mask_gpu_procfs(dgx_h100(host_root), (5,))
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK, visible_devices=gpu_uuid(5))
    assert [g.minor for g in inventory.gpus] == [5]
    assert inventory.gpu_allocation == "NVIDIA_VISIBLE_DEVICES"
