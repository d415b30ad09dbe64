from __future__ import annotations

from pathlib import Path

from rdma_host_builder import (
    DGX_COMPUTE_HCAS,
    UNLIMITED_MEMLOCK,
    HostTree,
    dgx_h100,
    gb200_like,
    gpu_uuid,
    memlock_of,
    roce_v2_host,
)

from tpfabric_rdma_init.affinity import PathType, path_type
from tpfabric_rdma_init.discovery import discover_host, natural_key


def test_dgx_h100_inventory_lists_every_hca_in_natural_order(host_root: Path) -> None:
    dgx_h100(host_root)
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    assert [hca.name for hca in inventory.hcas] == [f"mlx5_{i}" for i in range(12)]
    assert len(inventory.gpus) == 8
    assert {gpu.source for gpu in inventory.gpus} == {"procfs"}


def test_hca_ports_rates_guids_and_uverbs_are_read_from_sysfs(host_root: Path) -> None:
    dgx_h100(host_root)
    hca = discover_host(host_root, UNLIMITED_MEMLOCK).hcas[0]
    port = hca.ports[0]
    assert (port.number, port.state, port.phys_state, port.link_layer) == (
        1,
        "ACTIVE",
        "LinkUp",
        "InfiniBand",
    )
    assert port.rate_gbps == 400.0
    assert port.counters["symbol_error"] == 0
    assert len(port.gids) == 1  # the all-zero slot after the table is not a GID
    assert hca.uverbs == "uverbs0"
    assert hca.uverbs_present
    assert hca.netdevs == ("ibp14s0",)
    assert hca.pci is not None
    assert hca.pci.numa_node == 0


def test_pci_path_is_resolved_through_the_device_symlink(host_root: Path) -> None:
    dgx_h100(host_root)
    hca = discover_host(host_root, UNLIMITED_MEMLOCK).hcas[0]
    assert hca.pci is not None
    assert hca.pci.bdf == "0000:14:00.0"
    assert hca.pci.bridges == ("0000:10:01.0", "0000:11:00.0", "0000:12:01.0")
    assert hca.pci.root_complex == "pci0000:10"


def test_path_types_follow_nccl_switch_then_numa_rule(host_root: Path) -> None:
    dgx_h100(host_root)
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    hcas = {hca.name: hca.pci for hca in inventory.hcas}
    gpu0 = inventory.gpus[0].pci
    assert path_type(gpu0, hcas["mlx5_0"]) == PathType.PIX  # same PCIe switch
    assert path_type(gpu0, hcas["mlx5_3"]) == PathType.PHB  # other switch, same NUMA node
    assert path_type(gpu0, hcas["mlx5_1"]) == PathType.PHB  # storage HCA on the CPU
    assert path_type(gpu0, hcas["mlx5_9"]) == PathType.SYS  # other socket
    assert path_type(gpu0, None) == PathType.SYS


def test_gpus_are_found_by_pci_class_without_driver_procfs(host_root: Path) -> None:
    roce_v2_host(host_root)
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    assert [gpu.bdf for gpu in inventory.gpus] == ["0000:43:00.0", "0000:83:00.0"]
    assert {gpu.source for gpu in inventory.gpus} == {"pci"}


def test_roce_gid_table_types_and_netdevs(host_root: Path) -> None:
    roce_v2_host(host_root)
    port = discover_host(host_root, UNLIMITED_MEMLOCK).hcas[0].ports[0]
    assert port.link_layer == "Ethernet"
    assert [(g.index, g.type, g.ipv4_mapped) for g in port.gids] == [
        (0, "IB/RoCE v1", False),
        (1, "RoCE v2", False),
        (2, "IB/RoCE v1", True),
        (3, "RoCE v2", True),
    ]
    assert port.gids[3].netdev == "ens0f0np0"


def test_gpudirect_sources(host_root: Path, tmp_path: Path) -> None:
    dgx = discover_host(dgx_h100(host_root).root, UNLIMITED_MEMLOCK).gpudirect
    assert (dgx.peer_memory, dgx.dma_buf, dgx.available) == ("nvidia_peermem", False, True)
    roce = discover_host(roce_v2_host(tmp_path / "roce").root, UNLIMITED_MEMLOCK).gpudirect
    assert (roce.peer_memory, roce.dma_buf, roce.available) == (None, True, True)
    bare = discover_host(dgx_h100(tmp_path / "bare", peermem=False).root, UNLIMITED_MEMLOCK)
    assert not bare.gpudirect.available


def test_memlock_capabilities_and_devices(host_root: Path) -> None:
    dgx_h100(host_root, ipc_lock=False, dev_infiniband=False)
    inventory = discover_host(host_root, memlock_of(64 * 1024))
    assert inventory.memlock_soft == 65536
    assert inventory.cap_ipc_lock is False
    assert not inventory.dev_infiniband_present
    assert not any(hca.uverbs_present for hca in inventory.hcas)


def test_an_empty_root_yields_an_empty_inventory(tmp_path: Path) -> None:
    inventory = discover_host(tmp_path, UNLIMITED_MEMLOCK)
    assert (inventory.hcas, inventory.gpus, inventory.cap_ipc_lock) == ((), (), None)
    assert not inventory.gpudirect.available


def test_natural_order_puts_mlx5_2_before_mlx5_10() -> None:
    assert sorted(DGX_COMPUTE_HCAS, key=natural_key) == list(DGX_COMPUTE_HCAS)
    assert sorted(["mlx5_10", "mlx5_2", "mlx5_1"], key=natural_key) == [
        "mlx5_1",
        "mlx5_2",
        "mlx5_10",
    ]


def test_ipc_lock_only_in_the_bounding_set_is_not_granted(host_root: Path) -> None:
    # A non-root container: `capabilities.add` lands in the bounding set only, and only the
    # effective set lets ibv_reg_mr pin memory (kubernetes#56374).
    status = host_root / "proc/self/status"
    status.parent.mkdir(parents=True)
    status.write_text("CapEff:\t0000000000000000\nCapBnd:\t00000000a80465fb\n")
    assert discover_host(host_root, UNLIMITED_MEMLOCK).cap_ipc_lock is False
    status.write_text("CapEff:\t00000000a80465fb\nCapBnd:\t00000000a80465fb\n")
    assert discover_host(host_root, UNLIMITED_MEMLOCK).cap_ipc_lock is True


def test_memlock_is_read_from_the_tree_before_the_probe(host_root: Path) -> None:
    HostTree(host_root).memlock(64 * 1024)
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    assert (inventory.memlock_soft, inventory.memlock_source) == (65536, "proc/self/limits")


def test_visible_devices_select_the_pods_gpus_by_uuid_or_index(host_root: Path) -> None:
    dgx_h100(host_root)
    by_uuid = discover_host(host_root, UNLIMITED_MEMLOCK, visible_devices=f"{gpu_uuid(2)}")
    assert [g.minor for g in by_uuid.gpus] == [2]
    assert (by_uuid.gpus_on_node, by_uuid.gpu_allocation) == (8, "NVIDIA_VISIBLE_DEVICES")
    by_index = discover_host(host_root, UNLIMITED_MEMLOCK, visible_devices="0,1")
    assert [g.minor for g in by_index.gpus] == [0, 1]


def test_dev_nvidia_nodes_select_the_pods_gpus(host_root: Path) -> None:
    dgx_h100(host_root).gpu_device_nodes((4, 5))
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    assert [g.minor for g in inventory.gpus] == [4, 5]
    assert inventory.gpu_allocation == "dev/nvidia*"


def test_nic_type_is_read_from_pci_and_sysfs(host_root: Path) -> None:
    gb200_like(host_root)
    hcas = {h.name: h for h in discover_host(host_root, UNLIMITED_MEMLOCK).hcas}
    assert (hcas["mlx5_0"].pci_device_id, hcas["mlx5_0"].hca_type) == ("0xa2dc", "MT41692")
    assert hcas["mlx5_1"].pci_device_id == "0x1021"
