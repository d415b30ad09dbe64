"""Hyper-V / Azure VMs: GPUs and NICs on VMBus, whose sysfs paths do not start with ``pci``; the
topology file written from the pairing gives NCCL back GPUDirect RDMA."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

from published_lists import PUBLISHED
from rdma_host_builder import UNLIMITED_MEMLOCK, azure_nd_h100_v5

from tpfabric_rdma_init.discovery import discover_host
from tpfabric_rdma_init.prepare import InitOptions, prepare_pod

AZURE_TOPOLOGY = "/opt/microsoft/ndv5-topo.xml"


def switch_groups(xml_text: str) -> set[tuple[str, frozenset[str], frozenset[str]]]:
    """Return (NUMA node, GPU bus ids, NIC bus ids) of each PCI switch of an NCCL topology."""
    groups = set()
    for cpu in ET.fromstring(xml_text).iter("cpu"):
        for switch in cpu.findall("pci"):
            children = switch.findall("pci")
            gpus = frozenset(c.get("busid", "") for c in children if c.get("class") == "0x030200")
            nics = frozenset(c.get("busid", "") for c in children if c.get("class") == "0x020700")
            groups.add((cpu.get("numaid", ""), gpus, nics))
    return groups


def test_vmbus_pci_paths_give_bus_id_domain_and_numa_node(host_root: Path) -> None:
    azure_nd_h100_v5(host_root)
    inventory = discover_host(host_root, UNLIMITED_MEMLOCK)
    gpu = inventory.gpus[5].pci
    nic = inventory.hcas[5].pci
    assert gpu is not None
    assert nic is not None
    assert (gpu.bdf, gpu.root_complex, gpu.numa_node, gpu.vmbus) == (
        "000a:00:00.0",
        "pci000a:00",
        1,
        True,
    )
    assert (gpu.link_speed, gpu.link_width) == ("32.0 GT/s PCIe", 16)
    assert (nic.bdf, nic.numa_node, nic.vmbus) == ("0106:00:00.0", 1, True)


def test_vmbus_topology_file_pairs_gpus_and_nics_as_azures_own(
    host_root: Path, shared_dir: Path
) -> None:
    options = InitOptions(
        shared_dir=shared_dir, root=azure_nd_h100_v5(host_root).root, nccl_library="image"
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    written = (shared_dir / "nccl-topo.xml").read_text()
    azure = (PUBLISHED / "ndv5-topo.xml").read_text()
    assert switch_groups(written) == switch_groups(azure)
    assert len(switch_groups(written)) == 8
    assert result.settings["NCCL_TOPO_FILE"] == f"{shared_dir}/nccl-topo.xml"
    assert "GPUDirect RDMA" in result.report["nccl"]["reasons"]["NCCL_TOPO_FILE"]
    assert result.report["nccl"]["topology_file"] == "vm-pairing"


def test_vmbus_virtual_switches_carry_their_gpus_link(host_root: Path, shared_dir: Path) -> None:
    options = InitOptions(
        shared_dir=shared_dir, root=azure_nd_h100_v5(host_root).root, nccl_library="image"
    )
    prepare_pod(options, UNLIMITED_MEMLOCK)
    root = ET.fromstring((shared_dir / "nccl-topo.xml").read_text())
    switch = root.find("cpu/pci")
    assert switch is not None
    assert switch.get("busid") == "ffff:ff:01.0"
    assert (switch.get("link_speed"), switch.get("link_width")) == ("32.0 GT/s PCIe", "16")
    assert switch.get("vendor") == "0x0000"


def test_vmbus_under_required_passes_with_the_topology_from_the_pairing(
    host_root: Path, shared_dir: Path
) -> None:
    # Without a topology file NCCL sees each GPU and NIC alone under the host bridge (PHB) and
    # does not use GPUDirect RDMA between them; the pairing's file puts them back together.
    options = InitOptions(
        shared_dir=shared_dir,
        root=azure_nd_h100_v5(host_root).root,
        policy="required",
        nccl_library="image",
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    assert result.exit_code == 0
    assert result.outcome == "rdma"
    assert "NCCL_NET_GDR_LEVEL" not in result.settings
    assert result.settings["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_ib{i}:1" for i in range(8))


def test_vmbus_keeps_the_jobs_own_topology_file(host_root: Path, shared_dir: Path) -> None:
    options = InitOptions(
        shared_dir=shared_dir,
        root=azure_nd_h100_v5(host_root).root,
        policy="required",
        nccl_library="image",
        nccl_overrides=f'{{"NCCL_TOPO_FILE": "{AZURE_TOPOLOGY}"}}',
    )
    result = prepare_pod(options, UNLIMITED_MEMLOCK)
    assert result.exit_code == 0
    assert result.settings["NCCL_TOPO_FILE"] == AZURE_TOPOLOGY
    assert result.report["nccl"]["reasons"]["NCCL_TOPO_FILE"].startswith("spec.nccl")
    assert not (shared_dir / "nccl-topo.xml").exists()


def test_vmbus_pairs_within_the_numa_node(host_root: Path, shared_dir: Path) -> None:
    options = InitOptions(
        shared_dir=shared_dir, root=azure_nd_h100_v5(host_root).root, nccl_library="image"
    )
    pairs = prepare_pod(options, UNLIMITED_MEMLOCK).report["fabric"]["pairs"]
    assert [(p["gpu"], p["hca"], p["path"]) for p in pairs][3] == (
        "0008:00:00.0",
        "mlx5_ib3",
        "PHB",
    )
