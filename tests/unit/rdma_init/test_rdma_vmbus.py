"""Hyper-V / Azure VMs: GPUs and NICs on VMBus, whose sysfs paths do not start with ``pci``."""

from __future__ import annotations

from pathlib import Path

from rdma_host_builder import UNLIMITED_MEMLOCK, azure_nd_h100_v5

from tpfabric_rdma_init.discovery import discover_host
from tpfabric_rdma_init.prepare import InitOptions, prepare_pod

AZURE_TOPOLOGY = "/opt/microsoft/ndv5-topo.xml"


def test_vmbus_pci_paths_give_bus_id_domain_and_numa_node(host_root: Path) -> None:
    azure_nd_h100_v5(host_root)
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    gpu = inventory.gpus[5].pci
    nic = inventory.hcas[5].pci
    assert gpu is not None
    assert nic is not None
    assert (gpu.bdf, gpu.root_complex, gpu.numa_node, gpu.vmbus) == (
        "0006:00:00.0",
        "pci0006:00",
        1,
        True,
    )
    assert (nic.bdf, nic.numa_node, nic.vmbus) == ("0106:00:00.0", 1, True)


def test_vmbus_pairs_within_the_numa_node_and_writes_no_topology_file(
    host_root: Path, shared_dir: Path
) -> None:
    options = InitOptions(
        shared_dir=shared_dir,
        root=azure_nd_h100_v5(host_root).root,
        topology_xml=True,
        nccl_library="image",
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    pairs = result.report["fabric"]["pairs"]
    assert [(p["gpu"], p["hca"], p["path"]) for p in pairs][4] == (
        "0005:00:00.0",
        "mlx5_ib4",
        "PHB",
    )
    assert not (shared_dir / "nccl-topo.xml").exists()
    assert "NCCL_TOPO_FILE" not in result.settings
    assert any("VMBus" in w and "no NCCL topology file" in w for w in result.warnings)


def test_vmbus_under_required_needs_the_vms_topology_file(
    host_root: Path, shared_dir: Path
) -> None:
    # Without a topology file NCCL sees each GPU and NIC alone under the host bridge (PHB) and
    # does not use GPUDirect RDMA between them: no pass under required.
    options = InitOptions(
        shared_dir=shared_dir,
        root=azure_nd_h100_v5(host_root).root,
        policy="required",
        nccl_library="image",
    )
    failed = prepare_pod(options, UNLIMITED_MEMLOCK)
    assert failed.exit_code == 1
    assert [p.code for p in failed.problems] == ["no-pci-topology"]
    assert "NCCL_TOPO_FILE" in failed.problems[0].message
    with_file = prepare_pod(
        InitOptions(
            shared_dir=shared_dir,
            root=options.root,
            policy="required",
            nccl_library="image",
            nccl_overrides=f'{{"NCCL_TOPO_FILE": "{AZURE_TOPOLOGY}"}}',
        ),
        UNLIMITED_MEMLOCK,
    )
    assert with_file.exit_code == 0
    assert with_file.settings["NCCL_TOPO_FILE"] == AZURE_TOPOLOGY
    assert with_file.settings["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_ib{i}:1" for i in range(8))
